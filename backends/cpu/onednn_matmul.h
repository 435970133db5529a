#pragma once
// One product on the calling thread through oneDNN's matmul, with the primitive made once per
// product shape and thread and kept (NOTE [ oneDNN on the TBB pool ] in onednn_matmul.cpp).
// blas::gemm cuts large products into blocks over the TBB pool and calls this per block: bfloat16
// operands always (bf16_gemm.h), float32 ones where oneDNN has its brgemm kernels, or without them
// its gemm:jit for a plain A (NOTE [ float32 products through oneDNN ] in blas.cpp).
#include <cstdint>
#include <string>

#include <mvgpt/tensor/dtype.h>

namespace mvgpt::cpu::onednn {

// C (M, N) = alpha op(A) op(B) + beta C (+ bias: N floats, one per column of C, added in the
// product's output pass), row-major, lda/ldb/ldc the row strides of the matrices as stored. The
// operands are float32 or bfloat16; the bias is float32; C is float32, or bfloat16 (result) for
// bfloat16 operands: the float32 sums rounded to nearest even as they are written.
struct Product {
  bool ta = false, tb = false;
  int64_t M = 0, N = 0, K = 0, lda = 0, ldb = 0, ldc = 0;
  float alpha = 1.0f, beta = 0.0f;
  bool bias = false;
  DType operands = DType::f32;
  DType result = DType::f32;
  bool operator==(const Product&) const = default;
};

// A typical float32 product of the model's (a block of a linear layer's forward): oneDNN's pick for it
// says which of its float32 kernels this CPU has.
inline constexpr Product kTypicalFloat32{false, true, 256, 384, 384, 384, 384, 384, 1.0f, 0.0f, false, DType::f32};

// The implementation oneDNN picks for the product ("brg:avx512_core_amx_bf16", "brg:avx512_core",
// "gemm:jit", "ref:any", ...), or "none (why)" where it has none. Each product's answer is kept (the
// first costs a primitive descriptor: tens of microseconds).
std::string implementation(const Product& p);

// Whether multiply runs a product with this implementation: for bfloat16 operands any but oneDNN's
// reference kernels (CPUs without AVX-512); for float32 ones its brgemm kernels (AVX-512), and on a
// CPU without them (AVX2) its gemm:jit for a product whose A is not transposed (a_transposed: op(A)
// = A^T). Elsewhere OpenBLAS is the faster float32 GEMM (NOTE [ float32 products through oneDNN ]
// in blas.cpp).
bool takes(DType operands, const std::string& implementation, bool a_transposed = false);

// Whether oneDNN multiplies this CPU's float32 products with its brgemm kernels (AVX-512): its pick
// for a typical product of the model's, made once.
bool float32_brgemm();

// Runs the product on this thread and returns true, or returns false without touching C where
// oneDNN has no implementation it takes (see takes). A and B point at the operands' first
// elements, of the product's operand type; C at the result's, of its result type.
bool multiply(const Product& p, const void* A, const void* B, void* C, const float* bias = nullptr);

// Where multiply returned false and another GEMM is to multiply instead: C (M, N) = beta C + bias
// (C not read where beta is 0), and the beta, 1, that the other GEMM then adds its product with.
// Without a bias, nothing is written and beta is returned as it is.
float bias_first(int64_t M, int64_t N, const float* bias, float beta, float* C, int64_t ldc);

}  // namespace mvgpt::cpu::onednn
