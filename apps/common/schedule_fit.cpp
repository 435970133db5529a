#include "apps/common/schedule_fit.h"

#include <algorithm>
#include <cmath>

namespace mvgpt::apps {

int64_t fitted_decay_steps(int64_t step, double elapsed_s, double budget_s, int64_t session_steps, double session_s,
                           int64_t warmup_steps) {
  const int64_t floor = std::max(warmup_steps, step);
  if (session_steps <= 0 || !(session_s > 0)) return floor;
  const double per_step = session_s / double(session_steps);
  // The run stops at the first step that ends with elapsed >= budget.
  const double steps_left = std::ceil(std::max(0.0, budget_s - elapsed_s) / per_step);
  if (!(steps_left < 1e15)) return floor;  // an absurd budget: no step count to aim at
  return std::max(floor, step + int64_t(steps_left) - 1);
}

}  // namespace mvgpt::apps
