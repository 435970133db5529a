#pragma once
// A cosine schedule that fits the clock. With --minutes the run stops when its time is used, so the
// step it stops at depends on the machine; a decay fixed in steps would leave a fast machine at the
// minimum rate for most of the run and a slow one never decayed. pretrain instead re-estimates, each
// step, the step the run will stop at from the time a step has taken so far (evaluations and
// checkpoints included), and decays the rate to reach --min-lr there.
#include <cstdint>

namespace mvgpt::apps {

// The step index at which the rate should reach the minimum (the schedule's decay_steps): the last
// step of a run that has done `step` steps using `elapsed_s` of `budget_s` seconds, if the rest goes
// at the rate of this session (`session_steps` steps in `session_s` seconds). Never below
// max(warmup_steps, step): the past cannot be rescheduled.
int64_t fitted_decay_steps(int64_t step, double elapsed_s, double budget_s, int64_t session_steps, double session_s,
                           int64_t warmup_steps);

// Steps of a session before its rate is trusted (the first ones pay for start-up: allocation, the
// first GEMMs, page faults).
inline constexpr int64_t kStepsBeforeFitting = 3;

}  // namespace mvgpt::apps
