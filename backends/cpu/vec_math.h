#pragma once
// Branch-free float exp/tanh/sigmoid written in plain arithmetic, so that loops calling them
// auto-vectorize (glibc's expf/tanhf do not without -ffast-math). Accuracy is a few ulp over the
// whole range; inf and NaN behave as in libm. The double versions call libm: float64 is for
// reference computations and gradient checks, where accuracy matters more than speed.
#include <bit>
#include <cmath>
#include <cstdint>

namespace mvgpt::cpu {

// e^x = 2^n * e^r with n = round(x / ln 2) and |r| <= ln(2) / 2; e^r by its Taylor series to degree 7
// (truncation error below 6e-9). 2^n is applied in two halves so that n = 128 and subnormal results work.
inline float exp_fast(float x) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer in the low mantissa bits
  float xc = x > 89.0f ? 89.0f : (x < -104.0f ? -104.0f : x);
  float t = xc * 1.44269504088896341f + kMagic;
  float n = t - kMagic;
  float r = xc - n * 0.693359375f;  // ln 2 split in a part with few bits (exact product) and the rest
  r = r - n * -2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kMagic);
  int32_t half = ni >> 1;
  float s1 = std::bit_cast<float>((half + 127) << 23);
  float s2 = std::bit_cast<float>((ni - half + 127) << 23);
  float y = p * s1 * s2;
  return x != x ? x : y;
}

// Small |x|: the Taylor series of tanh to x^13 (error below 5e-9 relative at |x| = 0.4);
// otherwise 1 - 2 / (e^{2|x|} + 1), which has no cancellation there.
inline float tanh_fast(float x) {
  float ax = std::fabs(x);
  float z = x * x;
  float p = 21844.0f / 6081075.0f;
  p = p * z - 1382.0f / 155925.0f;
  p = p * z + 62.0f / 2835.0f;
  p = p * z - 17.0f / 315.0f;
  p = p * z + 2.0f / 15.0f;
  p = p * z - 1.0f / 3.0f;
  float small = x + x * z * p;
  float big = 1.0f - 2.0f / (exp_fast(2.0f * ax) + 1.0f);
  big = std::bit_cast<float>(std::bit_cast<uint32_t>(big) | (std::bit_cast<uint32_t>(x) & 0x80000000u));
  return ax < 0.4f ? small : big;
}

inline float sigmoid_fast(float x) { return 1.0f / (1.0f + exp_fast(-x)); }

template <typename T> inline T vexp(T x) { return std::exp(x); }
template <> inline float vexp(float x) { return exp_fast(x); }
template <typename T> inline T vtanh(T x) { return std::tanh(x); }
template <> inline float vtanh(float x) { return tanh_fast(x); }
template <typename T> inline T vsigmoid(T x) { return T(1) / (T(1) + vexp(-x)); }

// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename T> inline T gelu_tanh(T x) {
  const T k = T(0.7978845608028654);
  return T(0.5) * x * (T(1) + vtanh(k * (x + T(0.044715) * x * x * x)));
}

}  // namespace mvgpt::cpu
