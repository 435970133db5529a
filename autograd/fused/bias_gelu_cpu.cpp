// The CPU kernels of bias + GELU (autograd/fused/bias_gelu.h): row by row, the add and then the GELU
// of backends/elementwise_math.h, each rounded as the separate ops round them.
#include <stdexcept>

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

// bfloat16(gelu(x)): the unary GELU kernel's lanes (cpu::gelu_v, lane by lane the same in any
// width), each rounded as it is stored.
void gelu_rounded(const Tensor& x, const Tensor& out) {
  if (!x.is_contiguous() || !out.is_contiguous() || x.dtype() != DType::f32 || out.dtype() != DType::bf16 ||
      x.numel() != out.numel())
    throw std::logic_error("gelu_rounded (cpu): a contiguous float32 x and bfloat16 out of its size expected");
  const float* xp = x.data<float>();
  bfloat16* o = out.data<bfloat16>();
  parallel_for(x.numel(), cpu::kElementwiseGrain, [&](int64_t i0, int64_t i1) {
    int64_t i = i0;
#ifdef __AVX512F__
    for (; i + 16 <= i1; i += 16) cpu::fused::store16_rounded(o + i, cpu::gelu_v(cpu::load16(xp + i)));
#endif
    for (; i < i1; ++i) o[i] = bfloat16(cpu::gelu_v(cpu::splat(xp[i]))[0]);
  });
}

}  // namespace

// The CPU's linear folds the bias into its GEMM (backends/cpu/cpu_matmul.cpp).
BiasGeluKernels bias_gelu_cpu_kernels() { return {true, forward, backward, gelu_rounded}; }

}  // namespace mvgpt::fused
