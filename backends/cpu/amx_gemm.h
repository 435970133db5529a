#pragma once
// A training step's large bf16 products on AMX tiles, written here rather than sent to oneDNN 2.6
// (Debian's), whose kernels multiply them at about half of what the tiles give (NOTE [ Large
// products on AMX tiles ] in amx_gemm.cpp). Each product runs over the thread pool: B packed once
// into the tiles' layout, then each thread takes whole 32-row panels of A and C.
#include <cstdint>

#include <mvgpt/tensor/dtype.h>

namespace mvgpt::cpu::amx {

// Whether the products below take this one: AMX usable (amx.h), MVGPT_AMX_GEMM not 0, M and N at
// least 32, and large enough to be worth packing B (M * N * K at least kLargeMinWork).
inline constexpr int64_t kLargeMinWork = int64_t(1) << 24;
bool takes_large(int64_t M, int64_t N, int64_t K);

// C (M, N) = alpha op(A) op(B) (+ bias) + beta C, row-major: op(A) is A stored (M, K), or where ta A
// stored (K, M) and transposed (a weight gradient's dY^T); op(B) is B stored (K, N), or where tb B
// stored (N, K) and transposed (a linear layer's weight); bias is N floats or null; beta = 0 does not
// read C; a bias only with alpha 1. Each C[i][j] is the float32 sum, from the bias or zero, over k
// in order of 32 (the tiles' own order within each), then alpha and beta C, whatever the cut over
// threads and K's chunks. Requires takes_large(M, N, K).
void large_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A, int64_t lda,
                const bfloat16* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias);
// C (M, N) = bfloat16(op(A) op(B) (+ bias)): the float32 sums above (from the bias) rounded to
// nearest even (as fused::round_to_bf16 rounds, denormals kept).
void large_gemm_rounded(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t lda,
                        const bfloat16* B, int64_t ldb, bfloat16* C, int64_t ldc, const float* bias);

// Tests: route the products above to oneDNN on a CPU where they would run (process-wide).
void set_large_enabled(bool on);

}  // namespace mvgpt::cpu::amx
