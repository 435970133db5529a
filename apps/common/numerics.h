#pragma once
// Numerical guards of a training step: where a NaN or an infinity first showed.
#include <string>

#include <mvgpt/nn/module.h>

namespace mvgpt::apps {

// The name of the first parameter (in registration order) whose gradient holds a NaN or an
// infinity; "" when every gradient is finite (or undefined). One reduction pass over the gradients
// on their device and one read (a second pass only when something is not finite).
std::string first_nonfinite_gradient(const nn::NamedTensors& params);

// Testing aid: turns every element of `param`'s gradient into NaN (any device).
void poison_gradient(const Tensor& param);

}  // namespace mvgpt::apps
