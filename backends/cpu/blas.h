#pragma once
// GEMM and GEMV for the CPU kernels: OpenBLAS and oneDNN, single-threaded, with large products split
// over the framework's one thread pool (oneTBB). See NOTE [ One thread pool ] and NOTE [ float32
// products through oneDNN ] in blas.cpp.
#include <cstdint>

#include <mvgpt/tensor/dtype.h>

namespace mvgpt::cpu::blas {

// Holds OpenBLAS to one thread for the rest of the process (once; CpuBackend's constructor calls it,
// before the first GEMM).
void use_one_blas_thread();

// Whether the products oneDNN multiplies, but those with A transposed (weight gradients), are cut
// into dense blocks, copied where a block of B or C is not (NOTE [ Dense blocks for oneDNN ] in
// blas.cpp): by default where the CPU has AMX, or as MVGPT_DENSE_BLOCKS=1 or 0 says;
// set_dense_blocks overrides both for the rest of the process (tests take each road on any CPU).
bool dense_blocks();
void set_dense_blocks(bool on);

// C (M, N) = alpha op(A) op(B) + beta C, row-major, op(X) = X or X^T; lda/ldb/ldc are the row strides
// of the matrices as stored. beta = 0 overwrites C (NaNs in C do not survive). M = 1 or N = 1 runs
// as a GEMV (no packing of the other operand, which is what batch-1 decoding needs). Splits the
// work into tasks over the TBB pool when it is large enough to pay for them; callers already inside
// a parallel loop pass parallel = false.
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc, bool parallel = true);
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
          const double* B, int64_t ldb, double beta, double* C, int64_t ldc, bool parallel = true);
// bfloat16 operands, float32 accumulation and C, through oneDNN, and a GEMV of our own for M = 1
// or N = 1 (bf16_gemm.h).
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A, int64_t lda,
          const bfloat16* B, int64_t ldb, float beta, float* C, int64_t ldc, bool parallel = true);
// C (M, N) = op(A) op(B) + bias (N floats, one per column of C), bfloat16 or float32 operands: the
// bias added in the product's output pass where oneDNN multiplies (no pass over C of its own, and C
// is not read); elsewhere written into C first and the product added to it.
void gemm_bias(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t lda, const bfloat16* B,
               int64_t ldb, const float* bias, float* C, int64_t ldc, bool parallel = true);
void gemm_bias(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
               int64_t ldb, const float* bias, float* C, int64_t ldc, bool parallel = true);
// C (M, N) = bfloat16(op(A) op(B) (+ bias)), bfloat16 operands: the float32 sums (and bias) rounded
// to nearest even as oneDNN writes them, where a product's result only feeds bf16 consumers (NOTE
// [ bf16 results ] in blas.cpp). bias may be null.
void gemm_rounded(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t lda, const bfloat16* B,
                  int64_t ldb, const float* bias, bfloat16* C, int64_t ldc, bool parallel = true);

}  // namespace mvgpt::cpu::blas
