#pragma once
// Learning-rate schedule: linear warm-up, then cosine decay to a floor. A pure function of the step,
// so resuming at step s gives the same rates as never stopping.
#include <cmath>
#include <cstdint>
#include <numbers>
#include <stdexcept>
#include <string>

namespace mvgpt::nn {

struct WarmupCosineSchedule {
  double max_lr = 6e-4;
  double min_lr = 6e-5;
  int64_t warmup_steps = 0;
  int64_t decay_steps = 1;  // the step at which the rate reaches min_lr (and stays)

  // 0-based step: max_lr * (step + 1) / warmup_steps during warm-up (so step 0 trains), then
  // min_lr + (max_lr - min_lr) * (1 + cos(pi * progress)) / 2, progress going 0 -> 1 until decay_steps.
  double operator()(int64_t step) const {
    if (warmup_steps < 0 || decay_steps < warmup_steps || step < 0)
      throw std::invalid_argument("WarmupCosineSchedule: need 0 <= warmup_steps <= decay_steps and step >= 0 (warmup " +
                                  std::to_string(warmup_steps) + ", decay " + std::to_string(decay_steps) +
                                  ", step " + std::to_string(step) + ")");
    if (step < warmup_steps) return max_lr * double(step + 1) / double(warmup_steps);
    if (step >= decay_steps) return min_lr;
    const double progress = double(step - warmup_steps) / double(decay_steps - warmup_steps);
    return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  }
};

}  // namespace mvgpt::nn
