// Rotary embedding (autograd/fused/rope.h): the CPU kernel against naive double loops and the
// rotation's algebraic properties; the op's checks and dtypes; the kernel against the slow reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include <mvgpt/backends/ops.h>
#include <mvgpt/fused/rope.h>
#include <mvgpt/fused/rope_row_cpu.h>
#include "backends/fused_test_util.h"

namespace mvgpt {
namespace {

using namespace fused_test;
using Vec = std::vector<double>;

// The CPU kernels themselves, without the op's checks and preparation.
const fused::RopeKernels& cpu() { return cpu_kernels<fused::rope_cpu_kernels>(); }

Tensor run_rope(const Tensor& x, const Tensor& pos, RopeLayout layout, bool inverse = false, double base = 10000,
                double position_scale = 1.0) {
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  cpu().rotate(x, pos, base, layout, inverse, position_scale, out);
  return out;
}

// Naive rope of x (B, H, T, D) with positions (B, T) or (T), in double.
Vec naive_rope(const Tensor& x, const Tensor& pos, RopeLayout layout, bool inverse, double base) {
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3);
  const Vec xv = values(x), pv = values(pos);
  Vec out(xv.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < D / 2; ++i) {
          const double p = pos.dim() == 2 ? pv[b * T + t] : pv[t];
          const double angle = (inverse ? -1 : 1) * p * std::pow(base, -2.0 * i / D);
          const int64_t row = ((b * H + h) * T + t) * D;
          const int64_t i0 = layout == RopeLayout::split_half ? i : 2 * i;
          const int64_t i1 = layout == RopeLayout::split_half ? i + D / 2 : 2 * i + 1;
          out[row + i0] = xv[row + i0] * std::cos(angle) - xv[row + i1] * std::sin(angle);
          out[row + i1] = xv[row + i0] * std::sin(angle) + xv[row + i1] * std::cos(angle);
        }
  return out;
}

Tensor positions_of(const std::vector<int64_t>& p, Shape shape = {}) { return Tensor::from_vector(p, shape); }

TEST(RopeKernel, MatchesNaiveLoops) {
  const std::vector<int64_t> pos = {0, 1, 5, 170000};  // a large position checks the double angles
  for (RopeLayout layout : {RopeLayout::split_half, RopeLayout::interleaved})
    for (bool inverse : {false, true}) {
      Tensor x = random_tensor({2, 3, 4, 8}, DType::f64, 1);
      EXPECT_TRUE(all_close(run_rope(x, positions_of(pos), layout, inverse),
                            naive_rope(x, positions_of(pos), layout, inverse, 10000), 1e-12));
      Tensor xf = random_tensor({2, 3, 4, 8}, DType::f32, 2);
      EXPECT_TRUE(all_close(run_rope(xf, positions_of(pos), layout, inverse, 500),
                            naive_rope(xf, positions_of(pos), layout, inverse, 500), 2e-6));
    }
}

// The attention's rotation and rounding in one pass (rotate_round_row, sixteen lanes where the
// pairs are half apart in whole vectors) gives the bits of rotate_row then round_to_bf16, for both
// layouts, whole and partial vectors, a power-of-two scale, and values at rounding ties, denormal,
// infinite and NaN.
TEST(RopeKernel, RotateRoundRowIsRotateThenRoundBitForBit) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (int64_t half : {32, 16, 48, 5}) {
    for (bool interleaved : {false, true}) {
      for (float scale : {1.0f, 0.125f}) {
        const size_t n = size_t(half);
        std::vector<float> x(2 * n), c(n), s(n), row(2 * n);
        for (float& v : x) v = u(rng);
        for (int64_t i = 0; i < half; ++i) c[size_t(i)] = std::cos(0.3f * float(i)), s[size_t(i)] = std::sin(0.3f * float(i));
        x[0] = 1.00390625f;  // 1 + 2^-8: a tie between two bfloat16 values where the angle is zero
        c[0] = 1.0f, s[0] = 0.0f;
        x[1] = 1e-39f, x[2] = INFINITY, x[3] = NAN;
        c[1] = 1.0f, s[1] = 0.0f;  // x[1] stays denormal in the rotation's first half...
        x[1 + half] = 0.0f;        // ...as its partner adds nothing
        std::vector<bfloat16> got(2 * n + 1, bfloat16(-7.0f)), want(got);
        fused::rotate_round_row(x.data(), c.data(), s.data(), half, interleaved, scale, got.data(), row.data());
        fused::rotate_row(x.data(), c.data(), s.data(), half, interleaved, row.data());
        cpu::fused::round_to_bf16(row.data(), 2 * half, scale, want.data());
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(bfloat16)), 0)
            << "half " << half << (interleaved ? " interleaved" : " split") << " scale " << scale;
      }
    }
  }
}

TEST(RopeKernel, Int32AndPerSequencePositions) {
  Tensor x = random_tensor({2, 2, 3, 6}, DType::f64, 3);
  std::vector<int32_t> p32 = {3, 4, 5, 100, 101, 102};
  Tensor pos32 = Tensor::from_vector(p32, {2, 3});
  Tensor pos64 = positions_of({3, 4, 5, 100, 101, 102}, {2, 3});
  Tensor got = run_rope(x, pos32, RopeLayout::split_half);
  EXPECT_TRUE(all_close(got, naive_rope(x, pos64, RopeLayout::split_half, false, 10000), 1e-12));
  EXPECT_EQ(values(got), values(run_rope(x, pos64, RopeLayout::split_half)));
}

TEST(RopeKernel, ThreeDimInputAndStridedView) {
  // (H, T, D) input; and a (B, H, T, D) view of a (B, T, H, D) buffer, as after splitting qkv.
  Tensor x3 = random_tensor({3, 4, 8}, DType::f64, 4);
  Tensor pos = positions_of({7, 8, 9, 10});
  Tensor x4 = x3.as_strided({1, 3, 4, 8}, {96, 32, 8, 1}, 0);
  EXPECT_EQ(values(run_rope(x3, pos, RopeLayout::split_half)), values(run_rope(x4, pos, RopeLayout::split_half)));

  Tensor buf = random_tensor({2, 4, 3, 8}, DType::f64, 5);  // (B, T, H, D)
  Tensor view = buf.as_strided({2, 3, 4, 8}, {96, 8, 24, 1}, 0);  // (B, H, T, D)
  Tensor packed = Tensor::empty({2, 3, 4, 8}, DType::f64);
  for (int64_t i = 0; i < packed.numel(); ++i) write_element(packed, i, read_element(view, i));
  EXPECT_EQ(values(run_rope(view, pos, RopeLayout::interleaved)), values(run_rope(packed, pos, RopeLayout::interleaved)));
}

TEST(RopeKernel, PositionZeroIsIdentityAndNormsArePreserved) {
  Tensor x = random_tensor({1, 2, 3, 16}, DType::f64, 6);
  EXPECT_EQ(values(run_rope(x, positions_of({0, 0, 0}), RopeLayout::split_half)), values(x));
  Vec y = values(run_rope(x, positions_of({1, 50, 9999}), RopeLayout::split_half)), xv = values(x);
  for (int64_t row = 0; row < 6; ++row) {
    double nx = 0, ny = 0;
    for (int64_t i = 0; i < 16; ++i) {
      nx += xv[row * 16 + i] * xv[row * 16 + i];
      ny += y[row * 16 + i] * y[row * 16 + i];
    }
    EXPECT_NEAR(nx, ny, 1e-12);
  }
}

double row_dot(const Vec& a, int64_t ra, const Vec& b, int64_t rb, int64_t D) {
  double s = 0;
  for (int64_t i = 0; i < D; ++i) s += a[ra * D + i] * b[rb * D + i];
  return s;
}

TEST(RopeKernel, ScoresDependOnlyOnRelativePosition) {
  // One q and one k row, each placed at several positions.
  const int64_t D = 8;
  Tensor q = random_tensor({1, 1, 1, D}, DType::f64, 7), k = random_tensor({1, 1, 1, D}, DType::f64, 8);
  auto at = [&](const Tensor& t, int64_t p) { return values(run_rope(t, positions_of({p}), RopeLayout::split_half)); };
  const Vec qv = values(q);
  for (auto [m, n] : {std::pair<int64_t, int64_t>{3, 10}, {0, 7}, {40, 2}}) {
    // (R_m q) . (R_n k) == q . (R_{n-m} k)
    EXPECT_NEAR(row_dot(at(q, m), 0, at(k, n), 0, D), row_dot(qv, 0, at(k, n - m), 0, D), 1e-12);
    // A common offset leaves the score unchanged.
    EXPECT_NEAR(row_dot(at(q, m), 0, at(k, n), 0, D), row_dot(at(q, m + 1000), 0, at(k, n + 1000), 0, D), 1e-10);
  }
}

TEST(RopeKernel, SplitHalfEqualsInterleavedUnderChannelPermutation) {
  // Channel i and i + D/2 (split) correspond to 2i and 2i + 1 (interleaved).
  const int64_t D = 10;
  Tensor x = random_tensor({1, 2, 3, D}, DType::f64, 9);
  Tensor xi = Tensor::empty(x.shape(), DType::f64);
  const Vec xv = values(x);
  for (int64_t row = 0; row < 6; ++row)
    for (int64_t i = 0; i < D / 2; ++i) {
      write_element(xi, row * D + 2 * i, xv[row * D + i]);
      write_element(xi, row * D + 2 * i + 1, xv[row * D + i + D / 2]);
    }
  Tensor pos = positions_of({2, 30, 400});
  const Vec split = values(run_rope(x, pos, RopeLayout::split_half));
  const Vec inter = values(run_rope(xi, pos, RopeLayout::interleaved));
  for (int64_t row = 0; row < 6; ++row)
    for (int64_t i = 0; i < D / 2; ++i) {
      EXPECT_DOUBLE_EQ(split[row * D + i], inter[row * D + 2 * i]);
      EXPECT_DOUBLE_EQ(split[row * D + i + D / 2], inter[row * D + 2 * i + 1]);
    }
}

TEST(RopeKernel, InverseUndoesForward) {
  Tensor x = random_tensor({2, 2, 5, 12}, DType::f64, 10);
  Tensor pos = positions_of({0, 1, 2, 3, 4, 100, 200, 300, 400, 500}, {2, 5});
  for (RopeLayout layout : {RopeLayout::split_half, RopeLayout::interleaved})
    EXPECT_TRUE(all_close(run_rope(run_rope(x, pos, layout), pos, layout, true), values(x), 1e-12));
}

TEST(RopeKernel, PositionScale) {
  // Scale 1 is the unscaled rotation bit for bit; scale 1/4 at positions 4p is the rotation at p
  // exactly (a power of two); scale 0.3 matches the naive loops at 0.3 p.
  Tensor x = random_tensor({2, 2, 4, 8}, DType::f32, 11);
  Tensor pos = positions_of({0, 9, 1000, 170000});
  for (RopeLayout layout : {RopeLayout::split_half, RopeLayout::interleaved}) {
    EXPECT_EQ(values(run_rope(x, pos, layout, false, 10000, 1.0)), values(run_rope(x, pos, layout)));
    EXPECT_EQ(values(run_rope(x, positions_of({0, 36, 4000, 680000}), layout, false, 10000, 0.25)),
              values(run_rope(x, pos, layout)));
    Tensor xd = random_tensor({2, 2, 4, 8}, DType::f64, 12);
    const Vec naive = naive_rope(xd, Tensor::from_vector(std::vector<double>{0, 9 * 0.3, 1000 * 0.3, 170000 * 0.3}),
                                 layout, true, 500);
    EXPECT_TRUE(all_close(run_rope(xd, pos, layout, true, 500, 0.3), naive, 1e-10));
  }
}

// The table of the opposite angles is the inverse table, bit for bit: small and large positions,
// int32 and int64, a position scale, both directions.
TEST(RopeKernel, InverseTableIsTheTableOfTheOppositeAngles) {
  std::vector<int64_t> many;
  for (int64_t p = 0; p < 300000; p += 997) many.push_back(p);
  for (const Tensor& pos : {positions_of(many, {int64_t(many.size())}), ops::to(positions_of({0, 1, 5, 255}), DType::i32)})
    for (auto [D, base, scale] : {std::tuple{64, 10000.0, 1.0}, {128, 500000.0, 0.25}, {6, 100.0, 0.3}})
      for (bool inverse : {false, true}) {
        const fused::RopeTable table = fused::rope_table(pos, D, base, inverse, scale);
        const fused::RopeTable want = fused::rope_table(pos, D, base, !inverse, scale);
        const fused::RopeTable got = fused::inverse_rope_table(table);
        EXPECT_EQ(got.half, want.half);
        EXPECT_EQ(got.cos, want.cos) << "D " << D << (inverse ? " from the inverse" : "");
        EXPECT_EQ(got.sin, want.sin) << "D " << D << (inverse ? " from the inverse" : "");
      }
}

TEST(RopeKernel, ZeroSizeTensors) {
  Tensor x = Tensor::empty({2, 3, 0, 8}, DType::f32);
  EXPECT_EQ(run_rope(x, positions_of(std::vector<int64_t>{}, {0}), RopeLayout::split_half).numel(), 0);
}

// ---- the op: checks, layouts, dtypes, reference

TEST(RopeOp, Bfloat16IsWidenedAndCastBack) {
  Tensor q = packed(random_tensor({1, 2, 3, 4}, DType::f32, 6), DType::bf16);
  Tensor pos = Tensor::from_vector(std::vector<int64_t>{0, 1, 2});
  Tensor rq = fused::rope_rotate(q, pos);
  EXPECT_EQ(rq.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(rq, fused::rope_rotate(packed(q, DType::f32), pos), 2e-2, 1e-2));
}

TEST(RopeOp, RopeChecksAndPerSequencePositions) {
  Tensor x = random_tensor({2, 2, 3, 8}, DType::f32, 9);
  expect_error([&] { fused::rope_rotate(random_tensor({2, 3, 7}, DType::f32, 1), Tensor::from_vector(std::vector<int64_t>{0, 1, 2})); },
               "rope: head size 7 is odd");
  expect_error([&] { fused::rope_rotate(x, Tensor::from_vector(std::vector<float>{0, 1, 2})); },
               "rope: positions must be int32 or int64, found float32");
  expect_error([&] { fused::rope_rotate(x, Tensor::from_vector(std::vector<int64_t>{0, 1})); },
               "positions must have shape [3] or [2, 3] for x of shape [2, 2, 3, 8], found [2]");
  Tensor p012 = Tensor::from_vector(std::vector<int64_t>{0, 1, 2});
  expect_error([&] { fused::rope_rotate(x, p012, 10000, RopeLayout::split_half, false, 0.0); },
               "rope: position_scale must be finite and > 0");
  expect_error([&] { fused::rope_rotate(x, p012, 10000, RopeLayout::split_half, false, std::nan("")); },
               "position_scale must be finite");
  // Per-sequence positions (B, T) equal running each sequence with its own (T) positions.
  Tensor pos = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 10, 11, 12}, {2, 3});
  Vec both = values(fused::rope_rotate(x, pos));
  for (int64_t b = 0; b < 2; ++b) {
    Tensor xb = x.as_strided({1, 2, 3, 8}, {48, 24, 8, 1}, b * 48);
    Vec one = values(fused::rope_rotate(xb, Tensor::from_vector(std::vector<int64_t>{10 * b, 10 * b + 1, 10 * b + 2})));
    EXPECT_EQ(Vec(both.begin() + b * 48, both.begin() + (b + 1) * 48), one);
  }
  // A transposed x (stride on D not 1) is copied first and gives the same result.
  Tensor buf = random_tensor({1, 2, 8, 3}, DType::f32, 10);
  Tensor xt = buf.as_strided({1, 2, 3, 8}, {48, 24, 1, 3}, 0);
  Tensor p3 = Tensor::from_vector(std::vector<int32_t>{4, 5, 6});
  EXPECT_EQ(values(fused::rope_rotate(xt, p3)), values(fused::rope_rotate(packed(xt, DType::f32), p3)));
}

TEST(RopeOp, KernelMatchesTheSlowReference) {
  Tensor shared = Tensor::from_vector(std::vector<int64_t>{0, 3, 7, 120000});
  Tensor per_seq = Tensor::from_vector(std::vector<int32_t>{5, 6, 7, 8, 0, 1, 2, 3}, {2, 4});
  for (DType dt : {DType::f64, DType::f32})
    for (RopeLayout layout : {RopeLayout::split_half, RopeLayout::interleaved})
      for (bool inverse : {false, true}) {
        Tensor x = random_tensor({2, 3, 4, 8}, dt, 4);
        // The reference forms base^(-2i/D) as exp(-2i ln(base) / D): one ulp apart, which position
        // 120000 turns into angles ~1e-11 apart.
        EXPECT_TRUE(all_close(fused::rope_rotate(x, shared, 10000, layout, inverse),
                              fused::reference::rope(x, shared, 10000, layout, inverse), dt == DType::f64 ? 1e-10 : 3e-5));
        EXPECT_TRUE(all_close(fused::rope_rotate(x, per_seq, 500, layout, inverse),
                              fused::reference::rope(x, per_seq, 500, layout, inverse), (dt == DType::f64 ? 1e-12 : 3e-5)));
      }
  Tensor x3 = random_tensor({3, 4, 6}, DType::f32, 5);
  EXPECT_TRUE(all_close(fused::rope_rotate(x3, shared), fused::reference::rope(x3, shared), 3e-5));
  // Position interpolation (positions times 1/f), forward and inverse, shared and per-sequence positions.
  for (RopeLayout layout : {RopeLayout::split_half, RopeLayout::interleaved}) {
    Tensor x = random_tensor({2, 3, 4, 8}, DType::f64, 6);
    EXPECT_TRUE(all_close(fused::rope_rotate(x, shared, 10000, layout, false, 1.0 / 3.0),
                          fused::reference::rope(x, shared, 10000, layout, false, 1.0 / 3.0), 1e-10));
    EXPECT_TRUE(all_close(fused::rope_rotate(x, per_seq, 500, layout, true, 0.25),
                          fused::reference::rope(x, per_seq, 500, layout, true, 0.25), 1e-10));
  }
}

}  // namespace
}  // namespace mvgpt
