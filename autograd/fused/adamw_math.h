#pragma once
// AdamW's update of one element, as a host/device function: the CUDA kernel runs it, and the tests
// check it bit for bit against the CPU kernel (which vectorises the same operations).
#include <cmath>

#include <mvgpt/backends/elementwise_math.h>  // rn_add, ..., MVGPT_HOST_DEVICE
#include <mvgpt/fused/adamw.h>

namespace mvgpt::math {

// AdamW's scalars, computed once in double on the host (as Python computes them), then cast.
template <typename T>
struct AdamWScalars {
  T decay, b1, one_minus_b1, b2, one_minus_b2, step_size, bias2_sqrt, eps;
};

template <typename T>
inline AdamWScalars<T> adamw_scalars(const AdamWParams& p) {
  const double bias1 = 1 - std::pow(p.beta1, double(p.step));
  const double bias2 = 1 - std::pow(p.beta2, double(p.step));
  return {T(1 - p.lr * p.weight_decay), T(p.beta1), T(1 - p.beta1),    T(p.beta2), T(1 - p.beta2),
          T(p.lr / bias1),              T(std::sqrt(bias2)), T(p.eps)};
}

// One element of torch.optim.AdamW (single-tensor path), operation by operation and rounded after
// each, exactly as the CPU kernel (adamw_cpu.cpp) does, so that CPU and GPU
// training agree bit for bit:
//   p *= 1 - lr wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p -= step_size m / (sqrt(v) / sqrt(bc2) + eps).
template <typename T>
MVGPT_HOST_DEVICE inline void adamw_update(T& param, T grad, T& m, T& v, const AdamWScalars<T>& s) {
  const T pi = rn_mul(param, s.decay);
  const T mi = rn_add(rn_mul(m, s.b1), rn_mul(s.one_minus_b1, grad));
  const T vi = rn_add(rn_mul(v, s.b2), rn_mul(rn_mul(s.one_minus_b2, grad), grad));
  m = mi;
  v = vi;
  const T denom = rn_add(rn_div(rn_sqrt(vi), s.bias2_sqrt), s.eps);
  param = rn_sub(pi, rn_div(rn_mul(s.step_size, mi), denom));
}

}  // namespace mvgpt::math
