#pragma once
// Helpers shared by the fused CPU kernels (norms, rope, attention, cross-entropy, AdamW): layout
// checks, row reductions the compiler can vectorize, and an exp that vectorizes.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include <mvgpt/backends/cpu/vec_math.h>
#include <mvgpt/tensor/tensor.h>

#ifdef __AVX__
#include <immintrin.h>
#endif

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

// Explicit vectors (vec_math.h's: GCC/Clang vector extensions), needed because with the default
// -ftrapping-math GCC refuses to if-convert the float selects of an exp (clamping, NaN), so a scalar
// exp in a loop never auto-vectorizes. Named here too, so that fused::load8 and the rest read as
// before.
using cpu::f32x16;
using cpu::f32x8;
using cpu::i32x16;
using cpu::i32x8;
using cpu::kVec;
using cpu::load8;
using cpu::store8;
inline float hsum8(f32x8 v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}
// Sixteen lanes' sum: lane i added to lane i + 8, then hsum8 (a reference: a 64-byte vector passed
// by value would change the ABI where the build lacks AVX-512).
inline float hsum16(const f32x16& v) {
  return hsum8(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
               __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15));
}

// Returns v unchanged but opaque to the optimiser, so a product feeding an add is not fused into an
// FMA: AdamW then rounds exactly like PyTorch's separate kernels (mul_, then add_).
template <typename V>
inline V no_contract(V v) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  if constexpr (sizeof(V) <= 16) {
    asm("" : "+x"(v));
  } else {
#ifdef __AVX__
    asm("" : "+x"(v));
#endif
  }
#endif
  return v;
}

// y = alpha sum + beta y for a GEMV's output (beta = 0: y unread), each product rounded before the
// add: left to the compiler, whether it fuses one of them into an FMA (and which) depends on how the
// caller is inlined, so the same sum could be stored differently by two callers.
inline void store_scaled(float* y, float sum, float alpha, float beta) {
  *y = beta == 0.0f ? alpha * sum : no_contract(alpha * sum) + no_contract(beta * *y);
}

// Square root per lane: std::sqrt in a loop does not vectorize either (it may set errno).
inline f32x8 sqrt8(f32x8 v) {
#ifdef __AVX__
  return reinterpret_cast<f32x8>(_mm256_sqrt_ps(reinterpret_cast<__m256>(v)));
#else
  for (int l = 0; l < kVec; ++l) v[l] = std::sqrt(v[l]);
  return v;
#endif
}

// e^x = 2^n e^r, n = round(x / ln 2), |r| <= ln(2)/2, e^r by its degree-6 Taylor polynomial:
// relative error below 2e-7. exp(-inf) = 0, exp(+inf) = inf, NaN stays NaN. Written once for any
// lane count (V float lanes, I the int32 lanes of the same count): every lane runs the same
// operations, so a lane's value never depends on the width of the pass that computes it.
template <typename V, typename I>
inline V exp_lanes(V x) {
  const V lo = x < -87.0f ? V{} - 87.0f : x;
  const V xc = lo > 88.0f ? V{} + 88.0f : lo;
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const V n = (xc * 1.44269504088896341f + shifter) - shifter;
  const V r = (xc - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;
  V p = V{} + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
#if defined(__AVX512F__) && defined(__AVX512VL__)
  V y = times_pow2(p, n);  // NOTE [ exp's 2^n in one instruction ] (vec_math.h)
#else
  const I bits = (__builtin_convertvector(n, I) + 127) << 23;
  V y = p * reinterpret_cast<V>(bits);  // same-size vector cast: reinterprets the bits
#endif
  y = x < -87.0f ? V{} : y;
  y = x > 88.0f ? V{} + INFINITY : y;
  return x != x ? x : y;
}
inline f32x8 exp8(f32x8 x) { return exp_lanes<f32x8, i32x8>(x); }

// NOTE [ Sixteen lanes where the CPU has AVX-512 ]
// With AVX-512 the exp passes run sixteen lanes at a time (one zmm register: Zen 5 and the Xeons
// execute it at full width, Zen 4 in two halves) and add the two halves into the eight-lane sums in
// the order the eight-lane loop adds them: the same values and the same sums, bit for bit, on every
// CPU. The exp is most of a softmax or cross-entropy pass once its rows sit in the cache.
#ifdef __AVX512F__
using cpu::load16;
using cpu::store16;
inline f32x16 exp16(f32x16 x) { return exp_lanes<f32x16, i32x16>(x); }
inline f32x8 low8(f32x16 v) { return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7); }
inline f32x8 high8(f32x16 v) { return __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15); }
// Eight sums at once: lane k is hsum16(acc[k]), bit for bit. hsum8 adds
// ((v0 + v4) + (v1 + v5)) + ((v2 + v6) + (v3 + v7)); each level below adds those same pairs for all
// eight, gathered into lanes by two shuffles, where one sum at a time takes a shuffle per add.
inline f32x8 hsum8_of_eight(const f32x16 (&acc)[8]) {
  f32x16 w[4];  // sums 2i (lanes 0-7) and 2i + 1 (lanes 8-15), each low8 + high8
  for (int i = 0; i < 4; ++i)
    w[i] = __builtin_shufflevector(acc[2 * i], acc[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
           __builtin_shufflevector(acc[2 * i], acc[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29,
                                   30, 31);
  f32x16 p[2];  // four sums each, four lanes a sum: v[i] + v[i + 4]
  for (int i = 0; i < 2; ++i)
    p[i] = __builtin_shufflevector(w[2 * i], w[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
           __builtin_shufflevector(w[2 * i], w[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  // Eight sums, two lanes each: (v0 + v4) + (v1 + v5) and (v2 + v6) + (v3 + v7).
  const f32x16 r = __builtin_shufflevector(p[0], p[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
                   __builtin_shufflevector(p[0], p[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  return __builtin_shufflevector(r, r, 0, 2, 4, 6, 8, 10, 12, 14) + __builtin_shufflevector(r, r, 1, 3, 5, 7, 9, 11, 13, 15);
}
#endif
inline float exp_approx(float x) {
  const f32x8 v = f32x8{} + x;
  return exp8(v)[0];
}
inline double exp_approx(double x) { return std::exp(x); }

inline double row_max(const double* x, int64_t n, bool = false) {
  double m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

// Row reductions over n contiguous values, 16 float lanes (two accumulators hide the add latency).
// Double versions are plain loops: float64 serves tests and reference runs.
template <typename F8, typename F1>
inline float vsum(int64_t n, F8&& term8, F1&& term1) {
  f32x8 a0 = {}, a1 = {};
  int64_t i = 0;
  for (; i + 2 * kVec <= n; i += 2 * kVec) {
    a0 += term8(i);
    a1 += term8(i + kVec);
  }
  for (; i + kVec <= n; i += kVec) a0 += term8(i);
  float tail = 0;
  for (; i < n; ++i) tail += term1(i);
  return hsum8(a0 + a1) + tail;
}
template <typename F1>
inline double dsum(int64_t n, F1&& term1) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += term1(i);
  return s;
}

// sum_i x[i]
inline float row_sum(const float* x, int64_t n) {
  return vsum(n, [&](int64_t i) { return load8(x + i); }, [&](int64_t i) { return x[i]; });
}
inline double row_sum(const double* x, int64_t n) {
  return dsum(n, [&](int64_t i) { return x[i]; });
}
// sum_i a[i] b[i]
inline float row_dot(const float* a, const float* b, int64_t n) {
  return vsum(n, [&](int64_t i) { return load8(a + i) * load8(b + i); }, [&](int64_t i) { return a[i] * b[i]; });
}
inline double row_dot(const double* a, const double* b, int64_t n) {
  return dsum(n, [&](int64_t i) { return a[i] * b[i]; });
}
// sum_i (x[i] - mu)^2
inline float row_sq_centred(const float* x, float mu, int64_t n) {
  return vsum(n, [&](int64_t i) { const f32x8 d = load8(x + i) - mu; return d * d; },
              [&](int64_t i) { return (x[i] - mu) * (x[i] - mu); });
}
inline double row_sq_centred(const double* x, double mu, int64_t n) {
  return dsum(n, [&](int64_t i) { return (x[i] - mu) * (x[i] - mu); });
}
// sum_i a[i] b[i] c[i]
inline float row_dot3(const float* a, const float* b, const float* c, int64_t n) {
  return vsum(n, [&](int64_t i) { return load8(a + i) * load8(b + i) * load8(c + i); },
              [&](int64_t i) { return a[i] * b[i] * c[i]; });
}
inline double row_dot3(const double* a, const double* b, const double* c, int64_t n) {
  return dsum(n, [&](int64_t i) { return a[i] * b[i] * c[i]; });
}
// sum_i a[i] (x[i] - mu)
inline float row_dot_centred(const float* a, const float* x, float mu, int64_t n) {
  return vsum(n, [&](int64_t i) { return load8(a + i) * (load8(x + i) - mu); },
              [&](int64_t i) { return a[i] * (x[i] - mu); });
}
inline double row_dot_centred(const double* a, const double* x, double mu, int64_t n) {
  return dsum(n, [&](int64_t i) { return a[i] * (x[i] - mu); });
}

inline double exp_shifted(const double* x, int64_t n, double shift, double scale, double* out) {
  double s = 0;
  for (int64_t j = 0; j < n; ++j) {
    const double e = std::exp(x[j] - shift);
    s += e;
    if (out) out[j] = e * scale;
  }
  return s;
}

// Eight floats (as their bits) rounded to bfloat16 bits: round to nearest even, a NaN stays a quiet
// NaN (bfloat16::from_float, bit for bit).
using bf16_u32x8 = uint32_t __attribute__((vector_size(32)));
using bf16_u16x8 = uint16_t __attribute__((vector_size(16)));
// Written once for any lane count (U the uint32 lanes, H the uint16 lanes of the same count).
template <typename H, typename U>
inline H round_lanes_to_bf16(U u) {
  const U rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const auto nan = ((u & 0x7f800000u) == 0x7f800000u) & ((u & 0x007fffffu) != 0u);
  return __builtin_convertvector(nan ? (u >> 16) | 0x40u : rounded, H);
}
inline bf16_u16x8 round8_to_bf16(bf16_u32x8 u) { return round_lanes_to_bf16<bf16_u16x8>(u); }
#ifdef __AVX512F__
// Sixteen at a time (NOTE [ Sixteen lanes where the CPU has AVX-512 ]): the same bits per lane.
using bf16_u32x16 = uint32_t __attribute__((vector_size(64)));
using bf16_u16x16 = uint16_t __attribute__((vector_size(32)));
// Sixteen floats' bfloat16 bits.
inline __m256i rounded16(f32x16 v) {
#if defined(__AVX512BF16__) && defined(__AVX512DQ__)
  // VCVTNEPS2BF16 (AVX512-BF16) rounds as above in one instruction, NaN and infinity included, but
  // flushes denormal inputs to zero: a block holding one (rare: |x| < 2^-126, found by VFPCLASSPS)
  // takes the integer rounding, so every CPU gives the same bits.
  const __m512 x = reinterpret_cast<__m512>(v);
  if (_mm512_fpclass_ps_mask(x, 0x20) == 0)  // 0x20: denormal
    return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x));
#endif
  bf16_u32x16 u;
  std::memcpy(&u, &v, sizeof u);
  return reinterpret_cast<__m256i>(round_lanes_to_bf16<bf16_u16x16>(u));
}
inline void store16_rounded(bfloat16* out, f32x16 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), rounded16(v));
}
// The first n (< 16) of them: a row's last partial vector in one step, where eight lanes and then
// one at a time took up to 15 conversions (the lanes' bits are the same either way).
inline void store16_rounded(bfloat16* out, f32x16 v, int64_t n) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  _mm256_mask_storeu_epi16(out, __mmask16((1u << n) - 1), rounded16(v));
#else
  const __m256i h = rounded16(v);
  std::memcpy(static_cast<void*>(out), &h, size_t(n) * sizeof(bfloat16));
#endif
}
// The floats at p in the lanes of mask m (a row's first lanes), the rest zero; load16_partial: the
// first n (< 16).
inline f32x16 load16_masked(const float* p, __mmask16 m) { return reinterpret_cast<f32x16>(_mm512_maskz_loadu_ps(m, p)); }
inline f32x16 load16_partial(const float* p, int64_t n) { return load16_masked(p, __mmask16((1u << n) - 1)); }
#endif

// Eight bfloat16 values widened to float32 (exact: a bfloat16 is the top half of a float32).
inline f32x8 load8_widened(const bfloat16* p) {
  bf16_u16x8 h;
  std::memcpy(&h, p, sizeof h);
  return (f32x8)(__builtin_convertvector(h, bf16_u32x8) << 16);
}
#ifdef __AVX512F__
// Sixteen of them (NOTE [ Sixteen lanes where the CPU has AVX-512 ]).
inline f32x16 load16_widened(const bfloat16* p) {
  bf16_u16x16 h;
  std::memcpy(&h, p, sizeof h);
  return (f32x16)(__builtin_convertvector(h, bf16_u32x16) << 16);
}
#endif

// A row's lanes as float32 for the passes that read float32 or bfloat16 rows alike: eight, sixteen,
// and the first lanes of sixteen (the rest zero).
inline f32x8 as_float8(const float* p) { return load8(p); }
inline f32x8 as_float8(const bfloat16* p) { return load8_widened(p); }
#ifdef __AVX512F__
inline f32x16 as_float16(const float* p) { return load16(p); }
inline f32x16 as_float16(const bfloat16* p) { return load16_widened(p); }
inline f32x16 as_float16(const float* p, __mmask16 m) { return load16_masked(p, m); }
inline f32x16 as_float16(const bfloat16* p, __mmask16 m) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  const auto h = reinterpret_cast<bf16_u16x16>(_mm256_maskz_loadu_epi16(m, p));
#else  // AVX-512F alone: the first popcount(m) values copied (m is always the first lanes)
  bf16_u16x16 h{};
  std::memcpy(&h, static_cast<const void*>(p), size_t(__builtin_popcount(unsigned(m))) * sizeof(bfloat16));
#endif
  // Widened as load16_widened widens (vector extensions: GCC 12's own intrinsics for it trip its
  // bug 105593 warning).
  return (f32x16)(__builtin_convertvector(h, bf16_u32x16) << 16);
}
#endif

// max_j x[j] (-inf for n = 0) of float32 x, or of bfloat16 x widened (exact).
// fetch_ahead: a first read of a row from memory (cross-entropy's logits, float32 or bf16) asks for
// its lines ahead (NOTE [ Prefetching ahead ] in vec_math.h). Cross-entropy's one-visit pass then
// reads a bf16 row again from L1 or L2 for its exps (exp_shifted on the bfloat16 row) rather than
// keeping a float32 copy of it: one row buffer fewer, the pass level (on the 2-core AMX Xeon: see
// docs/performance.md).
//
// NOTE [ Row max in sixteen lanes ]
// With AVX-512: two sixteen-lane maxima side by side and the last partial vector masked. The
// eight-lane loop below (the build without AVX-512) keeps one accumulator (a chain of two dependent
// maxima every 16 floats), then reduces its lanes and the tail one scalar max at a time; in the
// attention's softmax (rows of 1-256 keys) that was a fifth of the pass, and
// BM_RotaryAttentionForward/keep:1 took 2.75-3.13 ms against 3.40-3.61 (2-core AMX Xeon, alternated
// four times). Rows read from memory (cross-entropy's, fetched ahead) ran level
// (BM_CrossEntropyWithGradient/one_visit:0 25.3-27.9 ms against 25.2-28.7). A max is exact, so
// either order gives the same value (but for which of -0 and +0 a row of zeros returns: the same
// shift and the same exps either way). NaN is passed over in both (a comparison with it is false).
template <typename T>
inline float row_max_of(const T* x, int64_t n, bool fetch_ahead) {
  constexpr int64_t per_line = 64 / int64_t(sizeof(T));  // 16 float32, 32 bfloat16
  int64_t j = 0;
  float m = -INFINITY;
#ifdef __AVX512F__
  f32x16 a0 = f32x16{} - INFINITY, a1 = a0;
  for (; j + 32 <= n; j += 32) {
    if (fetch_ahead)
      for (int64_t l = 0; l < 32; l += per_line) prefetch_ahead(x + j + l);
    const f32x16 v = as_float16(x + j), w = as_float16(x + j + 16);
    a0 = v > a0 ? v : a0;
    a1 = w > a1 ? w : a1;
  }
  if (j + 16 <= n) {
    const f32x16 v = as_float16(x + j);
    a0 = v > a0 ? v : a0;
    j += 16;
  }
  if (j < n) {  // the rest, -inf past n
    const __mmask16 valid = __mmask16((1u << (n - j)) - 1);
    const f32x16 v = reinterpret_cast<f32x16>(
        _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), valid, reinterpret_cast<__m512>(as_float16(x + j, valid))));
    a1 = v > a1 ? v : a1;
  }
  a0 = a1 > a0 ? a1 : a0;
  const f32x8 m8 = high8(a0) > low8(a0) ? high8(a0) : low8(a0);
  for (int l = 0; l < kVec; ++l) m = m8[l] > m ? m8[l] : m;
#else
  f32x8 acc = f32x8{} - INFINITY;
  for (; j + 2 * kVec <= n; j += 2 * kVec) {
    if (fetch_ahead && j % per_line == 0) prefetch_ahead(x + j);
    const f32x8 v = as_float8(x + j);
    acc = v > acc ? v : acc;
    const f32x8 w = as_float8(x + j + kVec);
    acc = w > acc ? w : acc;
  }
  for (; j + kVec <= n; j += kVec) {
    const f32x8 v = as_float8(x + j);
    acc = v > acc ? v : acc;
  }
  for (int l = 0; l < kVec; ++l) m = acc[l] > m ? acc[l] : m;
  for (; j < n; ++j) m = float(x[j]) > m ? float(x[j]) : m;
#endif
  return m;
}
inline float row_max(const float* x, int64_t n, bool fetch_ahead = false) { return row_max_of(x, n, fetch_ahead); }
inline float row_max(const bfloat16* x, int64_t n, bool fetch_ahead = false) { return row_max_of(x, n, fetch_ahead); }

// Returns sum_j exp(x[j] - shift); when out is given also writes out[j] = exp(x[j] - shift) * scale.
// out may alias x (float32). x float32, or bfloat16 read widened (exact): the same exps and sums as
// of the widened row.
//
// NOTE [ A row's last lanes in one vector ]
// With AVX-512 the lanes past a row's last sixteen are one masked vector, -inf past n (an exp of 0),
// where the eight-lane loop takes up to one more vector and then a padded one built a float at a
// time. Its low half is the eight-lane loop's next vector (or its padded tail) and its high half the
// padded tail (or zeros, which leave the sums as they are): the same exps and the same sums, bit for
// bit. Fifteen of every sixteen of the attention's causal rows (1 to 256 keys) end in such a tail.
template <typename T>
[[gnu::always_inline]] inline float exp_shifted_of(const T* x, int64_t n, float shift, float scale, float* out) {
  f32x8 acc = {};
  int64_t j = 0;
#ifdef __AVX512F__
  for (; j + 2 * kVec <= n; j += 2 * kVec) {  // NOTE [ Sixteen lanes where the CPU has AVX-512 ]
    const f32x16 e = exp16(as_float16(x + j) - shift);
    acc += low8(e);
    acc += high8(e);
    if (out) store16(out + j, e * scale);
  }
  if (j < n) {  // NOTE [ A row's last lanes in one vector ]
    const __mmask16 valid = __mmask16((1u << (n - j)) - 1);
    const f32x16 v = reinterpret_cast<f32x16>(
        _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), valid,
                           reinterpret_cast<__m512>(as_float16(x + j, valid) - shift)));
    const f32x16 e = exp16(v);
    acc += low8(e);
    acc += high8(e);
    if (out) _mm512_mask_storeu_ps(out + j, valid, reinterpret_cast<__m512>(e * scale));
    j = n;
  }
#endif
  for (; j + kVec <= n; j += kVec) {
    const f32x8 e = exp8(as_float8(x + j) - shift);
    acc += e;
    if (out) store8(out + j, e * scale);
  }
  if (j < n) {  // the tail, padded with -inf (exp = 0)
    float buf[kVec];
    for (int l = 0; l < kVec; ++l) buf[l] = j + l < n ? float(x[j + l]) - shift : -INFINITY;
    const f32x8 e = exp8(load8(buf));
    acc += e;
    if (out)
      for (int l = 0; j + l < n; ++l) out[j + l] = e[l] * scale;
  }
  return hsum8(acc);
}
[[gnu::always_inline]] inline float exp_shifted(const float* x, int64_t n, float shift, float scale, float* out) {
  return exp_shifted_of(x, n, shift, scale, out);
}
[[gnu::always_inline]] inline float exp_shifted(const bfloat16* x, int64_t n, float shift, float scale, float* out) {
  return exp_shifted_of(x, n, shift, scale, out);
}

// Which lines a rounding pass fetches ahead (NOTE [ Prefetching ahead ] in vec_math.h): none for
// rows the cache holds (attention's blocks), out's for a result streamed to memory (cross-entropy's
// gradient), both for a conversion of a whole activation.
enum class Ahead { none, out, both };

// out[i] = bfloat16(x[i]) for n contiguous floats, sixteen (AVX-512) or eight at a time. A loop of
// bfloat16(x) does not vectorize.
inline void round_to_bf16(const float* x, int64_t n, bfloat16* out, Ahead ahead = Ahead::none) {
  static_assert(sizeof(bfloat16) == sizeof(uint16_t));
  int64_t i = 0;
#ifdef __AVX512F__
  for (; i + 2 * kVec <= n; i += 2 * kVec) {
    if (ahead == Ahead::both) prefetch_ahead(x + i);
    if (ahead != Ahead::none) prefetch_ahead_for_write(out + i);
    store16_rounded(out + i, load16(x + i));
  }
  if (i < n) store16_rounded(out + i, load16_partial(x + i, n - i), n - i), i = n;
#endif
  for (; i + kVec <= n; i += kVec) {
    bf16_u32x8 u;
    std::memcpy(&u, x + i, sizeof u);
    const bf16_u16x8 h = round8_to_bf16(u);
    std::memcpy(static_cast<void*>(out + i), &h, sizeof h);
  }
  for (; i < n; ++i) out[i] = bfloat16(x[i]);
}

// out[i] = bfloat16(x[i] * scale): the float32 product, then rounded as above (one pass where a
// scaling and a rounding would take two).
inline void round_to_bf16(const float* x, int64_t n, float scale, bfloat16* out, Ahead ahead = Ahead::none) {
  int64_t i = 0;
#ifdef __AVX512F__
  for (; i + 2 * kVec <= n; i += 2 * kVec) {
    if (ahead == Ahead::both) prefetch_ahead(x + i);
    if (ahead != Ahead::none) prefetch_ahead_for_write(out + i);
    store16_rounded(out + i, load16(x + i) * scale);
  }
  if (i < n) store16_rounded(out + i, load16_partial(x + i, n - i) * scale, n - i), i = n;
#endif
  for (; i + kVec <= n; i += kVec) {
    const f32x8 y = load8(x + i) * scale;
    bf16_u32x8 u;
    std::memcpy(&u, &y, sizeof u);
    const bf16_u16x8 h = round8_to_bf16(u);
    std::memcpy(static_cast<void*>(out + i), &h, sizeof h);
  }
  for (; i < n; ++i) out[i] = bfloat16(x[i] * scale);
}

}  // namespace mvgpt::cpu::fused
