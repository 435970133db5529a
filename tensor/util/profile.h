#pragma once
// NOTE [ The op profile ]
// Where a program's time goes, kernel by kernel. The layers mark a Span around each kernel they
// dispatch (the ops layer around every backend primitive, each fused unit around its kernels); a
// caller marks Phases (forward, backward, optimizer) and reads the table at the end
// (bench/step_profile.cpp). Off by default: a span then costs one relaxed atomic load.
//  - Spans nest (a product's operands are converted to bf16 inside it, a fused op's dispatch copies
//    its inputs): each span counts its own time, the spans inside it excluded, so the rows of a
//    phase add up to at most its wall time. What is left (checks, allocation, recording the graph,
//    freeing it) is the phase's framework overhead.
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
  std::string op;      // "matmul", "add", "attention", "convert f32->bf16", ...
  std::string detail;  // what tells its calls apart where that matters: a product's M x K x N
  int64_t calls = 0;
  double seconds = 0;  // own time: the spans inside it excluded
  double flops = 0;    // floating-point operations done, where the span counts them (the products)
};

struct PhaseTime {
  std::string name;
  int64_t count = 0;
  double seconds = 0;  // wall time inside the phase, its spans included
};

struct Report {
  std::vector<PhaseTime> phases;  // in order of first entry
  std::vector<Row> rows;          // by phase (in the phases' order), then own time, longest first
};

namespace detail {
extern std::atomic<bool> g_recording;
bool records_this_thread();
void begin(const char* op, std::string detail, double flops);
void end();
}  // namespace detail

// Whether a profile is recording on this thread (cheap when none is).
inline bool enabled() {
  return detail::g_recording.load(std::memory_order_relaxed) && detail::records_this_thread();
}

// Starts a profile recorded by the calling thread, dropping any earlier one's figures.
void start();
// Stops recording and returns what was recorded since start(). Throws std::logic_error when
// called from another thread than start()'s or with a span or phase still open.
Report stop();

// A kernel's time: `op` must outlive the profile (a string literal). The detail's form computes
// its text and flop count only while recording: Span s("matmul", [&] { return Detail{...}; }).
struct Detail {
  std::string text;
  double flops = 0;
};
class Span {
 public:
  explicit Span(const char* op) : on_(enabled()) {
    if (on_) detail::begin(op, {}, 0);
  }
  template <class F>
    requires std::is_invocable_r_v<Detail, F>
  Span(const char* op, F&& describe) : on_(enabled()) {
    if (on_) {
      Detail d = std::forward<F>(describe)();
      detail::begin(op, std::move(d.text), d.flops);
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

// A named part of the program (nestable; the innermost names the spans inside it).
class Phase {
 public:
  explicit Phase(const char* name);
  ~Phase();
  Phase(const Phase&) = delete;
  Phase& operator=(const Phase&) = delete;

 private:
  bool on_;
  const char* previous_ = nullptr;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace mvgpt::profile
