// The AMX block products (backends/cpu/amx.h): the packed layouts against their definition (on every
// CPU: without AMX the packing is plain loops), and amx::gemm against a double loop over the same
// bf16 values (exact products, so only the float32 sum's order differs), where the CPU has AMX.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include <mvgpt/backends/cpu/amx.h>

#include "bf16_test_values.h"

namespace mvgpt {
namespace {

namespace amx = cpu::amx;

using testing::random_bf16;

std::vector<uint16_t> bits(const std::vector<bfloat16>& v) {
  std::vector<uint16_t> b;
  for (const auto& x : v) b.push_back(x.bits);
  return b;
}

// Element (k, n) of B in the VNNI layout (amx.h), read back by its definition.
bfloat16 vnni_at(const std::vector<bfloat16>& packed, int64_t K, int64_t k, int64_t n) {
  const int64_t kts = amx::round_up(K, 32) / 32;
  const int64_t tile = (n / 16) * kts + k / 32;
  return packed[size_t(tile * 512 + ((k % 32) / 2) * 32 + (n % 16) * 2 + k % 2)];
}

struct PackShape {
  int64_t K, N;
};
const PackShape kPackShapes[] = {{64, 256}, {256, 64}, {32, 16}, {5, 3}, {33, 17}, {70, 45}, {1, 1}, {40, 80}, {3, 32}};

// B (K, N) packed from its rows (transposed false) or from its transpose's: every element at its
// place in the layout, zeros past K and N.
void expect_packed_by_definition(bool transposed) {
  for (const auto& s : kPackShapes) {
    const int64_t ld = transposed ? s.K + 5 : s.N + 3;
    const std::vector<bfloat16> B = random_bf16((transposed ? s.N : s.K) * ld, transposed ? 2 : 1);
    std::vector<bfloat16> packed(size_t(amx::vnni_elems(s.K, s.N)), bfloat16(7.0f));
    if (transposed) amx::pack_vnni_transposed(B.data(), ld, s.K, s.N, packed.data());
    else amx::pack_vnni(B.data(), ld, s.K, s.N, packed.data());
    for (int64_t k = 0; k < amx::round_up(s.K, 32); ++k)
      for (int64_t n = 0; n < amx::round_up(s.N, 16); ++n) {
        const size_t at = size_t(transposed ? n * ld + k : k * ld + n);
        const float want = k < s.K && n < s.N ? float(B[at]) : 0.0f;
        ASSERT_EQ(float(vnni_at(packed, s.K, k, n)), want) << "K " << s.K << " N " << s.N << " at " << k << ", " << n;
      }
  }
}

TEST(AmxPacking, VnniFromRowsHoldsEachElementAndZerosPastTheEdge) { expect_packed_by_definition(false); }
TEST(AmxPacking, VnniFromTheTransposeHoldsEachElementAndZerosPastTheEdge) { expect_packed_by_definition(true); }

TEST(AmxPacking, TransposeWritesEveryColumnAsARowWithZeroPadding) {
  for (const auto& s : kPackShapes) {
    const int64_t rows = s.K, cols = s.N, ld = cols + 2, ldo = amx::round_up(rows, 32) + 4;
    const std::vector<bfloat16> X = random_bf16(rows * ld, 3);
    std::vector<bfloat16> out(size_t(cols * ldo), bfloat16(7.0f));
    amx::transpose(X.data(), ld, rows, cols, out.data(), ldo);
    for (int64_t c = 0; c < cols; ++c) {
      for (int64_t r = 0; r < amx::round_up(rows, 32); ++r) {
        const float want = r < rows ? float(X[size_t(r * ld + c)]) : 0.0f;
        ASSERT_EQ(float(out[size_t(c * ldo + r)]), want) << rows << " x " << cols << " at " << c << ", " << r;
      }
      for (int64_t r = amx::round_up(rows, 32); r < ldo; ++r) ASSERT_EQ(float(out[size_t(c * ldo + r)]), 7.0f);
    }
  }
}

// The 32-column transpose writes what the general one writes, zero rows past the end included.
TEST(AmxPacking, ThirtyTwoColumnTransposeMatchesTheGeneralOne) {
  for (const int64_t rows : {int64_t(1), int64_t(31), int64_t(32), int64_t(33), int64_t(100), int64_t(512)}) {
    const int64_t ld = 32 + 5, ldo = amx::round_up(rows, 32) + 3;
    const std::vector<bfloat16> X = random_bf16(rows * ld, 7);
    std::vector<bfloat16> want(size_t(32 * ldo), bfloat16(7.0f)), got(want.size(), bfloat16(7.0f));
    amx::transpose(X.data(), ld, rows, 32, want.data(), ldo);
    amx::transpose32(X.data(), ld, rows, got.data(), ldo);
    EXPECT_EQ(bits(got), bits(want)) << rows << " rows";
  }
}

// A window's values packed as its keys arrive (rows [k0, k1) at a time, in a layout for all of them)
// and its keys' transpose packed as columns arrive: the same layouts as packing each whole.
TEST(AmxPacking, PackingInPiecesGivesTheWholeLayout) {
  const int64_t K = 256, N = 64, ld = N + 2;
  const std::vector<bfloat16> B = random_bf16(K * ld, 7);
  std::vector<bfloat16> whole(size_t(amx::vnni_elems(K, N))), pieces(whole.size(), bfloat16(7.0f));
  amx::pack_vnni(B.data(), ld, K, N, whole.data());
  for (const int64_t k1 : {40, 64, 100, 192, 256}) {
    const int64_t k0 = k1 == 40 ? 0 : k1 == 64 ? 40 : k1 == 100 ? 64 : k1 == 192 ? 100 : 192;
    amx::pack_vnni_rows(B.data(), ld, k0, k1, N, K, pieces.data());
    // What a product over the first k1 rows reads: the tiles up to round_up(k1, 32), zero past k1.
    for (int64_t k = 0; k < amx::round_up(k1, 32); ++k)
      for (int64_t n = 0; n < N; ++n)
        ASSERT_EQ(float(vnni_at(pieces, K, k, n)), k < k1 ? float(vnni_at(whole, K, k, n)) : 0.0f)
            << "rows up to " << k1 << " at " << k << ", " << n;
  }
  EXPECT_EQ(bits(whole), bits(pieces));

  const int64_t D = 64, T = 200, ldt = D + 4;
  const std::vector<bfloat16> Bt = random_bf16(T * ldt, 8);
  std::vector<bfloat16> whole_t(size_t(amx::vnni_elems(D, T))), pieces_t(whole_t.size(), bfloat16(7.0f));
  amx::pack_vnni_transposed(Bt.data(), ldt, D, T, whole_t.data());
  for (const int64_t n1 : {64, 70, 128, 200}) {
    const int64_t n0 = n1 == 64 ? 0 : n1 == 70 ? 64 : n1 == 128 ? 70 : 128;
    amx::pack_vnni_transposed_cols(Bt.data(), ldt, D, n0, n1, pieces_t.data());
  }
  EXPECT_EQ(bits(whole_t), bits(pieces_t));
}

TEST(AmxPacking, Float32TransposeWritesOnlyTheTransposedBlock) {
  for (const auto& s : kPackShapes) {
    const int64_t rows = s.K, cols = s.N, ld = cols + 3, ldo = rows + 5;
    std::vector<float> X(size_t(rows * ld));
    for (size_t i = 0; i < X.size(); ++i) X[i] = float(i) * 0.5f - 3.0f;
    std::vector<float> out(size_t(cols * ldo), 7.0f);
    amx::transpose(X.data(), ld, rows, cols, out.data(), ldo);
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t r = 0; r < ldo; ++r)
        ASSERT_EQ(out[size_t(c * ldo + r)], r < rows ? X[size_t(r * ld + c)] : 7.0f) << rows << " x " << cols;
  }
}

struct GemmCase {
  int64_t M, N, K;
  float alpha, beta;
  bool transposed_b;
};

TEST(AmxGemm, MatchesADoubleLoopOverTheSameBf16Values) {
  if (!amx::usable()) GTEST_SKIP() << "skipped: this CPU (or build) has no AMX tiles";
  const GemmCase cases[] = {{64, 256, 64, 0.125f, 0.0f, true},  {64, 64, 256, 1.0f, 0.0f, false},
                            {64, 64, 64, 1.0f, 1.0f, false},    {64, 128, 64, 1.0f, 1.0f, true},
                            {17, 33, 45, 0.5f, 0.0f, false},    {48, 16, 32, 1.0f, 1.0f, true},
                            {1, 5, 3, -1.5f, 0.25f, false},     {96, 80, 96, 0.125f, 1.0f, false},
                            {32, 48, 7, 1.0f, 0.0f, true},      {128, 256, 64, 1.0f, 0.0f, true}};
  for (const auto& c : cases) {
    // A padded as the kernel's contract asks: whole tiles readable, zeros past K.
    const int64_t lda = amx::round_up(c.K, 32) + 32, arows = amx::round_up(c.M, 16);
    std::vector<bfloat16> A = random_bf16(arows * lda, 4);
    for (int64_t i = 0; i < arows; ++i)
      for (int64_t k = c.K; k < lda; ++k) A[size_t(i * lda + k)] = bfloat16();
    const int64_t ldb = c.transposed_b ? c.K + 1 : c.N + 1;
    const std::vector<bfloat16> B = random_bf16((c.transposed_b ? c.N : c.K) * ldb, 5);
    auto b_at = [&](int64_t k, int64_t n) { return float(c.transposed_b ? B[size_t(n * ldb + k)] : B[size_t(k * ldb + n)]); };
    std::vector<bfloat16> packed(size_t(amx::vnni_elems(c.K, c.N)));
    if (c.transposed_b) amx::pack_vnni_transposed(B.data(), ldb, c.K, c.N, packed.data());
    else amx::pack_vnni(B.data(), ldb, c.K, c.N, packed.data());
    const int64_t ldc = c.N + 7;
    std::vector<float> C(size_t(c.M * ldc));
    std::mt19937_64 g(6);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& x : C) x = c.beta == 0.0f ? NAN : u(g);  // beta 0 must not read C
    const std::vector<float> before = C;
    amx::gemm(c.M, c.N, c.K, c.alpha, A.data(), lda, packed.data(), c.K, c.beta, C.data(), ldc);
    for (int64_t i = 0; i < c.M; ++i) {
      for (int64_t j = 0; j < c.N; ++j) {
        double sum = 0, mag = 0;
        for (int64_t k = 0; k < c.K; ++k) {
          const double p = double(float(A[size_t(i * lda + k)])) * b_at(k, j);
          sum += p, mag += std::fabs(p);
        }
        const double prior = c.beta == 0.0f ? 0.0 : double(c.beta) * before[size_t(i * ldc + j)];
        const double want = c.alpha * sum + prior;
        const double tol = 2e-7 * double(4 + c.K / 16) * (std::fabs(c.alpha) * mag + std::fabs(prior)) + 1e-30;
        ASSERT_NEAR(C[size_t(i * ldc + j)], want, tol)
            << c.M << " x " << c.N << " x " << c.K << " alpha " << c.alpha << " beta " << c.beta << " at " << i << ", " << j;
      }
      for (int64_t j = c.N; j < ldc; ++j)  // past N: untouched
        ASSERT_TRUE(std::isnan(before[size_t(i * ldc + j)]) ? std::isnan(C[size_t(i * ldc + j)])
                                                            : C[size_t(i * ldc + j)] == before[size_t(i * ldc + j)]);
    }
  }
}

// A window's packing holds more rows than a product sums over (k_capacity > K, keys past this
// block's): with A's columns past K zero, those finite rows add nothing (the attention packs them
// as zeros, so that an infinity past a window cannot reach it: NOTE [ Tiles past a window ]).
TEST(AmxGemm, SumsOnlyTheFirstKRowsOfALargerPacking) {
  if (!amx::usable()) GTEST_SKIP() << "skipped: this CPU (or build) has no AMX tiles";
  const int64_t M = 48, N = 64, K = 40, capacity = 256, lda = amx::round_up(K, 32);
  std::vector<bfloat16> A = random_bf16(M * lda, 9);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = K; k < lda; ++k) A[size_t(i * lda + k)] = bfloat16();
  std::vector<bfloat16> B = random_bf16(capacity * N, 10);
  B[size_t((K + 3) * N + 5)] = bfloat16(3e38f);  // a large row past K, inside K's last tile
  std::vector<bfloat16> packed(size_t(amx::vnni_elems(capacity, N)));
  amx::pack_vnni_rows(B.data(), N, 0, capacity, N, capacity, packed.data());
  std::vector<float> C(size_t(M * N), NAN);
  amx::gemm(M, N, K, 1.0f, A.data(), lda, packed.data(), capacity, 0.0f, C.data(), N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = double(float(A[size_t(i * lda + k)])) * double(float(B[size_t(k * N + j)]));
        sum += p, mag += std::fabs(p);
      }
      ASSERT_NEAR(C[size_t(i * N + j)], sum, 2e-7 * double(4 + K / 16) * mag + 1e-30) << i << ", " << j;
    }
}

TEST(AmxGemm, SaysSoWhereItCannotRun) {
  if (amx::usable()) {
    amx::set_enabled(false);
    EXPECT_FALSE(amx::usable());
    amx::set_enabled(true);
    EXPECT_TRUE(amx::usable());
    return;
  }
  std::vector<bfloat16> A(512), B(512);
  std::vector<float> C(256);
  EXPECT_THROW(amx::gemm(16, 16, 32, 1.0f, A.data(), 32, B.data(), 32, 0.0f, C.data(), 16), std::logic_error);
}

}  // namespace
}  // namespace mvgpt
