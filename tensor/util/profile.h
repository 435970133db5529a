#pragma once
// NOTE [ The op profile ]
// Where a program's time goes, kernel by kernel. The layers mark a Span around each kernel they
// dispatch (the ops layer around every backend primitive, each fused unit around its kernels); a
// caller marks Phases (forward, backward, optimizer) and reads the table at the end
// (bench/profile/step_profile.cpp). Off by default: a span then costs a relaxed atomic load.
//  - Spans nest (a fused unit converts or copies its inputs inside its span; a bf16 result is cast
//    back inside the product's): each span counts its own time, the spans inside it excluded, so
//    the rows of a phase add up to at most its wall time. What is left (checks, allocation,
//    recording the graph, freeing it) is the phase's framework overhead. The profiler's own
//    bookkeeping is counted apart (PhaseTime::profiler_seconds), in no row.
//  - Only the thread that called start() records: kernels that run on worker threads are inside a
//    span of that thread, and wall time counted twice would mean nothing.
//  - Host time: a device's asynchronous kernels are timed at their launch unless the caller
//    synchronises inside the span (the CUDA backend does not), so a CUDA profile shows launches.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace mvgpt::profile {

// One kernel's calls within one phase.
struct Row {
  std::string phase;   // the innermost Phase it ran in ("" outside every phase)
  std::string op;      // "matmul", "add", "attention", "convert", ...
  std::string detail;  // what tells its calls apart where that matters: a product's M x K x N
  int64_t calls = 0;
  double seconds = 0;  // own time: the spans inside it excluded
  double flops = 0;    // floating-point operations done, where the span counts them (the products)
};

struct PhaseTime {
  std::string name;
  int64_t count = 0;
  double seconds = 0;           // wall time inside the phase, its spans and the profiler's cost included
  double profiler_seconds = 0;  // of which the profiler's own bookkeeping
};

// Phases that nest are each timed whole, so only disjoint ones add up to a program's time.
struct Report {
  std::vector<PhaseTime> phases;  // in order of first entry
  std::vector<Row> rows;          // by phase (in the phases' order), then own time, longest first
};

namespace detail {
using Clock = std::chrono::steady_clock;
extern std::atomic<bool> g_recording;
bool records_this_thread();
void begin(const char* op, std::string detail, double flops, Clock::time_point entered);
void end();
void note(std::string kernel, Clock::time_point entered);
}  // namespace detail

// Whether a profile is recording on this thread (cheap when none is).
inline bool enabled() {
  return detail::g_recording.load(std::memory_order_relaxed) && detail::records_this_thread();
}

// Starts a profile recorded by the calling thread; throws std::logic_error when one is recording.
void start();
// Stops recording and returns what was recorded since start(). Throws std::logic_error when
// called from another thread than start()'s or with a span or phase still open.
Report stop();
// Stops the calling thread's profile, if any, and drops its figures (never throws).
void cancel() noexcept;

// A profile for a scope: stop() returns the report; leaving the scope without it (an exception)
// cancels the profile, so no recording outlives its scope.
class Recording {
 public:
  Recording() { start(); }
  ~Recording() { cancel(); }
  Report stop() { return profile::stop(); }
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;
};

// A kernel's time, under the name `op` (read when the span ends). The detail's form computes its
// text and flop count only while recording: Span s("matmul", [&] { return Detail{...}; }).
struct Detail {
  std::string text;
  double flops = 0;
};
class Span {
 public:
  explicit Span(const char* op) : on_(enabled()) {
    if (on_) detail::begin(op, {}, 0, detail::Clock::now());
  }
  template <class F>
    requires std::is_invocable_r_v<Detail, F>
  Span(const char* op, F&& describe) : on_(enabled()) {
    if (on_) {
      const auto entered = detail::Clock::now();
      Detail d = std::forward<F>(describe)();
      detail::begin(op, std::move(d.text), d.flops, entered);
    }
  }
  ~Span() {
    if (on_) detail::end();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  bool on_;
};

// Names the implementation that runs the innermost open span's kernel, where a library picks one
// per shape (a bf16 product's oneDNN kernel, say): appended to the span's detail after a comma, so
// that its row says which ran. `name` is called only while recording, and its time is the
// profiler's; a span keeps its first note.
template <class F>
  requires std::is_invocable_r_v<std::string, F>
void note_kernel(F&& name) {
  if (!enabled()) return;
  const auto entered = detail::Clock::now();
  detail::note(std::forward<F>(name)(), entered);
}

// A named part of the program; `name` must outlive the phase (a string literal). Phases nest: the
// innermost names the spans inside it.
class Phase {
 public:
  explicit Phase(const char* name);
  ~Phase();
  Phase(const Phase&) = delete;
  Phase& operator=(const Phase&) = delete;

 private:
  bool on_;
  const char* previous_ = nullptr;
  detail::Clock::time_point start_;
};

}  // namespace mvgpt::profile
