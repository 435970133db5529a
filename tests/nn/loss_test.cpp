#include <mvgpt/nn/loss.h>

#include <gtest/gtest.h>

#include <cmath>

#include "nn/test_util.h"

namespace mvgpt::nn {
namespace {

using testing::expect_close;
using testing::vals;

TEST(CrossEntropy, MeanOverKeptTokensAndPerTokenLosses) {
  const int64_t B = 2, T = 3, V = 5;
  Tensor logits = testing::randn({B, T, V}, 3, DType::f64);
  Tensor targets = Tensor::from_vector<int64_t>({4, 0, -100, 2, -100, 1}, {B, T});
  std::vector<double> lv = vals(logits), want(size_t(B * T), 0.0);
  std::vector<int64_t> tv = targets.to_vector<int64_t>();
  double total = 0;
  int kept = 0;
  for (int64_t r = 0; r < B * T; ++r) {
    if (tv[size_t(r)] == -100) continue;
    double mx = -INFINITY, z = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, lv[size_t(r * V + v)]);
    for (int64_t v = 0; v < V; ++v) z += std::exp(lv[size_t(r * V + v)] - mx);
    want[size_t(r)] = mx + std::log(z) - lv[size_t(r * V + tv[size_t(r)])];
    total += want[size_t(r)];
    ++kept;
  }
  Tensor per_token = cross_entropy_per_token(logits, targets);
  EXPECT_EQ(per_token.shape(), (Shape{B, T}));
  expect_close(per_token, want, 1e-12);
  Tensor mean = cross_entropy_loss(logits, targets);
  EXPECT_EQ(mean.numel(), 1);
  EXPECT_NEAR(mean.item<double>(), total / kept, 1e-12);
  // Another ignore index.
  Tensor t2 = Tensor::from_vector<int64_t>({4, 0, 3, 2, 3, 1}, {B, T});
  EXPECT_NEAR(cross_entropy_loss(logits, t2, 3).item<double>(), total / kept, 1e-12);
  EXPECT_THROW(cross_entropy_loss(logits, Tensor::from_vector<int64_t>({0, 1}, {2})), std::invalid_argument);
}

}  // namespace
}  // namespace mvgpt::nn
