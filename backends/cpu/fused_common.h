#pragma once
// Helpers shared by the fused CPU kernels (norms, rope, attention, cross-entropy, AdamW): layout
// checks, row reductions the compiler can vectorize, and an exp that vectorizes.
#include <bit>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "tensor/tensor.h"

namespace mvgpt::cpu::fused {

// The fused kernels read rows through raw pointers; the ops layer hands them contiguous tensors
// (or, where stated, views whose last axis has stride 1). A violation is a bug in the caller.
inline void require_contiguous(const Tensor& t, const char* op, const char* what) {
  if (!t.is_contiguous())
    throw std::logic_error(std::string(op) + ": " + what + " must be contiguous, found strides " +
                           to_string(t.strides()) + " for shape " + to_string(t.shape()));
}
inline void require_unit_last_stride(const Tensor& t, const char* op, const char* what) {
  if (t.dim() > 0 && t.size(-1) > 1 && t.strides()[t.dim() - 1] != 1)
    throw std::logic_error(std::string(op) + ": " + what + " must have a unit stride on its last axis, found strides " +
                           to_string(t.strides()));
}
inline void require_float(const Tensor& t, const char* op, const char* what) {
  if (t.dtype() != DType::f32 && t.dtype() != DType::f64)
    throw std::logic_error(std::string(op) + ": " + what + " must be float32 or float64 (the ops layer widens), found " +
                           std::string(dtype_name(t.dtype())));
}

// Sixteen independent accumulators: without -ffast-math the compiler keeps a single accumulator in
// source order, which does not vectorize; lanes make the order explicit (and still deterministic).
inline constexpr int kLanes = 16;

template <typename T, typename F>
inline T lane_sum(int64_t n, F&& term) {
  T acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += term(i + l);
  T tail = 0;
  for (; i < n; ++i) tail += term(i);
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0] + tail;
}

template <typename T>
inline T lane_max(const T* x, int64_t n) {
  T acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = -INFINITY;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = acc[l] > x[i + l] ? acc[l] : x[i + l];
  T m = -INFINITY;
  for (; i < n; ++i) m = m > x[i] ? m : x[i];
  for (int l = 0; l < kLanes; ++l) m = m > acc[l] ? m : acc[l];
  return m;
}

// exp for float in branch-free arithmetic so loops over it vectorize (std::exp stays a scalar call
// without -ffast-math). Range reduction x = n ln2 + r, |r| <= ln2/2, then a degree-6 Taylor
// polynomial: relative error below 2e-7. exp(-inf) = 0, exp(+inf) = inf, NaN stays NaN.
inline float exp_approx(float x) {
  const float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = xc * 1.44269504088896341f + shifter;
  const float n = t - shifter;
  const float r = (xc - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (int32_t(n) + 127) << 23;
  float y = p * std::bit_cast<float>(bits);
  y = x < -87.0f ? 0.0f : y;
  y = x > 88.0f ? INFINITY : y;
  return x != x ? x : y;
}
inline double exp_approx(double x) { return std::exp(x); }

}  // namespace mvgpt::cpu::fused
