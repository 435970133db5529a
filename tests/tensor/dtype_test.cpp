// bfloat16 conversion and the Philox stream: exact, reproducible values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <mvgpt/tensor/dtype.h>
#include <mvgpt/tensor/philox.h>
#include <mvgpt/tensor/tensor.h>

namespace mvgpt {
namespace {

TEST(Bfloat16, RoundsToNearestEvenAndRoundTrips) {
  EXPECT_EQ(float(bfloat16(1.0f)), 1.0f);
  EXPECT_EQ(float(bfloat16(1.00390625f)), 1.0f);      // halfway: to even
  EXPECT_EQ(float(bfloat16(1.01171875f)), 1.015625f);  // halfway: to even (up)
  EXPECT_EQ(float(bfloat16(-3.0f)), -3.0f);
  EXPECT_TRUE(std::isnan(float(bfloat16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(float(bfloat16(INFINITY)), INFINITY);
  // Every bf16 bit pattern that is a number survives bf16 -> float -> bf16.
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = bfloat16::to_float(uint16_t(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(bfloat16::from_float(f), uint16_t(b)) << b;
  }
}

TEST(Bfloat16, TensorElementsRoundTrip) {
  Tensor t = Tensor::from_vector<bfloat16>({bfloat16(0.5f), bfloat16(-2.25f), bfloat16(1e30f)});
  EXPECT_EQ(t.dtype(), DType::bf16);
  EXPECT_EQ(read_element(t, 1), -2.25);
  write_element(t, 0, 3.140625);
  EXPECT_EQ(t.to_vector<float>()[0], 3.140625f);
}

TEST(Philox, CounterBasedAndReproducible) {
  EXPECT_EQ(philox::uniform(42, 1000), philox::uniform(42, 1000));
  EXPECT_NE(philox::uniform(42, 1000), philox::uniform(43, 1000));
  EXPECT_NE(philox::uniform(42, 1000), philox::uniform(42, 1001));
  double lo = 1, hi = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    double u = philox::uniform(7, i);
    lo = std::min(lo, u), hi = std::max(hi, u);
    ASSERT_TRUE(std::isfinite(philox::normal(7, i)));
  }
  EXPECT_GE(lo, 0.0);
  EXPECT_LT(hi, 1.0);
  EXPECT_LT(lo, 0.01);
  EXPECT_GT(hi, 0.99);
}

}  // namespace
}  // namespace mvgpt
