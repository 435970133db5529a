// The large products on AMX tiles (backends/cpu/amx_gemm.h, NOTE [ Large products on AMX tiles ]):
// against a double loop over the same bf16 values (exact products: only the float32 sum's order
// differs), bit for bit against the block kernel amx::gemm (the same sums in the same order), the
// same bits on one thread and on all, and the bf16 result as the float32 one rounded. Where the
// CPU (or build) has no AMX tiles, only that the products are not taken.
#include <gtest/gtest.h>
#include <tbb/task_arena.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <mvgpt/backends/cpu/amx.h>
#include <mvgpt/backends/cpu/amx_gemm.h>
#include <mvgpt/backends/cpu/fused_common.h>

#include "bf16_test_values.h"

namespace mvgpt {
namespace {

namespace amx = cpu::amx;

using testing::random_bf16;

// A pointer into v on a 64-byte boundary (v holds 64 bytes more than it is read for).
template <typename T>
T* aligned_in(std::vector<T>& v) {
  const auto at = reinterpret_cast<uintptr_t>(v.data());
  return v.data() + ((64 - at % 64) % 64) / sizeof(T);
}
template <typename T>
const T* aligned_in(const std::vector<T>& v) {
  return aligned_in(const_cast<std::vector<T>&>(v));
}

struct Case {
  int64_t M, N, K;
  bool ta, tb;
  float alpha, beta;
  bool bias;
  // A, B and C on 64-byte boundaries, rows a multiple of 64 bytes apart, as contiguous activations
  // lie: A read where it lies (the swapped C^T road reads B so), a bf16 C's rows streamed.
  bool aligned = false;
};

// Each product's operands, stored with leading dimensions wider than the rows and one element past
// a 64-byte boundary, so rows straddle cache lines as a view's may; or aligned where the case says.
struct Operands {
  Operands(const Case& c, uint64_t seed)
      : ta(c.ta), aligned(c.aligned), lda(width(c.ta ? c.M : c.K, 3)), ldb(width(c.tb ? c.K : c.N, 5)),
        ldc(width(c.N, 7)), a_store(random_bf16((c.ta ? c.K : c.M) * lda + 64, seed)),
        b_store(random_bf16((c.tb ? c.N : c.K) * ldb + 64, seed + 1)), bias(random_bf16(c.N, seed + 2)) {
    bias32.resize(size_t(c.N));
    for (int64_t j = 0; j < c.N; ++j) bias32[size_t(j)] = float(bias[size_t(j)]) * 3.0f;
  }
  // A row's leading dimension: past its n values by `extra`, or a multiple of 32 where aligned.
  int64_t width(int64_t n, int64_t extra) const { return aligned ? (n + 31) / 32 * 32 + 32 : n + extra; }
  const bfloat16* A() const { return aligned_in(a_store) + (aligned ? 0 : 1); }
  const bfloat16* B() const { return aligned_in(b_store) + (aligned ? 0 : 1); }
  float a(int64_t i, int64_t k) const { return float(ta ? A()[k * lda + i] : A()[i * lda + k]); }
  float b(bool tb, int64_t k, int64_t n) const { return float(tb ? B()[n * ldb + k] : B()[k * ldb + n]); }
  bool ta, aligned;
  int64_t lda, ldb, ldc;
  std::vector<bfloat16> a_store, b_store, bias;
  std::vector<float> bias32;
};

const Case kCases[] = {
    {256, 256, 384, false, true, 1.0f, 0.0f, false},    // the step's shapes in small: whole tiles
    {256, 384, 256, false, false, 1.0f, 0.0f, true},
    {257, 300, 231, false, true, 1.0f, 0.0f, true},     // a partial panel, pair of columns and k tile
    {333, 129, 401, false, false, 0.5f, 0.25f, false},  // alpha and beta, 129 columns: an odd column tile
    {64, 2600, 130, false, true, 1.0f, 1.0f, true},     // more than one column block of B
    {40, 1000, 2048, false, false, 1.0f, 0.0f, false},  // the deepest K in one chunk
    {384, 96, 512, true, false, 1.0f, 0.0f, false},     // A transposed: a weight gradient
    {96, 200, 4096, true, false, 1.0f, 0.0f, false},    // ... wider than tall (C^T), eight chunks of K
    {257, 129, 2500, false, false, 1.0f, 0.25f, true},  // five chunks, the last partial
    {100, 70, 3000, true, true, 1.0f, 1.0f, true},      // both transposed, partial everything
    {64, 300, 2100, true, true, 0.5f, 0.25f, false},    // A transposed, wider than tall: run as C^T
    {64, 300, 2100, true, false, 1.0f, 0.0f, true},     // ... but with a bias (a row: not as C^T)
    {256, 256, 384, false, true, 1.0f, 0.0f, false, true},   // A read where it lies
    {257, 300, 224, false, false, 1.0f, 0.0f, true, true},   // ... but for the partial panel
    {96, 200, 2500, false, true, 0.5f, 0.25f, false, true},  // ... but for the partial chunk of K
    {64, 320, 2112, true, true, 1.0f, 0.0f, false, true},    // C^T reading B where it lies
    {288, 384, 384, false, true, 1.0f, 0.0f, true, true},    // a float32 C streamed (K and N <= 384), aligned
    // Chunks of K over several column blocks of B and several groups of panels a thread, with a
    // bias and beta C: the double loop checks a sample of rows.
    {2048, 1000, 2100, false, false, 1.0f, 0.25f, true, true},
    {2048, 1000, 2100, true, true, 1.0f, 0.0f, false},
    // More column blocks of B than one: in chunks of 512 (B read past the cache, NOTE [ B read
    // past the cache ]) and, A transposed with a bias (not run as C^T), in chunks of 256.
    {64, 1400, 2100, false, false, 1.0f, 0.25f, true},
    {64, 5200, 2100, true, false, 1.0f, 0.0f, true},
    // Nine k tiles, whole: the first depth whose B is read past the cache (288: whole tiles; 260, A
    // transposed: the last tile partial).
    {256, 256, 288, false, true, 1.0f, 0.0f, false},
    {700, 96, 260, true, false, 1.0f, 0.0f, false},
};

// The rows the double loop checks: all, or for a case past its budget the edges of panels, groups
// and the last row.
std::vector<int64_t> checked_rows(const Case& c) {
  std::vector<int64_t> rows;
  if (c.M * c.N * c.K <= (int64_t(1) << 28)) {
    for (int64_t i = 0; i < c.M; ++i) rows.push_back(i);
    return rows;
  }
  for (const int64_t i : {int64_t(0), int64_t(31), int64_t(32), int64_t(319), int64_t(320), c.M / 2, c.M - 1})
    if (i < c.M) rows.push_back(i);
  return rows;
}

std::string describe(const Case& c) {
  return std::to_string(c.M) + " x " + std::to_string(c.N) + " x " + std::to_string(c.K) + (c.ta ? " ta" : "") +
         (c.tb ? " tb" : "") + (c.aligned ? " aligned" : "") +
         " alpha " + std::to_string(c.alpha) + " beta " + std::to_string(c.beta) + (c.bias ? " bias" : "");
}

TEST(AmxLargeGemm, MatchesADoubleLoopOverTheSameBf16Values) {
  if (!amx::usable()) GTEST_SKIP() << "skipped: this CPU (or build) has no AMX tiles";
  for (const Case& c : kCases) {
    ASSERT_TRUE(amx::takes_large(c.M, c.N, c.K)) << describe(c);
    const Operands o(c, 11);
    // C on a 64-byte boundary where the case says (a float32 result's rows then streamed whole:
    // NOTE [ float32 results streamed to memory ]), else one float past one.
    std::vector<float> c_store(size_t(c.M * o.ldc + 16));
    float* C = c.aligned ? aligned_in(c_store) : aligned_in(c_store) + 1;
    std::mt19937_64 g(12);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t e = 0; e < c.M * o.ldc; ++e) C[e] = c.beta == 0.0f ? NAN : u(g);  // beta 0 must not read C
    const std::vector<float> before(C, C + c.M * o.ldc);
    amx::large_gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, o.A(), o.lda, o.B(), o.ldb, c.beta, C, o.ldc,
                    c.bias ? o.bias32.data() : nullptr);
    for (const int64_t i : checked_rows(c)) {
      for (int64_t j = 0; j < c.N; ++j) {
        double sum = 0, mag = 0;
        for (int64_t k = 0; k < c.K; ++k) {
          const double p = double(o.a(i, k)) * o.b(c.tb, k, j);
          sum += p, mag += std::fabs(p);
        }
        const double prior = c.beta == 0.0f ? 0.0 : double(c.beta) * before[size_t(i * o.ldc + j)];
        const double add = c.bias ? o.bias32[size_t(j)] : 0.0;
        const double want = c.alpha * (sum + add) + prior;  // a bias only with alpha 1
        const double tol =
            2e-7 * double(4 + c.K / 16) * (std::fabs(c.alpha) * mag + std::fabs(add) + std::fabs(prior)) + 1e-30;
        ASSERT_NEAR(C[i * o.ldc + j], want, tol) << describe(c) << " at " << i << ", " << j;
      }
      for (int64_t j = c.N; j < o.ldc; ++j)  // past N: untouched
        ASSERT_TRUE(std::isnan(before[size_t(i * o.ldc + j)]) ? std::isnan(C[i * o.ldc + j])
                                                              : C[i * o.ldc + j] == before[size_t(i * o.ldc + j)])
            << describe(c) << " at " << i << ", " << j;
    }
  }
}

std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

// The block kernel sums a 32 x 32 block over k tiles in the same order, from zero: the same bits,
// K's chunks included (their partial sums kept exactly in float32), every row. And the cut over the
// pool does not change a bit.
TEST(AmxLargeGemm, SameBitsAsTheBlockKernelOnOneThreadAndOnAll) {
  if (!amx::usable()) GTEST_SKIP() << "skipped: this CPU (or build) has no AMX tiles";
  for (const Case& c : kCases) {
    const Operands o(c, 21);
    std::vector<bfloat16> packed(size_t(amx::vnni_elems(c.K, c.N)));
    if (c.tb) amx::pack_vnni_transposed(o.B(), o.ldb, c.K, c.N, packed.data());
    else amx::pack_vnni(o.B(), o.ldb, c.K, c.N, packed.data());
    // amx::gemm reads whole tiles of A: a copy padded with zeros to them.
    const int64_t lda = amx::round_up(c.K, 32), rows = amx::round_up(c.M, 16);
    std::vector<bfloat16> A(size_t(rows * lda));
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t k = 0; k < c.K; ++k) A[size_t(i * lda + k)] = bfloat16(o.a(i, k));
    std::vector<float> want(size_t(c.M * c.N)), all(want.size(), NAN), one(want.size(), NAN);
    amx::gemm(c.M, c.N, c.K, 1.0f, A.data(), lda, packed.data(), c.K, 0.0f, want.data(), c.N);
    amx::large_gemm(c.ta, c.tb, c.M, c.N, c.K, 1.0f, o.A(), o.lda, o.B(), o.ldb, 0.0f, all.data(), c.N, nullptr);
    tbb::task_arena(1).execute([&] {
      amx::large_gemm(c.ta, c.tb, c.M, c.N, c.K, 1.0f, o.A(), o.lda, o.B(), o.ldb, 0.0f, one.data(), c.N, nullptr);
    });
    EXPECT_EQ(bits_of(all), bits_of(want)) << describe(c);
    EXPECT_EQ(bits_of(one), bits_of(all)) << describe(c);
  }
}

// The bf16 result is the float32 one (with its bias) rounded to nearest even, as round_to_bf16 rounds.
TEST(AmxLargeGemm, Bf16ResultIsTheFloat32ResultRounded) {
  if (!amx::usable()) GTEST_SKIP() << "skipped: this CPU (or build) has no AMX tiles";
  for (const Case& c : kCases) {
    const Operands o(c, 31);
    const float* bias = c.bias ? o.bias32.data() : nullptr;
    std::vector<float> f(size_t(c.M * c.N));
    amx::large_gemm(c.ta, c.tb, c.M, c.N, c.K, 1.0f, o.A(), o.lda, o.B(), o.ldb, 0.0f, f.data(), c.N, bias);
    // An aligned case's C rows on 64-byte boundaries: its whole pairs of column tiles streamed.
    const int64_t ldc = c.aligned ? o.ldc : c.N + 9;
    std::vector<bfloat16> store(size_t(c.M * ldc + 32), bfloat16(7.0f)), want(size_t(c.M * c.N));
    bfloat16* got = aligned_in(store);
    amx::large_gemm_rounded(c.ta, c.tb, c.M, c.N, c.K, o.A(), o.lda, o.B(), o.ldb, got, ldc, bias);
    cpu::fused::round_to_bf16(f.data(), int64_t(f.size()), want.data());
    for (int64_t i = 0; i < c.M; ++i) {
      for (int64_t j = 0; j < c.N; ++j)
        ASSERT_EQ(got[i * ldc + j].bits, want[size_t(i * c.N + j)].bits) << describe(c) << " at " << i << ", " << j;
      for (int64_t j = c.N; j < ldc; ++j) ASSERT_EQ(float(got[i * ldc + j]), 7.0f) << "past N";
    }
  }
}

TEST(AmxLargeGemm, TakesOnlyWhatItCanMultiply) {
  EXPECT_FALSE(amx::takes_large(16, 4096, 1024));  // fewer rows than a panel
  EXPECT_FALSE(amx::takes_large(4096, 16, 1024));  // fewer columns than a pair of tiles
  EXPECT_FALSE(amx::takes_large(64, 64, 64));      // too small to pack B for
  EXPECT_EQ(amx::takes_large(4096, 1536, 384), amx::usable());
  EXPECT_EQ(amx::takes_large(384, 1536, 4096), amx::usable());
  if (amx::usable()) {
    std::vector<bfloat16> A(256 * 256), B(256 * 256);
    std::vector<float> C(256 * 256), bias(256);
    EXPECT_THROW(amx::large_gemm(false, false, 256, 256, 256, 0.5f, A.data(), 256, B.data(), 256, 0.0f, C.data(), 256,
                                 bias.data()),
                 std::logic_error);  // a bias with alpha other than 1
    return;
  }
  std::vector<bfloat16> A(64 * 64), B(64 * 64);
  std::vector<float> C(64 * 64);
  EXPECT_THROW(amx::large_gemm(false, false, 64, 64, 64, 1.0f, A.data(), 64, B.data(), 64, 0.0f, C.data(), 64, nullptr),
               std::logic_error);
}

}  // namespace
}  // namespace mvgpt
