// The two vector exps (exp_v in backends/cpu/vec_math.h for the activations, exp_lanes in
// fused_common.h for softmax and cross-entropy) where the build targets AVX-512: their 2^n applied by
// vscalefps (NOTE [ exp's 2^n in one instruction ]) against the integer scaling it replaced, written
// out again here, bit for bit at every width, over the whole range: subnormal results, overflow to
// inf and infinities included, a NaN wherever the reference gives one (its payload not compared).
// Checked over all 2^32 inputs once, when it was written; sampled here. Without AVX-512 (or with
// AVX-512F alone) the functions are those forms themselves.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include <mvgpt/backends/cpu/fused_common.h>
#include <mvgpt/backends/cpu/vec_math.h>

namespace mvgpt {
namespace {

using cpu::f32x8;
using cpu::i32x8;

// exp_v's steps as the build without AVX-512 runs them: 2^n as two halves, each a float built from
// its exponent bits, the first product exact.
f32x8 exp_by_two_halves(f32x8 x) {
  const f32x8 lo = cpu::splat(-104.0f), hi = cpu::splat(89.0f), magic = cpu::splat(12582912.0f);
  f32x8 xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  const f32x8 t = xc * 1.44269504088896341f + magic;
  const f32x8 n = t - magic;
  f32x8 r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  f32x8 p = cpu::splat(1.0f / 5040.0f);
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const i32x8 ni = (i32x8)t - (i32x8)magic;
  const i32x8 half = ni >> 1;
  const f32x8 s1 = (f32x8)((half + 127) << 23), s2 = (f32x8)((ni - half + 127) << 23);
  return p * s1 * s2;
}

// exp_lanes's steps with 2^n as a float built from its exponent bits.
f32x8 exp_lanes_by_bits(f32x8 x) {
  const f32x8 lo = x < -87.0f ? f32x8{} - 87.0f : x;
  const f32x8 xc = lo > 88.0f ? f32x8{} + 88.0f : lo;
  const float shifter = 12582912.0f;
  const f32x8 n = (xc * 1.44269504088896341f + shifter) - shifter;
  const f32x8 r = (xc - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;
  f32x8 p = f32x8{} + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const i32x8 bits = (__builtin_convertvector(n, i32x8) + 127) << 23;
  f32x8 y = p * reinterpret_cast<f32x8>(bits);
  y = x < -87.0f ? f32x8{} : y;
  y = x > 88.0f ? f32x8{} + INFINITY : y;
  return x != x ? x : y;
}

uint32_t bits_of(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

// Inputs across the whole range: special values, uniform over [-110, 95] and where results are subnormal.
std::vector<float> exp_inputs() {
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 88.0f, 88.01f, 88.72f, 88.73f, 89.0f, 100.0f, -87.0f, -87.01f,
                           -87.3f, -87.4f, -100.0f, -103.9f, -104.0f, -200.0f, std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max()};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> wide(-110.0f, 95.0f), subnormal_results(-104.0f, -86.0f);
  for (int i = 0; i < 200000; ++i) xs.push_back(wide(rng));
  for (int i = 0; i < 50000; ++i) xs.push_back(subnormal_results(rng));
  while (xs.size() % 16) xs.push_back(0.5f);
  return xs;
}

void expect_same(float got, float want, float x) {
  ASSERT_EQ(std::isnan(got), std::isnan(want)) << "exp(" << x << ")";
  if (!std::isnan(want)) {
    ASSERT_EQ(bits_of(got), bits_of(want)) << "exp(" << x << "): " << got << " against " << want;
  }
}

// f8 and f16: the function at eight and sixteen lanes; want: the reference at eight.
template <typename F8, typename F16>
void expect_exp_as_reference(F8 f8, [[maybe_unused]] F16 f16, f32x8 (*want)(f32x8)) {
  const std::vector<float> xs = exp_inputs();
  for (size_t i = 0; i < xs.size(); i += 16) {
    f32x8 a, b;
    std::memcpy(&a, &xs[i], sizeof a);
    std::memcpy(&b, &xs[i + 8], sizeof b);
    const f32x8 want_a = want(a), want_b = want(b), got8_a = f8(a), got8_b = f8(b);
#ifdef __AVX512F__
    cpu::f32x16 w;
    std::memcpy(&w, &xs[i], sizeof w);
    const cpu::f32x16 got16 = f16(w);
#endif
    for (int l = 0; l < 8; ++l) {
      ASSERT_NO_FATAL_FAILURE(expect_same(got8_a[l], want_a[l], a[l]));
      ASSERT_NO_FATAL_FAILURE(expect_same(got8_b[l], want_b[l], b[l]));
#ifdef __AVX512F__
      ASSERT_NO_FATAL_FAILURE(expect_same(got16[l], want_a[l], a[l]));
      ASSERT_NO_FATAL_FAILURE(expect_same(got16[l + 8], want_b[l], b[l]));
#endif
    }
  }
}

#ifdef __AVX512F__
using F16 = cpu::f32x16 (*)(cpu::f32x16);
#else
using F16 = int;
#endif

TEST(VecMath, ExpIsTheSameWhicheverWayItScalesByTwoToTheN) {
#ifdef __AVX512F__
  const F16 f16 = [](cpu::f32x16 v) { return cpu::exp_v(v); };
#else
  const F16 f16 = 0;
#endif
  expect_exp_as_reference([](f32x8 v) { return cpu::exp8(v); }, f16, exp_by_two_halves);
  // Subnormal and zero results are the ones the one rounding decides.
  EXPECT_GT(cpu::exp_fast(-100.0f), 0.0f);
  EXPECT_LT(cpu::exp_fast(-100.0f), std::numeric_limits<float>::min());
  EXPECT_EQ(cpu::exp_fast(89.0f), std::numeric_limits<float>::infinity());
}

TEST(VecMath, SoftmaxExpIsTheSameWhicheverWayItScalesByTwoToTheN) {
#ifdef __AVX512F__
  const F16 f16 = [](cpu::f32x16 v) { return cpu::fused::exp16(v); };
#else
  const F16 f16 = 0;
#endif
  expect_exp_as_reference([](f32x8 v) { return cpu::fused::exp8(v); }, f16, exp_lanes_by_bits);
}

}  // namespace
}  // namespace mvgpt
