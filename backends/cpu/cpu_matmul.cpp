// Matrix multiplication through OpenBLAS.
//
// NOTE [ Matmul layouts ]
// Each operand's matrix dims are handed to BLAS as they are: row-major (unit column stride) or
// transposed (unit row stride, e.g. a .transpose(-1, -2) view) with the other stride as the leading
// dimension. Only a layout that is neither (a slice with gaps in both, a stride-0 expand) is packed.
// A shared right operand (batch strides 0, as in x (B, T, C) @ w (C, N)) whose left rows are evenly
// strided becomes one tall GEMM, which BLAS runs best.
// Threads (NOTE [ One thread pool ] in blas.cpp): a large GEMM is split over the TBB pool by
// blas::gemm; a batch of small GEMMs (attention-like) runs one single-threaded GEMM per TBB task.
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "backends/cpu/blas.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/strided.h"

namespace mvgpt::cpu {
namespace {

// Below this many multiply-adds per matrix, a batch is split across TBB tasks.
constexpr int64_t kSmallGemmFlops = int64_t(1) << 24;

struct MatLayout {
  bool ok = false;
  bool trans = false;
  int64_t ld = 1;
};

// How BLAS can read a rows x cols matrix with strides (s_row, s_col), if at all.
MatLayout blas_layout(int64_t rows, int64_t cols, int64_t s_row, int64_t s_col) {
  if ((cols == 1 || s_col == 1) && (rows == 1 || s_row >= std::max<int64_t>(cols, 1)))
    return {true, false, rows == 1 ? std::max<int64_t>(cols, 1) : s_row};
  if ((rows == 1 || s_row == 1) && (cols == 1 || s_col >= std::max<int64_t>(rows, 1)))
    return {true, true, cols == 1 ? std::max<int64_t>(rows, 1) : s_col};
  return {};
}

template <typename T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb, T* C,
          bool parallel = true) {
  blas::gemm(ta, tb, M, N, K, T(1), A, lda, B, ldb, T(0), C, N, parallel);
}

template <typename T>
void matmul_typed(Tensor a, Tensor b, const Tensor& out) {
  const int nd = out.dim();
  const int64_t M = out.shape()[nd - 2], N = out.shape()[nd - 1], K = a.shape()[nd - 1];
  auto layout_of = [&](const Tensor& t, int64_t rows, int64_t cols) {
    return blas_layout(rows, cols, t.strides()[nd - 2], t.strides()[nd - 1]);
  };
  MatLayout la = layout_of(a, M, K), lb = layout_of(b, K, N);
  if (!la.ok) {
    Tensor packed = Tensor::empty(a.shape(), a.dtype());
    backend_for(Device::cpu()).copy(a, packed);
    a = packed;
    la = layout_of(a, M, K);
  }
  if (!lb.ok) {
    Tensor packed = Tensor::empty(b.shape(), b.dtype());
    backend_for(Device::cpu()).copy(b, packed);
    b = packed;
    lb = layout_of(b, K, N);
  }
  const T* ap = static_cast<const T*>(a.raw_data());
  const T* bp = static_cast<const T*>(b.raw_data());
  T* cp = out.data<T>();

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
    Layout<1> rows = make_layout<1>(rows_shape, {&rows_strides});
    if (rows.ndim <= 1 && (rows.ndim == 0 || rows.strides[0][0] >= std::max<int64_t>(K, 1))) {
      int64_t lda = rows.ndim == 0 ? std::max<int64_t>(K, 1) : rows.strides[0][0];
      gemm(false, lb.trans, nbatch * M, N, K, ap, lda, bp, lb.ld, cp);
      return;
    }
  }

  // Offsets of every batch matrix, in row-major batch order.
  std::vector<int64_t> offs(size_t(nbatch) * 3);
  Layout<3> bl = make_layout<3>(batch, {&sa, &sb, &sc});
  int64_t i = 0;
  for_each_run(bl, 0, nbatch, [&](const int64_t* off, int64_t n, const int64_t* s) {
    for (int64_t k = 0; k < n; ++k, ++i) {
      offs[size_t(3 * i)] = off[0] + k * s[0];
      offs[size_t(3 * i + 1)] = off[1] + k * s[1];
      offs[size_t(3 * i + 2)] = off[2] + k * s[2];
    }
  });
  auto one = [&](int64_t i, bool parallel) {
    gemm(la.trans, lb.trans, M, N, K, ap + offs[size_t(3 * i)], la.ld, bp + offs[size_t(3 * i + 1)], lb.ld,
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
  if (blas_layout(t.size(0), t.size(1), t.strides()[0], t.strides()[1]).ok) return t;
  Tensor packed = Tensor::empty(t.shape(), t.dtype());
  backend_for(Device::cpu()).copy(t, packed);
  return packed;
}

// out (N, O) = x (N, I) weight^T (+ bias): the bias is written into every row of out first and the
// GEMM adds to it (beta = 1), which saves a pass over out; OpenBLAS would otherwise zero it first.
template <typename T>
void linear_typed(Tensor x, Tensor weight, const Tensor& bias, const Tensor& out) {
  x = blas_readable(x);
  weight = blas_readable(weight);
  const int64_t N = out.size(0), O = out.size(1), I = x.size(1);
  const MatLayout lx = blas_layout(N, I, x.strides()[0], x.strides()[1]);
  const MatLayout lw = blas_layout(O, I, weight.strides()[0], weight.strides()[1]);
  T* c = out.data<T>();
  if (bias.defined()) {
    Tensor b = bias.is_contiguous() ? bias : Tensor::empty(bias.shape(), bias.dtype());
    if (!b.same(bias)) backend_for(Device::cpu()).copy(bias, b);
    const T* bp = b.data<T>();
    parallel_for(N, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(O, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) std::copy(bp, bp + O, c + r * O);
    });
  }
  // op(B) = weight^T: a row-major weight is read transposed, a transposed view as it is.
  blas::gemm(lx.trans, !lw.trans, N, O, I, T(1), static_cast<const T*>(x.raw_data()), lx.ld,
             static_cast<const T*>(weight.raw_data()), lw.ld, bias.defined() ? T(1) : T(0), c, O);
}

}  // namespace

void CpuBackend::linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out) {
  if (out.numel() == 0) return;
  switch (out.dtype()) {
    case DType::f32: return linear_typed<float>(x, weight, bias, out);
    case DType::f64: return linear_typed<double>(x, weight, bias, out);
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
  switch (out.dtype()) {
    case DType::f32: return matmul_typed<float>(a, b, out);
    case DType::f64: return matmul_typed<double>(a, b, out);
    default:
      throw std::logic_error("CpuBackend::matmul: dtype " + std::string(dtype_name(out.dtype())) +
                             " reached the kernel");
  }
}

}  // namespace mvgpt::cpu
