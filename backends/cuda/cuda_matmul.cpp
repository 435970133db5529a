// Matrix multiplication through cuBLAS (host code only).
//
// NOTE [ Row-major GEMMs on a column-major library ]
// cuBLAS is column-major. A row-major (M, N) matrix with row stride ld is, to cuBLAS, its (N, M)
// transpose with leading dimension ld. So row-major C = op(A) op(B) is computed as the column-major
// C^T = op(B)^T op(A)^T: the operands swap places, M and N swap, and each keeps its transpose flag.
// As on the CPU, each operand is passed as it lies (unit column stride, or unit row stride = a
// transposed view) and only a layout that is neither is packed. Batches whose matrices sit at
// uniform strides (after merging batch dims) become one strided-batched call; a right operand
// shared by the whole batch with evenly strided left rows becomes one tall GEMM.
#include <climits>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend_impl.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/strided_indexer.h"

namespace mvgpt::cuda {
namespace {

struct MatLayout {
  bool ok = false;
  bool trans = false;  // row-major sense: the matrix is stored transposed
  int64_t ld = 1;
};

// How cuBLAS can read a row-major rows x cols matrix with strides (s_row, s_col), if at all.
MatLayout blas_layout(int64_t rows, int64_t cols, int64_t s_row, int64_t s_col) {
  if ((cols == 1 || s_col == 1) && (rows == 1 || s_row >= std::max<int64_t>(cols, 1)))
    return {true, false, rows == 1 ? std::max<int64_t>(cols, 1) : s_row};
  if ((rows == 1 || s_row == 1) && (cols == 1 || s_col >= std::max<int64_t>(rows, 1)))
    return {true, true, cols == 1 ? std::max<int64_t>(rows, 1) : s_col};
  return {};
}

int to_int(int64_t v, const char* what) {
  if (v > INT_MAX)
    throw std::invalid_argument(std::string("CudaBackend::matmul: ") + what + " " + std::to_string(v) +
                                " exceeds cuBLAS's int range");
  return int(v);
}

// Row-major C (M, N) = op(A) op(B), batched at uniform strides (count 1: one GEMM).
template <typename T>
void gemm(cublasHandle_t h, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, int64_t sa,
          const T* B, int64_t ldb, int64_t sb, T* C, int64_t ldc, int64_t sc, int64_t count) {
  const T one = 1, zero = 0;
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = to_int(N, "N"), n = to_int(M, "M"), k = to_int(K, "K");
  const int la = to_int(lda, "lda"), lb = to_int(ldb, "ldb"), lc = to_int(ldc, "ldc");
  if constexpr (std::is_same_v<T, float>) {
    if (count == 1) MVGPT_CUBLAS_CHECK(cublasSgemm(h, opb, opa, m, n, k, &one, B, lb, A, la, &zero, C, lc));
    else
      MVGPT_CUBLAS_CHECK(cublasSgemmStridedBatched(h, opb, opa, m, n, k, &one, B, lb, sb, A, la, sa, &zero, C, lc, sc,
                                                   to_int(count, "batch")));
  } else {
    if (count == 1) MVGPT_CUBLAS_CHECK(cublasDgemm(h, opb, opa, m, n, k, &one, B, lb, A, la, &zero, C, lc));
    else
      MVGPT_CUBLAS_CHECK(cublasDgemmStridedBatched(h, opb, opa, m, n, k, &one, B, lb, sb, A, la, sa, &zero, C, lc, sc,
                                                   to_int(count, "batch")));
  }
}

template <typename T>
void matmul_typed(CudaBackend& be, Tensor a, Tensor b, const Tensor& out) {
  const int nd = out.dim();
  const int64_t M = out.shape()[nd - 2], N = out.shape()[nd - 1], K = a.shape()[nd - 1];
  auto layout_of = [&](const Tensor& t, int64_t rows, int64_t cols) {
    return blas_layout(rows, cols, t.strides()[nd - 2], t.strides()[nd - 1]);
  };
  MatLayout la = layout_of(a, M, K), lb = layout_of(b, K, N);
  if (!la.ok) {
    Tensor packed = be.scratch(a.shape(), a.dtype());
    be.copy(a, packed);
    a = packed;
    la = layout_of(a, M, K);
  }
  if (!lb.ok) {
    Tensor packed = be.scratch(b.shape(), b.dtype());
    be.copy(b, packed);
    b = packed;
    lb = layout_of(b, K, N);
  }
  const T* ap = static_cast<const T*>(a.raw_data());
  const T* bp = static_cast<const T*>(b.raw_data());
  T* cp = static_cast<T*>(out.raw_data());
  cublasHandle_t h = be.cublas();

  Shape batch = out.shape();
  batch.resize(nd - 2);
  Strides sa = a.strides(), sb = b.strides(), sc = out.strides();
  sa.resize(nd - 2);
  sb.resize(nd - 2);
  sc.resize(nd - 2);
  const int64_t nbatch = numel(batch);

  // A shared right operand with evenly strided left rows: one (nbatch * M, K) @ (K, N) GEMM.
  bool b_shared = true;
  for (int d = 0; d < nd - 2; ++d) b_shared = b_shared && (batch[d] == 1 || sb[d] == 0);
  if (nbatch > 1 && b_shared && !la.trans) {
    Shape rows_shape = batch;
    rows_shape.push_back(M);
    Strides rows_strides = sa;
    rows_strides.push_back(a.strides()[nd - 2]);
    StridedIndexer<1> rows = make_indexer<1>(rows_shape, {&rows_strides});
    if (rows.ndim <= 1 && (rows.ndim == 0 || rows.strides[0][0] >= std::max<int64_t>(K, 1))) {
      const int64_t lda = rows.ndim == 0 ? std::max<int64_t>(K, 1) : rows.strides[0][0];
      gemm<T>(h, false, lb.trans, nbatch * M, N, K, ap, lda, 0, bp, lb.ld, 0, cp, N, 0, 1);
      return;
    }
  }

  // Batch dims merged across a, b and out: one dim means uniform strides, one strided-batched call.
  StridedIndexer<3> bl = make_indexer<3>(batch, {&sa, &sb, &sc});
  if (bl.ndim <= 1) {
    const int64_t count = bl.ndim == 0 ? 1 : bl.shape[0];
    const int64_t bsa = bl.ndim == 0 ? 0 : bl.strides[0][0], bsb = bl.ndim == 0 ? 0 : bl.strides[1][0];
    const int64_t bsc = bl.ndim == 0 ? 0 : bl.strides[2][0];
    gemm<T>(h, la.trans, lb.trans, M, N, K, ap, la.ld, bsa, bp, lb.ld, bsb, cp, N, bsc, count);
    return;
  }
  // Irregular batches (several merged dims): one GEMM per matrix, all queued on the stream.
  for (int64_t i = 0; i < nbatch; ++i) {
    int64_t off[3];
    bl.offsets(i, off);
    gemm<T>(h, la.trans, lb.trans, M, N, K, ap + off[0], la.ld, 0, bp + off[1], lb.ld, 0, cp + off[2], N, 0, 1);
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
  switch (out.dtype()) {
    case DType::f32: return matmul_typed<float>(*this, a, b, out);
    case DType::f64: return matmul_typed<double>(*this, a, b, out);
    default:
      throw std::logic_error("CudaBackend::matmul: dtype " + std::string(dtype_name(out.dtype())) +
                             " reached the kernel (the ops layer widens bfloat16 to float32)");
  }
}

}  // namespace mvgpt::cuda
