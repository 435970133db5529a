// The CPU kernels of bias + GELU (autograd/fused/bias_gelu.h): row by row, the add and then the GELU
// of backends/elementwise_math.h, each rounded as the separate ops round them.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <mvgpt/backends/cpu/column_sum_order.h>
#include <mvgpt/backends/cpu/fused_common.h>
#include <mvgpt/backends/cpu/parallel.h>
#include <mvgpt/backends/cpu/vec_math.h>
#include <mvgpt/backends/elementwise_math.h>
#include <mvgpt/fused/bias_gelu.h>

namespace mvgpt::fused {
namespace {

using cpu::parallel_for;

template <typename T, typename F>
void rows(const Tensor& x, const Tensor& bias, F f) {
  const int64_t C = bias.numel(), N = C ? x.numel() / C : 0;
  const T *xp = x.data<T>(), *b = bias.data<T>();
  parallel_for(N, std::max<int64_t>(1, cpu::kElementwiseGrain / std::max<int64_t>(C, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < C; ++c) f(r * C + c, T(xp[r * C + c] + b[c]));
  });
}

void check(const Tensor& x, const Tensor& bias, const Tensor& out, const char* op) {
  for (const Tensor* t : {&x, &bias, &out})
    if (!t->is_contiguous() || t->dtype() != x.dtype() || (x.dtype() != DType::f32 && x.dtype() != DType::f64))
      throw std::logic_error(std::string(op) + ": contiguous float32 or float64 tensors of one dtype expected");
}

void forward(const Tensor& x, const Tensor& bias, const Tensor& out) {
  check(x, bias, out, "bias_gelu (cpu)");
  if (x.dtype() == DType::f64) {
    double* o = out.data<double>();
    rows<double>(x, bias, [o](int64_t i, double pre) { o[i] = math::gelu_tanh(pre); });
  } else {
    float* o = out.data<float>();
    rows<float>(x, bias, [o](int64_t i, float pre) { o[i] = math::gelu_tanh(pre); });
  }
}

void backward(const Tensor& grad, const Tensor& x, const Tensor& bias, const Tensor& dx) {
  check(x, bias, dx, "bias_gelu backward (cpu)");
  check(x, bias, grad, "bias_gelu backward (cpu)");
  if (x.dtype() == DType::f64) {
    const double* g = grad.data<double>();
    double* d = dx.data<double>();
    rows<double>(x, bias, [g, d](int64_t i, double pre) { d[i] = g[i] * math::gelu_tanh_grad(pre); });
  } else {
    const float* g = grad.data<float>();
    float* d = dx.data<float>();
    rows<float>(x, bias, [g, d](int64_t i, float pre) { d[i] = g[i] * math::gelu_tanh_grad(pre); });
  }
}

// x as float32 lanes: float32 as it is, bfloat16 widened (exact).
inline cpu::f32x8 load(const float* p, cpu::f32x8) { return cpu::load8(p); }
inline cpu::f32x8 load(const bfloat16* p, cpu::f32x8) { return cpu::fused::load8_widened(p); }
#ifdef __AVX512F__
inline cpu::f32x16 load(const float* p, cpu::f32x16) { return cpu::load16(p); }
inline cpu::f32x16 load(const bfloat16* p, cpu::f32x16) { return cpu::fused::load16_widened(p); }
#endif

// d rounded into out, and the rounded values as float32 lanes (what the column sums add).
inline cpu::f32x8 store_rounded(bfloat16* out, cpu::f32x8 v) {
  cpu::fused::bf16_u32x8 u;
  std::memcpy(&u, &v, sizeof u);
  const cpu::fused::bf16_u16x8 h = cpu::fused::round8_to_bf16(u);
  std::memcpy(static_cast<void*>(out), &h, sizeof h);
  return cpu::fused::load8_widened(out);
}
#ifdef __AVX512F__
inline cpu::f32x16 store_rounded(bfloat16* out, cpu::f32x16 v) {
  cpu::fused::store16_rounded(out, v);
  return cpu::fused::load16_widened(out);
}
#endif
#ifdef __AVX512F__
// NOTE [ GELU of a bfloat16 by table ]
// Under bf16 products the MLP's pre-activation is a bfloat16: one of 65,536 values. Its GELU rounded
// to bfloat16 and its GELU derivative are then each a table of the kernels' own lanes over every bit
// pattern (cpu::gelu_v and gelu_grad_v on the widened value, sixteen at a time, as the passes compute
// them), read with one sixteen-lane gather: the same bits as computing them, in fewer instructions
// than the exp and the division take (the two tables, 128 and 256 KB, stay in L2; a normal
// pre-activation reads a small part of them). Built once, on first use. On the 2-core AMX Xeon
// (family 6 model 167) BM_GeluBackwardRounded/bf16:1 took 0.96 ms against 2.46 computed,
// BM_GeluRounded/bf16:1 0.72 against 1.32; in the bf16 step the GELU's backward 8.3 ms against 16.2
// and its forward 5.7 against 9.7 (four alternations). Without AVX-512 (no sixteen-lane gather) the
// passes compute, as with a float32 pre-activation.
struct Bf16GeluTables {
  std::vector<uint16_t> rounded;  // bits of bfloat16(gelu(x)), then one padding entry (a gather reads 4 bytes)
  std::vector<float> derivative;  // gelu'(x)
};
const Bf16GeluTables& bf16_gelu_tables() {
  static const Bf16GeluTables tables = [] {
    Bf16GeluTables t;
    t.rounded.assign(65536 + 1, 0);
    t.derivative.assign(65536, 0.0f);
    uint16_t patterns[16];
    for (uint32_t b0 = 0; b0 < 65536; b0 += 16) {
      for (uint32_t l = 0; l < 16; ++l) patterns[l] = uint16_t(b0 + l);
      const cpu::f32x16 x = cpu::fused::load16_widened(reinterpret_cast<const bfloat16*>(patterns));
      cpu::fused::store16_rounded(reinterpret_cast<bfloat16*>(t.rounded.data() + b0), cpu::gelu_v(x));
      cpu::store16(t.derivative.data() + b0, cpu::gelu_grad_v(x));
    }
    return t;
  }();
  return tables;
}
// Sixteen bfloat16 bit patterns as 32-bit gather indices.
inline __m512i patterns16(const bfloat16* p) {
  return _mm512_maskz_cvtepu16_epi32(__mmask16(0xffff), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// (The masked gathers and conversions, all lanes: the unmasked ones trip GCC 12's bug 105593 warning.)
inline void store16_gelu_by_table(bfloat16* o, const bfloat16* x, const uint16_t* rounded) {
  const __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), __mmask16(0xffff), patterns16(x), rounded, 2);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), _mm512_maskz_cvtepi32_epi16(__mmask16(0xffff), v));
}
inline cpu::f32x16 gelu_grad_by_table(const bfloat16* x, const float* derivative) {
  return cpu::f32x16(_mm512_mask_i32gather_ps(_mm512_setzero_ps(), __mmask16(0xffff), patterns16(x), derivative, 4));
}
#endif

// bfloat16(gelu(x)), x float32 or bfloat16 (the MLP's pre-activation as its product wrote it): the
// unary GELU kernel's lanes (cpu::gelu_v, lane by lane the same in any width), each rounded as it
// is stored; a bfloat16 x sixteen at a time by table (NOTE [ GELU of a bfloat16 by table ]).
template <typename In>
void gelu_rounded_impl(const In* xp, bfloat16* o, int64_t n) {
#ifdef __AVX512F__
  const uint16_t* table = std::is_same_v<In, bfloat16> ? bf16_gelu_tables().rounded.data() : nullptr;
#endif
  parallel_for(n, cpu::kElementwiseGrain, [&](int64_t i0, int64_t i1) {
    int64_t i = i0;
#ifdef __AVX512F__
    for (; i + 16 <= i1; i += 16) {
      cpu::prefetch_ahead(xp + i);  // NOTE [ Prefetching ahead ] (backends/cpu/vec_math.h)
      cpu::prefetch_ahead_for_write(o + i);
      if constexpr (std::is_same_v<In, bfloat16>) store16_gelu_by_table(o + i, xp + i, table);
      else cpu::fused::store16_rounded(o + i, cpu::gelu_v(load(xp + i, cpu::f32x16{})));
    }
#endif
    for (; i + 8 <= i1; i += 8) store_rounded(o + i, cpu::gelu_v(load(xp + i, cpu::f32x8{})));
    for (; i < i1; ++i) o[i] = bfloat16(cpu::gelu_v(cpu::splat(float(xp[i])))[0]);
  });
}
void gelu_rounded(const Tensor& x, const Tensor& out) {
  if (!x.is_contiguous() || !out.is_contiguous() || (x.dtype() != DType::f32 && x.dtype() != DType::bf16) ||
      out.dtype() != DType::bf16 || x.numel() != out.numel())
    throw std::logic_error("gelu_rounded (cpu): a contiguous float32 or bfloat16 x and bfloat16 out of its size expected");
  if (x.dtype() == DType::bf16) gelu_rounded_impl(x.data<bfloat16>(), out.data<bfloat16>(), x.numel());
  else gelu_rounded_impl(x.data<float>(), out.data<bfloat16>(), x.numel());
}

inline void store(float* p, cpu::f32x8 v) { cpu::store8(p, v); }
#ifdef __AVX512F__
inline void store(float* p, cpu::f32x16 v) { cpu::store16(p, v); }
#endif

// dx = bfloat16(grad * gelu'(x)) (the unary GELU backward's lanes on x and grad as float32), and
// the column sums of dx's rounded values (the bias gradient of the product that made x, whose
// result is dx), in one pass over x and grad, in the CPU's column sum order (NOTE [ Column sum
// order ] in backends/cpu/column_sum_order.h): ops::sum(dx, {0})'s bits. x and grad: float32 or
// bfloat16 each.
template <typename TX, typename TG>
void gelu_backward_rounded_impl(const TX* xp, const TG* gp, int64_t N, int64_t C, bfloat16* dp, float* o) {
#ifdef __AVX512F__
  // NOTE [ GELU of a bfloat16 by table ]
  const float* table = std::is_same_v<TX, bfloat16> ? bf16_gelu_tables().derivative.data() : nullptr;
#endif
  cpu::sum_columns_row_by_row(N, C, o, [&](int64_t r, float* s, bool first) {
    const TX* xr = xp + r * C;
    const TG* gr = gp + r * C;
    bfloat16* dr = dp + r * C;
    // gelu'(x) at columns [j, j + lanes of V): sixteen of a bfloat16 x from the table, else computed.
    auto derivative = [&](auto tag, int64_t j) {
      using V = decltype(tag);
#ifdef __AVX512F__
      if constexpr (std::is_same_v<TX, bfloat16> && std::is_same_v<V, cpu::f32x16>) return gelu_grad_by_table(xr + j, table);
      else
#endif
        return cpu::gelu_grad_v(load(xr + j, tag));
    };
    // Columns [j, j + lanes of V).
    auto columns = [&](auto tag, int64_t j) {
      using V = decltype(tag);
      const V d = store_rounded(dr + j, load(gr + j, tag) * derivative(tag, j));
      store(s + j, first ? d : load(s + j, tag) + d);
    };
    int64_t j = 0;
#ifdef __AVX512F__
    for (; j + 16 <= C; j += 16) {
      cpu::prefetch_ahead(xr + j);  // NOTE [ Prefetching ahead ] (backends/cpu/vec_math.h)
      cpu::prefetch_ahead(gr + j);
      cpu::prefetch_ahead_for_write(dr + j);
      columns(cpu::f32x16{}, j);
    }
#endif
    for (; j + 8 <= C; j += 8) columns(cpu::f32x8{}, j);
    for (; j < C; ++j) {
      dr[j] = bfloat16((cpu::splat(float(gr[j])) * cpu::gelu_grad_v(cpu::splat(float(xr[j]))))[0]);
      const float d = float(dr[j]);
      s[j] = first ? d : s[j] + d;
    }
  });
}

template <typename TX>
void gelu_backward_rounded_of(const TX* xp, const Tensor& grad, int64_t N, int64_t C, bfloat16* dp, float* o) {
  if (grad.dtype() == DType::bf16) gelu_backward_rounded_impl(xp, grad.data<bfloat16>(), N, C, dp, o);
  else gelu_backward_rounded_impl(xp, grad.data<float>(), N, C, dp, o);
}

void gelu_backward_rounded(const Tensor& x, const Tensor& grad, const Tensor& dx, const Tensor& sums) {
  auto float_or_bf16 = [](const Tensor& t) { return t.dtype() == DType::f32 || t.dtype() == DType::bf16; };
  const bool fits = x.dim() == 2 && x.is_contiguous() && grad.is_contiguous() && dx.is_contiguous() &&
                    sums.is_contiguous() && float_or_bf16(x) && float_or_bf16(grad) && dx.dtype() == DType::bf16 &&
                    sums.dtype() == DType::f32 && grad.shape() == x.shape() && dx.shape() == x.shape() &&
                    sums.numel() == x.size(1);
  if (!fits)
    throw std::logic_error("gelu_backward_rounded (cpu): contiguous float32 or bfloat16 x and grad (N, C), bfloat16 "
                           "dx (N, C) and float32 sums (C) expected");
  const int64_t N = x.size(0), C = x.size(1);
  if (x.dtype() == DType::bf16) gelu_backward_rounded_of(x.data<bfloat16>(), grad, N, C, dx.data<bfloat16>(), sums.data<float>());
  else gelu_backward_rounded_of(x.data<float>(), grad, N, C, dx.data<bfloat16>(), sums.data<float>());
}

}  // namespace

// The CPU's linear folds the bias into its GEMM (backends/cpu/cpu_matmul.cpp).
BiasGeluKernels bias_gelu_cpu_kernels() { return {true, forward, backward, gelu_rounded, gelu_backward_rounded}; }

}  // namespace mvgpt::fused
