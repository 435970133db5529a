// float32 products through blas::gemm and blas::gemm_bias, which send them to oneDNN's brgemm
// kernels where this CPU has them, to its gemm:jit where it has not (AVX2) for large products of a
// plain A cut along M, and to OpenBLAS elsewhere (NOTE [ float32 products through oneDNN ] in
// blas.cpp): against a double loop over the same values, in every layout, with alpha, beta and a
// bias, cut over the pool and not, in blocks as they lie and made dense (NOTE [ Dense blocks for
// oneDNN ]), and which library each product went to.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <mvgpt/backends/cpu/blas.h>
#include <mvgpt/backends/cpu/onednn_matmul.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/util/profile.h>

#include "ops_test_util.h"

namespace mvgpt {
namespace {

// Whether this CPU's float32 products go to oneDNN (its brgemm kernels with AVX-512, gemm:jit without).
bool onednn_float32() {
  return cpu::onednn::takes(DType::f32, cpu::onednn::implementation(cpu::onednn::kTypicalFloat32));
}

// Sets blas::set_dense_blocks for a scope and puts back what it was.
struct DenseBlocksScope {
  explicit DenseBlocksScope(bool on) : was(cpu::blas::dense_blocks()) { cpu::blas::set_dense_blocks(on); }
  ~DenseBlocksScope() { cpu::blas::set_dense_blocks(was); }
  bool was;
};

struct Shape3 {
  int64_t M, N, K;
};

// Small (one call), cut over the pool along M and along N, one block per thread with a short last
// one, a B stored (K, N) wider than oneDNN takes (OpenBLAS), and a sum longer than oneDNN's blocks
// of K.
const Shape3 kShapes[] = {{5, 7, 3}, {200, 150, 130}, {130, 260, 96}, {333, 64, 128}, {40, 2100, 32}, {64, 48, 1100}};

TEST(Float32Products, SumLikeADoubleLoopInEveryLayout) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  auto values = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto &e : v) e = normal(rng);
    return v;
  };
  // Blocks as they lie and made dense; operands stored dense (what oneDNN's brgemm takes as they
  // are) and with rows wider than the matrices (padded: blocks oneDNN takes only made dense).
  for (bool dense : {false, true})
  for (bool padded : {false, true})
  for (const Shape3 &s : kShapes) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const DenseBlocksScope scope(dense);
        const int64_t M = s.M, N = s.N, K = s.K;
        SCOPED_TRACE(std::to_string(M) + " x " + std::to_string(K) + " x " + std::to_string(N) + (ta ? " ta" : "") +
                     (tb ? " tb" : "") + (dense ? " dense blocks" : "") + (padded ? " padded" : ""));
        // Sized to the last element, so that a read past it is out of the allocation.
        const int64_t arows = ta ? K : M, acols = ta ? M : K, brows = tb ? N : K, bcols = tb ? K : N;
        const int64_t lda = acols + (padded ? 3 : 0), ldb = bcols + (padded ? 5 : 0), ldc = N + (padded ? 2 : 0);
        std::vector<float> A = values((arows - 1) * lda + acols);
        const std::vector<float> B = values((brows - 1) * ldb + bcols);
        const std::vector<float> C0 = values(M * ldc), bias = values(N);
        auto a_at = [&](int64_t i, int64_t k) { return double(ta ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)]); };
        auto b_at = [&](int64_t k, int64_t j) { return double(tb ? B[size_t(j * ldb + k)] : B[size_t(k * ldb + j)]); };
        // (alpha, beta, bias): a plain product, C scaled and added to, the bias in the output pass,
        // and alpha 0 with an infinity in A: C = beta C, A and B unread (as BLAS gives).
        for (int variant = 0; variant < 4; ++variant) {
          const float alpha = variant == 1 ? -1.5f : variant == 3 ? 0.0f : 1.0f;
          const float beta = variant == 1 || variant == 3 ? 0.5f : 0.0f;
          const bool with_bias = variant == 2;
          if (variant == 3) A[0] = INFINITY;
          std::vector<float> parallel = C0, serial = C0;
          if (beta == 0.0f)  // beta = 0 never keeps what C held: a NaN there does not survive
            for (auto &c : parallel) c = std::nanf("");
          if (with_bias) {
            cpu::blas::gemm_bias(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, bias.data(), parallel.data(), ldc);
            cpu::blas::gemm_bias(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, bias.data(), serial.data(), ldc, false);
          } else {
            cpu::blas::gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, parallel.data(), ldc);
            cpu::blas::gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, serial.data(), ldc, false);
          }
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
              double want = 0, size = 0;
              for (int64_t k = 0; k < K && alpha != 0.0f; ++k) {
                want += a_at(i, k) * b_at(k, j);
                size += std::abs(a_at(i, k) * b_at(k, j));
              }
              want = alpha * want + (beta == 0.0f ? 0.0 : beta * double(C0[size_t(i * ldc + j)])) +
                     (with_bias ? double(bias[size_t(j)]) : 0.0);
              const float got = parallel[size_t(i * ldc + j)], alone = serial[size_t(i * ldc + j)];
              const double tolerance = 2e-6 * (std::abs(alpha) * size + 1);
              ASSERT_NEAR(got, want, tolerance) << "variant " << variant << ", C[" << i << ", " << j << "]";
              ASSERT_NEAR(alone, want, tolerance) << "variant " << variant << ", one call, C[" << i << ", " << j << "]";
            }
          // The padding between C's rows is untouched.
          testing::expect_padding_untouched(parallel, serial, C0, M, N, ldc, beta == 0.0f);
        }
      }
    }
  }
}

// The library that ran each product, as the op profile names it: oneDNN's brgemm where this CPU has
// it and the blocks are dense, OpenBLAS elsewhere. Blocks as they lie are dense only cut along M
// from a plain A; made dense (NOTE [ Dense blocks for oneDNN ]) they all are, but for a B stored
// (K, N) wider than oneDNN takes and a weight gradient's (A transposed), which are never copied
// (always OpenBLAS). Without brgemm (AVX2) gemm:jit takes only a large product's rows of a plain A
// cut along M: nothing is made dense, and small products stay with OpenBLAS.
TEST(Float32Products, EachProductNamesTheLibraryThatRanIt) {
  auto kernel_of = [](const Tensor &a, const Tensor &b) {
    profile::Recording recording;
    (void)ops::matmul(a, b);
    const profile::Report r = recording.stop();
    for (const auto &row : r.rows)
      if (row.op == "matmul") {
        const size_t comma = row.detail.find(", ");
        return comma == std::string::npos ? std::string() : row.detail.substr(comma + 2);
      }
    return std::string("no matmul row");
  };
  Generator g(3);
  auto randn = [&](const Shape &s) { return ops::randn(s, DType::f32, Device::cpu(), &g); };
  const Tensor a = randn({512, 64});
  const Tensor narrow = randn({64, 384});                            // cut along M
  const Tensor wide = randn({64, 2100});                             // B (K, N) wider than oneDNN takes
  const Tensor wide_transposed = ops::transpose(randn({2100, 64}), 0, 1);  // cut along N
  const Tensor dy_t = ops::transpose(randn({512, 256}), 0, 1), x = randn({512, 64});  // a weight gradient
  const Tensor small = randn({16, 8}), small_b = randn({8, 24});                        // one call, not cut
  const bool onednn = onednn_float32();
  for (bool dense : {false, true}) {
    SCOPED_TRACE(dense ? "dense blocks" : "blocks as they lie");
    const DenseBlocksScope scope(dense);
    EXPECT_EQ(kernel_of(a, wide), "OpenBLAS");
    if (!onednn) {
      for (const auto &[l, r] : {std::pair{a, narrow}, std::pair{a, wide_transposed}, std::pair{dy_t, x}})
        EXPECT_EQ(kernel_of(l, r), "OpenBLAS");
      continue;
    }
    EXPECT_EQ(kernel_of(dy_t, x), "OpenBLAS");  // never made dense: its blocks are columns of dY
    if (!cpu::onednn::float32_brgemm()) {  // gemm:jit
      EXPECT_EQ(kernel_of(a, narrow), "gemm:jit");
      EXPECT_EQ(kernel_of(a, wide_transposed), "OpenBLAS");
      EXPECT_EQ(kernel_of(small, small_b), "OpenBLAS");
      continue;
    }
    EXPECT_TRUE(kernel_of(a, narrow).starts_with("brg:")) << kernel_of(a, narrow);
    if (dense) EXPECT_TRUE(kernel_of(a, wide_transposed).starts_with("brg:")) << kernel_of(a, wide_transposed);
    else EXPECT_EQ(kernel_of(a, wide_transposed), "OpenBLAS");
  }
}

// oneDNN's float32 brgemm kernels are its AVX-512 ones (avx512_core: F, BW, VL and DQ): the road
// float32_brgemm() reports from oneDNN's pick is the CPU's own (unless DNNL_MAX_CPU_ISA holds
// oneDNN below AVX-512).
TEST(Float32Products, OneDnnHasFloat32BrgemmExactlyWithAvx512) {
  const bool avx512_core = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  EXPECT_EQ(cpu::onednn::float32_brgemm(), avx512_core);
}

// oneDNN takes float32 products to its brgemm kernels, and to gemm:jit only on a CPU without them
// and for a plain A; bfloat16 ones to any but the reference.
TEST(Float32Products, OneDnnTakesItsBrgemmKernelsForFloat32OrElseGemmJitForAPlainA) {
  EXPECT_TRUE(cpu::onednn::takes(DType::f32, "brg:avx512_core"));
  EXPECT_TRUE(cpu::onednn::takes(DType::f32, "brg:avx512_core", /*a_transposed=*/true));
  EXPECT_EQ(cpu::onednn::takes(DType::f32, "gemm:jit"), !cpu::onednn::float32_brgemm());
  EXPECT_FALSE(cpu::onednn::takes(DType::f32, "gemm:jit", /*a_transposed=*/true));
  EXPECT_FALSE(cpu::onednn::takes(DType::f32, "ref:any"));
  EXPECT_TRUE(cpu::onednn::takes(DType::bf16, "gemm:jit"));
  EXPECT_TRUE(cpu::onednn::takes(DType::bf16, "brg:avx512_core_amx_bf16"));
  EXPECT_FALSE(cpu::onednn::takes(DType::bf16, "ref:any"));
  EXPECT_FALSE(cpu::onednn::takes(DType::bf16, "none (unimplemented)"));
}

}  // namespace
}  // namespace mvgpt
