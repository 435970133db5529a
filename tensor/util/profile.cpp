#include <mvgpt/util/profile.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <thread>
#include <tuple>

namespace mvgpt::profile {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Frame {
  const char* op;
  std::string detail;
  double flops;
  Clock::time_point start;
  double inner = 0;  // time of the spans directly inside this one
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
    return phases.emplace_back(PhaseTime{name, 0, 0});
  }
};
State g_state;
std::atomic<std::thread::id> g_owner{};

}  // namespace

namespace detail {

std::atomic<bool> g_recording{false};

bool records_this_thread() { return g_owner.load(std::memory_order_relaxed) == std::this_thread::get_id(); }

void begin(const char* op, std::string text, double flops) {
  g_state.frames.push_back(Frame{op, std::move(text), flops, Clock::now()});
}

void end() {
  Frame f = std::move(g_state.frames.back());
  g_state.frames.pop_back();
  const double elapsed = seconds_since(f.start);
  if (!g_state.frames.empty()) g_state.frames.back().inner += elapsed;
  Row& row = g_state.rows[{g_state.phase, f.op, f.detail}];
  if (row.calls == 0) row = Row{g_state.phase, f.op, f.detail, 0, 0, 0};
  row.calls += 1;
  row.seconds += std::max(0.0, elapsed - f.inner);
  row.flops += f.flops;
}

}  // namespace detail

void start() {
  if (detail::g_recording.load()) throw std::logic_error("profile::start: a profile is already recording");
  g_state = State{};
  g_owner.store(std::this_thread::get_id());
  detail::g_recording.store(true);
}

Report stop() {
  if (!enabled()) throw std::logic_error("profile::stop: no profile is recording on this thread");
  if (!g_state.frames.empty() || g_state.open_phases != 0)
    throw std::logic_error("profile::stop: a span or phase is still open (stop after they end)");
  detail::g_recording.store(false);
  g_owner.store(std::thread::id{});
  Report report;
  report.phases = g_state.phases;
  auto phase_order = [&](const std::string& name) {
    for (size_t i = 0; i < report.phases.size(); ++i)
      if (report.phases[i].name == name) return i;
    return report.phases.size();  // outside every phase: last
  };
  for (auto& [key, row] : g_state.rows) report.rows.push_back(row);
  std::stable_sort(report.rows.begin(), report.rows.end(), [&](const Row& a, const Row& b) {
    const size_t pa = phase_order(a.phase), pb = phase_order(b.phase);
    return pa != pb ? pa < pb : a.seconds > b.seconds;
  });
  g_state = State{};
  return report;
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
  if (!on_) return;
  PhaseTime& p = g_state.phase_time(g_state.phase);
  p.count += 1;
  p.seconds += seconds_since(start_);
  g_state.phase = previous_;
  --g_state.open_phases;
}

}  // namespace mvgpt::profile
