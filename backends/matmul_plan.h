#pragma once
// Host-side planning of a batched matmul, shared by the CPU (OpenBLAS) and CUDA (cuBLAS) backends.
// Header-only and allocation-free: it runs before every GEMM, and decoding makes many small ones.
//
// NOTE [ Matmul layouts ]
// Each operand's matrix dims are handed to BLAS as they are: row-major (unit column stride) or
// transposed (unit row stride, e.g. a .transpose(-1, -2) view) with the other stride as the leading
// dimension. Only a layout that is neither (a slice with gaps in both, a stride-0 expand) is packed.
// A shared right operand (batch strides 0, as in x (B, T, C) @ w (C, N)) whose left rows are evenly
// strided becomes one tall GEMM, which BLAS runs best. How the batch is run otherwise (tasks on
// the CPU, one strided-batched call on the GPU) is each backend's own.
#include <algorithm>
#include <cstdint>

#include <mvgpt/backends/merged_dims.h>
#include <mvgpt/tensor/shape.h>
#include <mvgpt/tensor/tensor.h>

namespace mvgpt::matmul_plan {

// How BLAS can read one operand's matrices.
struct MatLayout {
  bool ok = false;     // false: neither layout fits, the operand must be packed
  bool trans = false;  // row-major sense: the matrix is stored transposed (unit row stride)
  int64_t ld = 1;      // the leading dimension (the stride that is not 1)
};

// How BLAS can read a row-major rows x cols matrix with strides (s_row, s_col), if at all.
inline MatLayout blas_layout(int64_t rows, int64_t cols, int64_t s_row, int64_t s_col) {
  if ((cols == 1 || s_col == 1) && (rows == 1 || s_row >= std::max<int64_t>(cols, 1)))
    return {true, false, rows == 1 ? std::max<int64_t>(cols, 1) : s_row};
  if ((rows == 1 || s_row == 1) && (cols == 1 || s_col >= std::max<int64_t>(rows, 1)))
    return {true, true, cols == 1 ? std::max<int64_t>(rows, 1) : s_col};
  return {};
}

// out (..., M, N) = a (..., M, K) @ b (..., K, N), batch dims already broadcast to out's.
struct MatmulPlan {
  int64_t M = 0, N = 0, K = 0;
  MatLayout a, b;                     // both ok (packed where needed)
  Shape batch;                        // out's batch dims
  Strides a_batch, b_batch, c_batch;  // a's, b's and out's strides over them
  int64_t nbatch = 1;
  // The whole batch as one (nbatch * M, K) @ (K, N) GEMM that reads a (never transposed) with
  // leading dimension tall_lda: b is shared by every matrix and a's rows are evenly strided.
  bool tall = false;
  int64_t tall_lda = 0;
};

// Plans the GEMMs of out = a @ b. An operand BLAS cannot read as it lies is replaced by
// pack(operand), a contiguous copy made by the backend (a and b are updated).
template <typename Pack>
MatmulPlan plan(Tensor& a, Tensor& b, const Tensor& out, Pack&& pack) {
  MatmulPlan p;
  const int nd = out.dim();
  p.M = out.shape()[nd - 2], p.N = out.shape()[nd - 1], p.K = a.shape()[nd - 1];
  auto layout_of = [nd](const Tensor& t, int64_t rows, int64_t cols) {
    return blas_layout(rows, cols, t.strides()[nd - 2], t.strides()[nd - 1]);
  };
  p.a = layout_of(a, p.M, p.K);
  if (!p.a.ok) {
    a = pack(a);
    p.a = layout_of(a, p.M, p.K);
  }
  p.b = layout_of(b, p.K, p.N);
  if (!p.b.ok) {
    b = pack(b);
    p.b = layout_of(b, p.K, p.N);
  }

  p.batch = out.shape();
  p.batch.resize(nd - 2);
  p.a_batch = a.strides(), p.b_batch = b.strides(), p.c_batch = out.strides();
  p.a_batch.resize(nd - 2);
  p.b_batch.resize(nd - 2);
  p.c_batch.resize(nd - 2);
  p.nbatch = numel(p.batch);

  bool b_shared = true;
  for (int d = 0; d < nd - 2; ++d) b_shared = b_shared && (p.batch[d] == 1 || p.b_batch[d] == 0);
  if (p.nbatch > 1 && b_shared && !p.a.trans) {
    // a's rows over (batch..., M): one merged dim (or none) at a stride that fits a row of K.
    Shape rows_shape = p.batch;
    rows_shape.push_back(p.M);
    Strides rows_strides = p.a_batch;
    rows_strides.push_back(a.strides()[nd - 2]);
    MergedDims<1> rows;
    merge_dims<1>(rows_shape, {&rows_strides}, rows);
    if (rows.ndim <= 1 && (rows.ndim == 0 || rows.strides[0][0] >= std::max<int64_t>(p.K, 1))) {
      p.tall = true;
      p.tall_lda = rows.ndim == 0 ? std::max<int64_t>(p.K, 1) : rows.strides[0][0];
    }
  }
  return p;
}

}  // namespace mvgpt::matmul_plan
