#pragma once
// bfloat16 products on the CPU: bf16 operands, float32 accumulation and result, through oneDNN's
// matmul (its brgemm kernels use AMX tiles or AVX512-BF16 dot products), and one-row or one-column
// products through a GEMV of our own (NOTE [ bf16 GEMV ]). One call runs on the calling thread;
// blas::gemm cuts large products over the TBB pool as it does for float32 (NOTE [ One thread pool ]
// in blas.cpp, NOTE [ oneDNN on the TBB pool ] in onednn_matmul.cpp).
#include <cstdint>
#include <string>

#include <mvgpt/tensor/dtype.h>

namespace mvgpt::cpu::bf16 {

// What this CPU offers for bf16 products, from CPUID (AMX needs Linux's permission too, which
// is asked for here: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)).
struct CpuSupport {
  bool avx512_bf16 = false;  // VDPBF16PS: 2x the float32 FMA rate per instruction
  bool amx_bf16 = false;     // AMX tiles, granted by the kernel
  bool native() const { return avx512_bf16 || amx_bf16; }
  std::string describe() const;  // "AMX-BF16", "AVX512-BF16" or "no bf16 instructions"
};
const CpuSupport& cpu_support();

// The kernel oneDNN picked for a typical product ("brg:avx512_core_amx_bf16", ...), or
// "float32 fallback (...)" where oneDNN has no compiled bf16 kernel for this CPU.
std::string kernel_name();

// C (M, N) = alpha op(A) op(B) + beta C (+ bias, N floats, one per column, where given: in the
// product's output pass), row-major, on this thread (as blas::gemm's call_gemm).
// Where oneDNN only has its reference kernel (CPUs without AVX-512), or use_fallback(true) was
// called, the operands are widened to float32 (exact) and OpenBLAS runs the product: the same sum
// of exact products, in another order.
void gemm_one_thread(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A, int64_t lda,
                     const bfloat16* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias = nullptr);
// C (M, N) = bfloat16(op(A) op(B) (+ bias)): the float32 sums rounded to nearest even as oneDNN
// writes them (a product whose result only feeds bf16 consumers: half the bytes to write and read).
// Where oneDNN does not multiply, the float32 product above into this thread's buffer, then rounded.
void gemm_one_thread_rounded(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t lda,
                             const bfloat16* B, int64_t ldb, bfloat16* C, int64_t ldc, const float* bias = nullptr);
// The implementation such a product runs on ("float32 fallback" where it is not oneDNN's).
std::string implementation_rounded(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                                   int64_t ldc, bool bias);

// The matrix-vector products of decoding (one row of activations against a weight), written here
// rather than sent to oneDNN, whose per-call cost is as large as the product itself, or widened
// to float32, which reads the matrix twice over (NOTE [ bf16 GEMV ] in bf16_gemm.cpp). X is stored
// row-major (rows, cols) with leading dimension ld; x and y have strides incx and incy; beta = 0
// writes y without reading it.
//   gemv_rows: y (rows) = alpha X x (cols) + beta y
//   gemv_cols: y (cols) = alpha X^T x (rows) + beta y
// Each y[i] is the float32 sum of exact products (short of overflow and underflow) in a fixed order
// that depends only on the length of the sum, so a block of X gives the same values as the whole.
void gemv_rows(int64_t rows, int64_t cols, float alpha, const bfloat16* X, int64_t ld, const bfloat16* x,
               int64_t incx, float beta, float* y, int64_t incy);
void gemv_cols(int64_t rows, int64_t cols, float alpha, const bfloat16* X, int64_t ld, const bfloat16* x,
               int64_t incx, float beta, float* y, int64_t incy);

// The oneDNN implementation gemm_one_thread runs for this call's shape and layout
// ("brg:avx512_core_amx_bf16", "gemm:jit", ...), or "float32 fallback" where it widens the operands
// for OpenBLAS: for the op profile (each shape's answer is kept; the first costs a primitive
// descriptor, tens of microseconds).
std::string implementation(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc,
                           float alpha, float beta, bool bias);

// Whether gemm_one_thread multiplies with oneDNN's bf16 kernels on this CPU: false on CPUs without
// AVX-512 (oneDNN has only its reference kernel there) and under use_fallback(true). Where false,
// blas::gemm widens each operand once per product and runs the float32 product (NOTE [ The bf16
// fallback ] in blas.cpp).
bool native_kernels();

// out (rows, cols), dense, = X (rows, cols) with leading dimension ld, widened to float32 (exact).
void widen(const bfloat16* X, int64_t rows, int64_t cols, int64_t ld, float* out);

// Tests: force the float32 fallback on a CPU that has oneDNN kernels (process-wide).
void use_fallback(bool on);

}  // namespace mvgpt::cpu::bf16
