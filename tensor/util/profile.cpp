#include <mvgpt/util/profile.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <thread>
#include <tuple>

namespace mvgpt::profile {
namespace {

using detail::Clock;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct Frame {
  const char* op;
  std::string detail;
  double flops;
  Clock::time_point start;
  double inner = 0;  // time of the spans directly inside this one, and the profiler's inside it
  bool noted = false;  // note_kernel named its implementation
};

// Touched only by the recording thread (enabled() is false everywhere else).
struct State {
  std::vector<Frame> frames;
  const char* phase = "";
  int open_phases = 0;
  std::vector<PhaseTime> phases;
  std::map<std::tuple<std::string, std::string, std::string>, Row> rows;  // (phase, op, detail)

  PhaseTime& phase_time(const char* name) {
    for (PhaseTime& p : phases)
      if (p.name == name) return p;
    return phases.emplace_back(PhaseTime{name});
  }
  // The profiler's own time: charged to no row (the enclosing span excludes it) and to the phase apart.
  void charge_profiler(double s) {
    if (!frames.empty()) frames.back().inner += s;
    if (open_phases > 0) phase_time(phase).profiler_seconds += s;
  }
};
State g_state;
std::atomic<std::thread::id> g_owner{};

}  // namespace

namespace detail {

std::atomic<bool> g_recording{false};

bool records_this_thread() { return g_owner.load(std::memory_order_relaxed) == std::this_thread::get_id(); }

void begin(const char* op, std::string text, double flops, Clock::time_point entered) {
  const auto now = Clock::now();
  g_state.charge_profiler(seconds_between(entered, now));  // describing this span: the parent excludes it
  g_state.frames.push_back(Frame{op, std::move(text), flops, now});
}

void end() {
  const auto stopped = Clock::now();
  if (!enabled() || g_state.frames.empty()) return;  // cancelled while the span was open
  Frame f = std::move(g_state.frames.back());
  g_state.frames.pop_back();
  const double elapsed = seconds_between(f.start, stopped);
  if (!g_state.frames.empty()) g_state.frames.back().inner += elapsed;
  auto [it, added] = g_state.rows.try_emplace({g_state.phase, f.op, f.detail}, Row{g_state.phase, f.op, f.detail});
  Row& row = it->second;
  row.calls += 1;
  row.seconds += std::max(0.0, elapsed - f.inner);
  row.flops += f.flops;
  g_state.charge_profiler(seconds_between(stopped, Clock::now()));
}

void note(std::string kernel, Clock::time_point entered) {
  if (!g_state.frames.empty() && !g_state.frames.back().noted) {
    Frame& f = g_state.frames.back();
    f.detail += (f.detail.empty() ? "" : ", ") + kernel;
    f.noted = true;
  }
  g_state.charge_profiler(seconds_between(entered, Clock::now()));
}

}  // namespace detail

void start() {
  bool expected = false;
  if (!detail::g_recording.compare_exchange_strong(expected, true))
    throw std::logic_error("profile::start: a profile is already recording");
  g_state = State{};
  g_owner.store(std::this_thread::get_id());
}

Report stop() {
  if (!enabled()) throw std::logic_error("profile::stop: no profile is recording on this thread");
  if (!g_state.frames.empty() || g_state.open_phases != 0)
    throw std::logic_error("profile::stop: a span or phase is still open (stop after they end)");
  State state = std::move(g_state);
  g_state = State{};
  g_owner.store(std::thread::id{});
  detail::g_recording.store(false);  // last: a start() on another thread finds g_state reset
  Report report;
  report.phases = state.phases;
  auto phase_order = [&](const std::string& name) {
    for (size_t i = 0; i < report.phases.size(); ++i)
      if (report.phases[i].name == name) return i;
    return report.phases.size();  // outside every phase: last
  };
  for (auto& [key, row] : state.rows) report.rows.push_back(row);
  std::stable_sort(report.rows.begin(), report.rows.end(), [&](const Row& a, const Row& b) {
    const size_t pa = phase_order(a.phase), pb = phase_order(b.phase);
    return pa != pb ? pa < pb : a.seconds > b.seconds;
  });
  return report;
}

void cancel() noexcept {
  if (!enabled()) return;
  g_state = State{};
  g_owner.store(std::thread::id{});
  detail::g_recording.store(false);
}

Phase::Phase(const char* name) : on_(enabled()) {
  if (!on_) return;
  previous_ = g_state.phase;
  g_state.phase = name;
  g_state.phase_time(name);  // orders the phases by first entry
  ++g_state.open_phases;
  start_ = Clock::now();
}

Phase::~Phase() {
  if (!on_ || !enabled() || g_state.open_phases == 0) return;  // cancelled meanwhile
  PhaseTime& p = g_state.phase_time(g_state.phase);
  p.count += 1;
  p.seconds += seconds_between(start_, Clock::now());
  g_state.phase = previous_;
  --g_state.open_phases;
}

}  // namespace mvgpt::profile
