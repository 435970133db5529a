#pragma once
// float exp/tanh/sigmoid/gelu on 8-wide vectors (GCC vector extensions: AVX on this machine, SSE
// pairs elsewhere), because glibc's expf/tanhf never vectorize without -ffast-math, and GCC does
// not if-convert the clamps of a scalar version once it has jump-threaded them. Accuracy is a few
// ulp over the whole range; inf and NaN behave as in libm. Scalar calls run the same vector code on
// a splat, so an element's value never depends on where it sits in a run. float64 calls libm: it
// is for reference computations and gradient checks, where accuracy matters more than speed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__) && defined(__AVX512VL__)
#include <immintrin.h>
#endif

namespace mvgpt::cpu {

using f32x8 = float __attribute__((vector_size(32)));
using i32x8 = int32_t __attribute__((vector_size(32)));
// For unaligned loads and stores straight from tensor memory.
using f32x8_unaligned = float __attribute__((vector_size(32), aligned(4), may_alias));
inline constexpr int64_t kVec = 8;

inline f32x8 splat(float v) { return f32x8{v, v, v, v, v, v, v, v}; }
inline f32x8 load8(const float* p) { return *reinterpret_cast<const f32x8_unaligned*>(p); }
inline void store8(float* p, f32x8 v) { *reinterpret_cast<f32x8_unaligned*>(p) = v; }
// The first n < 8 elements, zero-padded.
inline f32x8 load_partial(const float* p, int64_t n) {
  f32x8 v = splat(0.0f);
  std::memcpy(&v, p, size_t(n) * sizeof(float));
  return v;
}
inline void store_partial(float* p, f32x8 v, int64_t n) { std::memcpy(p, &v, size_t(n) * sizeof(float)); }

// NOTE [ Prefetching ahead ]
// A pass that computes for tens of cycles a cache line (an exp, a division) leaves the hardware
// prefetchers behind on some machines: on the 2-core AMX Xeon (a VM), GELU over a 25 MB float32
// tensor out of cache ran at 6 GB/s, 3.4x its time in cache, where a conversion (a few cycles a
// line) lost only 2x. Such a pass asks for the line kPrefetchAhead bytes ahead of each stream it
// reads or writes, once per vector of sixteen it passes (64 bytes of float32, 32 of bfloat16: a
// line asked for twice costs one more slot): GELU then ran at 20 GB/s out of cache. Where the
// hardware keeps up, the extra instruction is one load-port slot a line. A prefetch never faults,
// so the address may lie past the end of the tensor (it is formed as an integer, not a pointer).
inline constexpr uintptr_t kPrefetchAhead = 2048;
inline void prefetch_ahead(const void* p) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) + kPrefetchAhead));
}
inline void prefetch_ahead_for_write(const void* p) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) + kPrefetchAhead), 1);
}
// Row by row passes: the lines of the `bytes` bytes starting `ahead` bytes past p (a row a few
// rows on, in contiguous rows), asked for at the start of a row.
inline void prefetch_lines(const void* p, int64_t ahead, int64_t bytes, bool for_write = false) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) + uintptr_t(ahead);
  for (uintptr_t a = first & ~uintptr_t(63); a < first + uintptr_t(bytes); a += 64) {
    if (for_write) __builtin_prefetch(reinterpret_cast<const void*>(a), 1);
    else __builtin_prefetch(reinterpret_cast<const void*>(a));
  }
}

// NOTE [ Sixteen lanes ]
// The functions below are written once for any lane count: V is f32x8, or f32x16 where the build
// targets AVX-512 (one zmm register; Zen 5 and the Xeons execute it at full width, Zen 4 in two
// halves). Every lane runs the same operations whatever the width, so an element's value never
// depends on whether a pass ran sixteen lanes or eight (the tests compare the two bit for bit):
// the elementwise maps run sixteen at a time and finish with eight.
template <typename V>
struct IntLanes;
template <>
struct IntLanes<f32x8> {
  using type = i32x8;
};
template <typename V>
using int_lanes_t = typename IntLanes<V>::type;
template <typename V>
inline V splat_as(float v) {
  V r;
  for (size_t l = 0; l < sizeof(V) / sizeof(float); ++l) r[l] = v;
  return r;
}
// Sixteen lanes are named in every build (two eight-lane halves where there is no AVX-512, as the
// float32 GEMV's sums are); passed by value only where the build targets AVX-512, since a 64-byte
// vector's calling convention differs without it.
using f32x16 = float __attribute__((vector_size(64)));
using i32x16 = int32_t __attribute__((vector_size(64)));
#ifdef __AVX512F__
inline constexpr bool kHasWideLanes = true;
using f32x16_unaligned = float __attribute__((vector_size(64), aligned(4), may_alias));
template <>
struct IntLanes<f32x16> {
  using type = i32x16;
};
inline f32x16 load16(const float* p) { return *reinterpret_cast<const f32x16_unaligned*>(p); }
inline void store16(float* p, f32x16 v) { *reinterpret_cast<f32x16_unaligned*>(p) = v; }
#else
inline constexpr bool kHasWideLanes = false;
#endif

#if defined(__AVX512F__) && defined(__AVX512VL__)
// NOTE [ exp's 2^n in one instruction ]
// p 2^n for an integer-valued n by one vscalefps: it multiplies by 2^n and rounds once, as the exps
// below did with 2^n built from its exponent bits (exp_v's two exact halves: the first product is
// exact, so the second is the one rounding; exp_lanes's one power for n in [-126, 127]): the same
// bits, subnormal results and overflow to inf included, in one instruction where they take four to
// nine. (The masked forms, all lanes: the unmasked ones trip GCC 12's bug 105593 warning.)
template <typename V>
inline V times_pow2(V p, V n) {
  if constexpr (sizeof(V) == 64) return (V)_mm512_mask_scalef_ps((__m512)p, __mmask16(0xffff), (__m512)p, (__m512)n);
  else return (V)_mm256_mask_scalef_ps((__m256)p, __mmask8(0xff), (__m256)p, (__m256)n);
}
#endif

// e^x = 2^n * e^r with n = round(x / ln 2) and |r| <= ln(2) / 2; e^r by its Taylor series to degree 7
// (truncation error below 6e-9). 2^n is applied in two halves so that n = 128 and subnormal results work
// (or, with AVX-512, by one vscalefps that rounds as they do: NOTE [ exp's 2^n in one instruction ]).
// The clamps keep NaN (comparisons with NaN are false), and a NaN then flows through to the result.
template <typename V>
inline V exp_v(V x) {
  using I = int_lanes_t<V>;
  const V lo = splat_as<V>(-104.0f), hi = splat_as<V>(89.0f);
  const V magic = splat_as<V>(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer in the low bits
  V xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  V t = xc * 1.44269504088896341f + magic;
  V n = t - magic;
  V r = xc - n * 0.693359375f;  // ln 2 split in a part with few bits (exact product) and the rest
  r = r - n * -2.12194440e-4f;
  V p = splat_as<V>(1.0f / 5040.0f);
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
#if defined(__AVX512F__) && defined(__AVX512VL__)
  return times_pow2(p, n);  // NOTE [ exp's 2^n in one instruction ]
#endif
  I ni = (I)t - (I)magic;
  I half = ni >> 1;
  V s1 = (V)((half + 127) << 23);
  V s2 = (V)((ni - half + 127) << 23);
  return p * s1 * s2;
}

// Small |x|: the Taylor series of tanh to x^13 (error below 5e-9 relative at |x| = 0.4);
// otherwise 1 - 2 / (e^{2|x|} + 1), which has no cancellation there.
template <typename V>
inline V tanh_v(V x) {
  using I = int_lanes_t<V>;
  const I sign = (I)x & int32_t(0x80000000u);
  const V ax = (V)((I)x & 0x7fffffff);
  V z = x * x;
  V p = splat_as<V>(21844.0f / 6081075.0f);
  p = p * z - 1382.0f / 155925.0f;
  p = p * z + 62.0f / 2835.0f;
  p = p * z - 17.0f / 315.0f;
  p = p * z + 2.0f / 15.0f;
  p = p * z - 1.0f / 3.0f;
  V small = x + x * z * p;
  V big = 1.0f - 2.0f / (exp_v(2.0f * ax) + 1.0f);
  big = (V)((I)big | sign);
  return ax < splat_as<V>(0.4f) ? small : big;
}

template <typename V>
inline V sigmoid_v(V x) { return 1.0f / (1.0f + exp_v(-x)); }
template <typename V>
inline V silu_v(V x) { return x * sigmoid_v(x); }
// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed
// as x sigmoid(2u) = x / (1 + e^{-2u}), the same function: one exp and one division where tanh8
// takes an exp, a division and a series (GELU and its backward were 2.3% of a training step). It
// also keeps its relative accuracy for negative x, where 1 + tanh(u) cancels.
template <typename V>
inline V gelu_v(V x) {
  const V u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return x / (1.0f + exp_v(-2.0f * u));
}

// Their derivatives, for the fused backward ops. GELU' = s + x s (1 - s) 2 k (1 + 3 a x^2) with
// s = sigmoid(2u) (the same as (1 + t)/2 + x/2 (1 - t^2) k (1 + 3 a x^2) with t = tanh(u): (1 + t)/2 = s
// and (1 - t^2)/4 = s (1 - s)), and s (1 - s) = e s^2 with e = e^{-2u}, which does not cancel where s
// is near 1; e stops at e^88, short of float's overflow, so that e s^2 is 0 rather than inf * 0 far
// left (the comparison keeps a NaN). SiLU' = s (1 + x (1 - s)) with s = sigmoid(x).
template <typename V>
inline V gelu_grad_v(V x) {
  const float k = 0.7978845608028654f, a = 0.044715f;
  const V x2 = x * x;
  V m = -2.0f * k * (x + a * x2 * x);
  m = m > 88.0f ? splat_as<V>(88.0f) : m;
  const V e = exp_v(m), s = 1.0f / (1.0f + e);
  return s + x * (e * s * s) * (2.0f * k) * (1.0f + (3.0f * a) * x2);
}
template <typename V>
inline V silu_grad_v(V x) {
  const V s = sigmoid_v(x);
  return s * (1.0f + x * (1.0f - s));
}


// The eight-lane forms, and with AVX-512 the sixteen-lane ones (NOTE [ Sixteen lanes ]).
inline f32x8 exp8(f32x8 x) { return exp_v(x); }
inline f32x8 tanh8(f32x8 x) { return tanh_v(x); }
inline f32x8 sigmoid8(f32x8 x) { return sigmoid_v(x); }
inline f32x8 silu8(f32x8 x) { return silu_v(x); }
inline f32x8 gelu8(f32x8 x) { return gelu_v(x); }
inline f32x8 gelu_grad8(f32x8 x) { return gelu_grad_v(x); }
inline f32x8 silu_grad8(f32x8 x) { return silu_grad_v(x); }

// Scalar entry points with the same results as the vector ones.
inline float exp_fast(float x) { return exp8(splat(x))[0]; }
inline float tanh_fast(float x) { return tanh8(splat(x))[0]; }

template <typename T> inline T vexp(T x) { return std::exp(x); }
template <> inline float vexp(float x) { return exp_fast(x); }
template <typename T> inline T vtanh(T x) { return std::tanh(x); }
template <> inline float vtanh(float x) { return tanh_fast(x); }
template <typename T> inline T vsigmoid(T x) { return T(1) / (T(1) + vexp(-x)); }
template <typename T> inline T gelu_tanh(T x) {
  const T k = T(0.7978845608028654);
  return T(0.5) * x * (T(1) + vtanh(k * (x + T(0.044715) * x * x * x)));
}
template <> inline float gelu_tanh(float x) { return gelu8(splat(x))[0]; }

// y[i] = f(x[i]) over contiguous floats, sixteen at a time where the CPU has AVX-512 (f takes any
// lane count: NOTE [ Sixteen lanes ]), then eight; the tail is zero-padded.
template <typename F>
inline void map8(const float* x, float* y, int64_t n, F f8) {
  int64_t i = 0;
#ifdef __AVX512F__
  for (; i + 2 * kVec <= n; i += 2 * kVec) {
    prefetch_ahead(x + i);  // an exp or a division a line: NOTE [ Prefetching ahead ]
    prefetch_ahead_for_write(y + i);
    store16(y + i, f8(load16(x + i)));
  }
#endif
  for (; i + kVec <= n; i += kVec) store8(y + i, f8(load8(x + i)));
  if (i < n) store_partial(y + i, f8(load_partial(x + i, n - i)), n - i);
}

// max (kMax) or min of p[0, n), n >= 1; a NaN wins, as in PyTorch.
template <bool kMax>
inline float extreme8(const float* p, int64_t n) {
  f32x8 m = splat(p[0]);
  auto pick = [](f32x8 v, f32x8 cur) { return ((kMax ? v > cur : v < cur) | (v != v)) ? v : cur; };
  int64_t i = 0;
  for (; i + kVec <= n; i += kVec) m = pick(load8(p + i), m);
  if (i < n) {
    f32x8 v = splat(p[0]);  // padding that cannot change the answer
    std::memcpy(&v, p + i, size_t(n - i) * sizeof(float));
    m = pick(v, m);
  }
  float r = m[0];
  for (int j = 1; j < kVec; ++j) {
    float v = m[j];
    if ((kMax ? v > r : v < r) || v != v) r = v;
    if (r != r) break;
  }
  return r;
}

// y[i] = exp(x[i] - shift) (y may be null) and returns the sum, in a fixed lane order.
inline float exp_shift_sum(const float* x, float shift, float* y, int64_t n) {
  f32x8 acc0 = splat(0.0f), acc1 = splat(0.0f);
  const f32x8 s = splat(shift);
  int64_t i = 0;
  for (; i + 2 * kVec <= n; i += 2 * kVec) {
    f32x8 e0 = exp8(load8(x + i) - s), e1 = exp8(load8(x + i + kVec) - s);
    if (y) store8(y + i, e0), store8(y + i + kVec, e1);
    acc0 += e0;
    acc1 += e1;
  }
  for (; i < n; i += kVec) {
    int64_t m = std::min<int64_t>(kVec, n - i);
    f32x8 e = exp8(load_partial(x + i, m) - s);
    // Padding lanes are exp(0 - shift); mask them out of the sum.
    for (int64_t j = m; j < kVec; ++j) e[j] = 0.0f;
    if (y) store_partial(y + i, e, m);
    acc0 += e;
  }
  acc0 += acc1;
  float total = 0.0f;
  for (int64_t j = 0; j < kVec; ++j) total += acc0[j];
  return total;
}

}  // namespace mvgpt::cpu
