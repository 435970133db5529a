#pragma once
// Learning-rate schedules: linear warm-up, then a decay to a floor, either cosine over the whole
// rest of the run (nanoGPT's) or warm-up-stable-decay (WSD: the rate holds at its peak, then falls
// linearly to the floor over the run's last part; what fixed budgets favour, modded-nanogpt's and
// MiniCPM's). A pure function of the step, so resuming at step s gives the same rates as never
// stopping.
#include <cmath>
#include <cstdint>
#include <numbers>
#include <stdexcept>
#include <string>

namespace mvgpt::nn {

enum class DecayShape { cosine, linear };

struct WarmupDecaySchedule {
  double max_lr = 6e-4;
  double min_lr = 6e-5;
  int64_t warmup_steps = 0;
  int64_t decay_steps = 1;  // the step at which the rate reaches min_lr (and stays)
  DecayShape shape = DecayShape::cosine;
  // The decay covers this last fraction of [warmup_steps, decay_steps]; before it the rate holds at
  // max_lr. 1: the whole span (cosine's usual form); WSD takes a linear shape and about 0.3-0.6.
  double decay_fraction = 1.0;

  // 0-based step: max_lr * (step + 1) / warmup_steps during warm-up (so step 0 trains), then max_lr
  // until the decay starts, then min_lr + (max_lr - min_lr) * f(progress), progress going 0 -> 1
  // until decay_steps, f = (1 + cos(pi p)) / 2 or 1 - p.
  double operator()(int64_t step) const {
    if (warmup_steps < 0 || decay_steps < warmup_steps || step < 0 || !(decay_fraction > 0 && decay_fraction <= 1))
      throw std::invalid_argument("learning-rate schedule: need 0 <= warmup_steps <= decay_steps, 0 < decay_fraction <= 1 "
                                  "and step >= 0 (warmup " + std::to_string(warmup_steps) + ", decay " +
                                  std::to_string(decay_steps) + ", fraction " + std::to_string(decay_fraction) +
                                  ", step " + std::to_string(step) + ")");
    if (step < warmup_steps) return max_lr * double(step + 1) / double(warmup_steps);
    if (step >= decay_steps) return min_lr;
    const double span = double(decay_steps - warmup_steps) * decay_fraction;
    const double start = double(decay_steps) - span;
    if (double(step) < start) return max_lr;
    const double progress = (double(step) - start) / span;
    const double f = shape == DecayShape::cosine ? 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) : 1.0 - progress;
    return min_lr + (max_lr - min_lr) * f;
  }
};

// nanoGPT's schedule under its usual name.
using WarmupCosineSchedule = WarmupDecaySchedule;

}  // namespace mvgpt::nn
