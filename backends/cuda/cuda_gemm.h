#pragma once
// Row-major GEMMs through cuBLAS (NOTE [ Row-major GEMMs on a column-major library ] in
// cuda_matmul.cpp), shared by the backend's matmul and the fused units' kernels (attention's
// batched products, NOTE [ Attention through batched products ] in autograd/fused/attention.cu).
#include <cublas_v2.h>

#include <cstdint>

#include <mvgpt/tensor/dtype.h>  // bfloat16

namespace mvgpt::cuda {

// Row-major C (M, N) = op(A) op(B) for `count` matrices at uniform strides sa, sb, sc (count 1: one
// GEMM; a stride is then unused). ta: A is stored transposed, a row-major (K, M) matrix with leading
// dimension lda (else (M, K)); tb likewise for B ((N, K) when transposed, else (K, N)). TA is the
// operands' type and T C's: bfloat16 operands are summed in float32 (tensor cores from sm_80);
// float32 runs in float32 (cuBLAS's default math mode: no TF32). Runs on the handle's stream and
// counts as one launch (cuda_check.h). K must be positive (callers fill C for an empty sum).
// Throws std::invalid_argument past cuBLAS's int range.
template <typename TA, typename T>
void gemm(cublasHandle_t h, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const TA* A, int64_t lda, int64_t sa,
          const TA* B, int64_t ldb, int64_t sb, T* C, int64_t ldc, int64_t sc, int64_t count);

extern template void gemm<float, float>(cublasHandle_t, bool, bool, int64_t, int64_t, int64_t, const float*, int64_t,
                                        int64_t, const float*, int64_t, int64_t, float*, int64_t, int64_t, int64_t);
extern template void gemm<double, double>(cublasHandle_t, bool, bool, int64_t, int64_t, int64_t, const double*, int64_t,
                                          int64_t, const double*, int64_t, int64_t, double*, int64_t, int64_t,
                                          int64_t);
extern template void gemm<bfloat16, float>(cublasHandle_t, bool, bool, int64_t, int64_t, int64_t, const bfloat16*,
                                           int64_t, int64_t, const bfloat16*, int64_t, int64_t, float*, int64_t,
                                           int64_t, int64_t);

}  // namespace mvgpt::cuda
