// Matrix multiplication through OpenBLAS. Layouts and the tall-GEMM case are planned in
// backends/matmul_plan.h (NOTE [ Matmul layouts ]).
// Threads (NOTE [ One thread pool ] in blas.cpp): a large GEMM is split over the TBB pool by
// blas::gemm; a batch of small GEMMs (attention-like) runs one single-threaded GEMM per TBB task.
#include <algorithm>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <mvgpt/backends/cpu/bf16_gemm.h>
#include <mvgpt/backends/cpu/blas.h>
#include <mvgpt/backends/cpu/cpu_backend.h>
#include <mvgpt/backends/cpu/strided.h>
#include <mvgpt/backends/matmul_plan.h>

namespace mvgpt::cpu {
namespace {

using matmul_plan::blas_layout;
using matmul_plan::MatLayout;

// Below this many multiply-adds per matrix, a batch is split across TBB tasks.
constexpr int64_t kSmallGemmFlops = int64_t(1) << 24;

// A contiguous copy of t (for an operand BLAS cannot read as it lies).
Tensor packed_copy(const Tensor& t) {
  Tensor packed = Tensor::empty(t.shape(), t.dtype());
  backend_for(Device::cpu()).copy(t, packed);
  return packed;
}

template <typename TA, typename T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const TA* A, int64_t lda, const TA* B, int64_t ldb, T* C,
          bool parallel = true) {
  blas::gemm(ta, tb, M, N, K, T(1), A, lda, B, ldb, T(0), C, N, parallel);
}
// A bfloat16 result (NOTE [ bf16 results ] in blas.cpp).
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t lda, const bfloat16* B,
          int64_t ldb, bfloat16* C, bool parallel = true) {
  blas::gemm_rounded(ta, tb, M, N, K, A, lda, B, ldb, nullptr, C, N, parallel);
}

// TA: the operands' type; T: the accumulation and result type (bfloat16 operands: float, or a
// bfloat16 result rounded as it is written).
template <typename TA, typename T>
void matmul_typed(Tensor a, Tensor b, const Tensor& out) {
  const matmul_plan::MatmulPlan p = matmul_plan::plan(a, b, out, packed_copy);
  const int64_t M = p.M, N = p.N, K = p.K, nbatch = p.nbatch;
  const TA* ap = static_cast<const TA*>(a.raw_data());
  const TA* bp = static_cast<const TA*>(b.raw_data());
  T* cp = out.data<T>();
  if (p.tall) {
    gemm(false, p.b.trans, nbatch * M, N, K, ap, p.tall_lda, bp, p.b.ld, cp);
    return;
  }

  // Offsets of every batch matrix, in row-major batch order.
  std::vector<int64_t> offs(size_t(nbatch) * 3);
  Layout<3> bl = make_layout<3>(p.batch, {&p.a_batch, &p.b_batch, &p.c_batch});
  int64_t i = 0;
  for_each_run(bl, 0, nbatch, [&](const int64_t* off, int64_t n, const int64_t* s) {
    for (int64_t k = 0; k < n; ++k, ++i) {
      offs[size_t(3 * i)] = off[0] + k * s[0];
      offs[size_t(3 * i + 1)] = off[1] + k * s[1];
      offs[size_t(3 * i + 2)] = off[2] + k * s[2];
    }
  });
  auto one = [&](int64_t i, bool parallel) {
    gemm(p.a.trans, p.b.trans, M, N, K, ap + offs[size_t(3 * i)], p.a.ld, bp + offs[size_t(3 * i + 1)], p.b.ld,
         cp + offs[size_t(3 * i + 2)], parallel);
  };
  if (nbatch > 1 && M * N * K < kSmallGemmFlops) {
    parallel_for(nbatch, 1, [&](int64_t b0, int64_t e0) {
      for (int64_t i = b0; i < e0; ++i) one(i, false);
    });
  } else {
    for (int64_t i = 0; i < nbatch; ++i) one(i, true);
  }
}

// A copy of t that BLAS can read when its layout is not one it can (see blas_layout).
Tensor blas_readable(const Tensor& t) {
  return blas_layout(t.size(0), t.size(1), t.strides()[0], t.strides()[1]).ok ? t : packed_copy(t);
}

// out (N, O) = x (N, I) weight^T (+ bias): a bfloat16 result goes to blas::gemm_rounded, the bias
// (float32) in oneDNN's output pass; bfloat16 and float32 operands go to blas::gemm_bias, where
// oneDNN adds the bias as it writes out (no pass at all) and OpenBLAS adds the product to the bias
// written into every row of out first (beta = 1, which saves a pass: it would otherwise zero out).
// float64: the latter here.
template <typename TA, typename T>
void linear_typed(Tensor x, Tensor weight, const Tensor& bias, const Tensor& out) {
  x = blas_readable(x);
  weight = blas_readable(weight);
  const int64_t N = out.size(0), O = out.size(1), I = x.size(1);
  const MatLayout lx = blas_layout(N, I, x.strides()[0], x.strides()[1]);
  const MatLayout lw = blas_layout(O, I, weight.strides()[0], weight.strides()[1]);
  T* c = out.data<T>();
  // The bias as the GEMMs read it: contiguous (a copy of a strided one).
  Tensor b = bias;
  if (bias.defined() && !bias.is_contiguous()) {
    b = Tensor::empty(bias.shape(), bias.dtype());
    backend_for(Device::cpu()).copy(bias, b);
  }
  if constexpr (std::is_same_v<T, bfloat16>) {  // bfloat16 operands and result: the bias in oneDNN's pass
    return blas::gemm_rounded(lx.trans, !lw.trans, N, O, I, static_cast<const TA*>(x.raw_data()), lx.ld,
                              static_cast<const TA*>(weight.raw_data()), lw.ld,
                              b.defined() ? b.data<float>() : nullptr, c, O);
  } else {
    if (b.defined()) {
      const T* bp = b.data<T>();
      if constexpr (std::is_same_v<T, float>) {
        return blas::gemm_bias(lx.trans, !lw.trans, N, O, I, static_cast<const TA*>(x.raw_data()), lx.ld,
                               static_cast<const TA*>(weight.raw_data()), lw.ld, bp, c, O);
      }
      parallel_for(N, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(O, 1)), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) std::copy(bp, bp + O, c + r * O);
      });
    }
    // op(B) = weight^T: a row-major weight is read transposed, a transposed view as it is.
    blas::gemm(lx.trans, !lw.trans, N, O, I, T(1), static_cast<const TA*>(x.raw_data()), lx.ld,
               static_cast<const TA*>(weight.raw_data()), lw.ld, bias.defined() ? T(1) : T(0), c, O);
  }
}

}  // namespace

void CpuBackend::linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out) {
  if (out.numel() == 0) return;
  if (x.dtype() == DType::bf16 && out.dtype() == DType::f32) return linear_typed<bfloat16, float>(x, weight, bias, out);
  if (x.dtype() == DType::bf16 && out.dtype() == DType::bf16)
    return linear_typed<bfloat16, bfloat16>(x, weight, bias, out);
  switch (out.dtype()) {
    case DType::f32: return linear_typed<float, float>(x, weight, bias, out);
    case DType::f64: return linear_typed<double, double>(x, weight, bias, out);
    default:
      throw std::logic_error("CpuBackend::linear: dtype " + std::string(dtype_name(out.dtype())) +
                             " reached the kernel");
  }
}

void CpuBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  if (out.numel() == 0) return;
  if (a.shape().back() == 0) {  // an empty sum: BLAS may leave C untouched
    fill(out, 0.0);
    return;
  }
  if (a.dtype() == DType::bf16 && out.dtype() == DType::f32) return matmul_typed<bfloat16, float>(a, b, out);
  if (a.dtype() == DType::bf16 && out.dtype() == DType::bf16) return matmul_typed<bfloat16, bfloat16>(a, b, out);
  switch (out.dtype()) {
    case DType::f32: return matmul_typed<float, float>(a, b, out);
    case DType::f64: return matmul_typed<double, double>(a, b, out);
    default:
      throw std::logic_error("CpuBackend::matmul: dtype " + std::string(dtype_name(out.dtype())) +
                             " reached the kernel");
  }
}

Backend::Bf16Support CpuBackend::bf16_support() {
  const bf16::CpuSupport& s = bf16::cpu_support();
  return {s.native(), s.describe() + ", oneDNN kernel " + bf16::kernel_name()};
}

}  // namespace mvgpt::cpu
