// Matrix multiplication through cuBLAS (host code only).
//
// NOTE [ Row-major GEMMs on a column-major library ]
// cuBLAS is column-major. A row-major (M, N) matrix with row stride ld is, to cuBLAS, its (N, M)
// transpose with leading dimension ld. So row-major C = op(A) op(B) is computed as the column-major
// C^T = op(B)^T op(A)^T: the operands swap places, M and N swap, and each keeps its transpose flag.
// As on the CPU, the plan of backends/matmul_plan.h (NOTE [ Matmul layouts ]) passes each operand
// as it lies, packs only a layout that is neither, and makes a shared right operand one tall GEMM.
// Batches whose matrices sit at uniform strides (after merging batch dims) become one
// strided-batched call.
#include <climits>
#include <type_traits>
#include <stdexcept>
#include <string>

#include <mvgpt/backends/cuda/cuda_backend_impl.h>
#include <mvgpt/backends/cuda/cuda_check.h>
#include <mvgpt/backends/cuda/cuda_gemm.h>
#include <mvgpt/backends/cuda/strided_indexer.h>
#include <mvgpt/backends/matmul_plan.h>

namespace mvgpt::cuda {
namespace {

int to_int(int64_t v, const char* what) {
  if (v > INT_MAX)
    throw std::invalid_argument(std::string("cuBLAS GEMM: ") + what + " " + std::to_string(v) +
                                " exceeds cuBLAS's int range");
  return int(v);
}

}  // namespace

template <typename TA, typename T>
void gemm(cublasHandle_t h, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const TA* A, int64_t lda, int64_t sa,
          const TA* B, int64_t ldb, int64_t sb, T* C, int64_t ldc, int64_t sc, int64_t count) {
  const T one = 1, zero = 0;
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = to_int(N, "N"), n = to_int(M, "M"), k = to_int(K, "K");
  const int la = to_int(lda, "lda"), lb = to_int(ldb, "ldb"), lc = to_int(ldc, "ldc");
  const int batch = to_int(count, "batch");
  count_launches(1);  // one cuBLAS call below, past the checks that may refuse it
  if constexpr (std::is_same_v<TA, bfloat16>) {
    static_assert(std::is_same_v<T, float>);
    if (count == 1)
      MVGPT_CUBLAS_CHECK(cublasGemmEx(h, opb, opa, m, n, k, &one, B, CUDA_R_16BF, lb, A, CUDA_R_16BF, la, &zero, C,
                                      CUDA_R_32F, lc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    else
      MVGPT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, opb, opa, m, n, k, &one, B, CUDA_R_16BF, lb, sb, A, CUDA_R_16BF,
                                                    la, sa, &zero, C, CUDA_R_32F, lc, sc, batch,
                                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else if constexpr (std::is_same_v<T, float>) {
    if (count == 1) MVGPT_CUBLAS_CHECK(cublasSgemm(h, opb, opa, m, n, k, &one, B, lb, A, la, &zero, C, lc));
    else
      MVGPT_CUBLAS_CHECK(cublasSgemmStridedBatched(h, opb, opa, m, n, k, &one, B, lb, sb, A, la, sa, &zero, C, lc, sc,
                                                   batch));
  } else {
    if (count == 1) MVGPT_CUBLAS_CHECK(cublasDgemm(h, opb, opa, m, n, k, &one, B, lb, A, la, &zero, C, lc));
    else
      MVGPT_CUBLAS_CHECK(cublasDgemmStridedBatched(h, opb, opa, m, n, k, &one, B, lb, sb, A, la, sa, &zero, C, lc, sc,
                                                   batch));
  }
}

template void gemm<float, float>(cublasHandle_t, bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, int64_t,
                                 const float*, int64_t, int64_t, float*, int64_t, int64_t, int64_t);
template void gemm<double, double>(cublasHandle_t, bool, bool, int64_t, int64_t, int64_t, const double*, int64_t,
                                   int64_t, const double*, int64_t, int64_t, double*, int64_t, int64_t, int64_t);
template void gemm<bfloat16, float>(cublasHandle_t, bool, bool, int64_t, int64_t, int64_t, const bfloat16*, int64_t,
                                    int64_t, const bfloat16*, int64_t, int64_t, float*, int64_t, int64_t, int64_t);

namespace {

template <typename TA, typename T>
void matmul_typed(CudaBackend& be, Tensor a, Tensor b, const Tensor& out) {
  const matmul_plan::MatmulPlan p = matmul_plan::plan(a, b, out, [&be](const Tensor& t) {
    Tensor packed = be.scratch(t.shape(), t.dtype());
    be.copy(t, packed);
    return packed;
  });
  const int64_t M = p.M, N = p.N, K = p.K;
  const TA* ap = static_cast<const TA*>(a.raw_data());
  const TA* bp = static_cast<const TA*>(b.raw_data());
  T* cp = static_cast<T*>(out.raw_data());
  cublasHandle_t h = be.cublas();
  if (p.tall) {
    gemm<TA, T>(h, false, p.b.trans, p.nbatch * M, N, K, ap, p.tall_lda, 0, bp, p.b.ld, 0, cp, N, 0, 1);
    return;
  }

  // Batch dims merged across a, b and out: one dim means uniform strides, one strided-batched call.
  StridedIndexer<3> bl = make_indexer<3>(p.batch, {&p.a_batch, &p.b_batch, &p.c_batch});
  if (bl.ndim <= 1) {
    const int64_t count = bl.ndim == 0 ? 1 : bl.shape[0];
    const int64_t bsa = bl.ndim == 0 ? 0 : bl.strides[0][0], bsb = bl.ndim == 0 ? 0 : bl.strides[1][0];
    const int64_t bsc = bl.ndim == 0 ? 0 : bl.strides[2][0];
    gemm<TA, T>(h, p.a.trans, p.b.trans, M, N, K, ap, p.a.ld, bsa, bp, p.b.ld, bsb, cp, N, bsc, count);
    return;
  }
  // Irregular batches (several merged dims): one GEMM per matrix, all queued on the stream.
  for (int64_t i = 0; i < p.nbatch; ++i) {
    int64_t off[3];
    bl.offsets(i, off);
    gemm<TA, T>(h, p.a.trans, p.b.trans, M, N, K, ap + off[0], p.a.ld, 0, bp + off[1], p.b.ld, 0, cp + off[2], N, 0, 1);
  }
}

}  // namespace

void CudaBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  for (const Tensor* t : {&a, &b, &out}) require_on(*t, device(), "CudaBackend::matmul");
  if (out.numel() == 0) return;
  activate();
  if (a.shape().back() == 0) {  // an empty sum: cuBLAS would not touch C
    fill(out, 0.0);
    return;
  }
  if (!out.is_contiguous()) throw std::logic_error("CudaBackend::matmul: out must be contiguous");
  if (a.dtype() == DType::bf16 && out.dtype() == DType::f32) {
    if (cc_major_ >= 8) return matmul_typed<bfloat16, float>(*this, a, b, out);
    // Before sm_80 cuBLAS may refuse bf16 GEMMs: the operands widened to float32 (exactly), SGEMM.
    Tensor wa = scratch(a.shape(), DType::f32), wb = scratch(b.shape(), DType::f32);
    copy(a, wa);
    copy(b, wb);
    return matmul_typed<float, float>(*this, wa, wb, out);
  }
  switch (out.dtype()) {
    case DType::f32: return matmul_typed<float, float>(*this, a, b, out);
    case DType::f64: return matmul_typed<double, double>(*this, a, b, out);
    default:
      throw std::logic_error("CudaBackend::matmul: dtype " + std::string(dtype_name(out.dtype())) +
                             " reached the kernel (the ops layer widens bfloat16 to float32)");
  }
}

Backend::Bf16Support CudaBackend::bf16_support() {
  const std::string cc = "compute capability " + std::to_string(cc_major_) + "." + std::to_string(cc_minor_);
  // From sm_80 (A100) tensor cores take bf16; before, bf16 products are widened to float32.
  return {cc_major_ >= 8, cc_major_ >= 8 ? cc + ", bf16 tensor cores" : cc + ", no bf16 tensor cores (fp32 products)"};
}

}  // namespace mvgpt::cuda
