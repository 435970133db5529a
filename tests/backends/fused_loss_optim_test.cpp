// Cross-entropy kernels against naive double loops.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <mvgpt/backends/backend.h>
#include <mvgpt/backends/cpu/fused_common.h>
#include "fused_test_util.h"

namespace mvgpt {
namespace {

using namespace fused_test;
using Vec = std::vector<double>;

Backend& cpu() { return backend_for(Device::cpu()); }

TEST(CrossEntropyKernel, MatchesNaiveLoopsWithIgnoredRows) {
  const int64_t N = 6, V = 37, ignore = -100;
  const std::vector<int64_t> tv = {0, 36, ignore, 5, 17, ignore};
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor logits = random_tensor({N, V}, dt, 1, -5, 5);
    Tensor targets = Tensor::from_vector(tv);
    Tensor losses = Tensor::empty({N}, dt), lse = Tensor::empty({N}, dt);
    cpu().cross_entropy(logits, targets, ignore, losses, lse);
    Tensor dl = random_tensor({N}, dt, 2), dlogits = Tensor::empty({N, V}, dt);
    cpu().cross_entropy_backward(dl, logits, targets, lse, ignore, dlogits);

    const Vec x = values(logits), g = values(dl);
    Vec want_loss(N), want_lse(N), want_d(size_t(N * V), 0.0);
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t j = 0; j < V; ++j) s += std::exp(x[n * V + j]);
      want_lse[n] = std::log(s);
      if (tv[n] == ignore) continue;
      want_loss[n] = want_lse[n] - x[n * V + tv[n]];
      for (int64_t j = 0; j < V; ++j) want_d[n * V + j] = (std::exp(x[n * V + j]) / s - (j == tv[n])) * g[n];
    }
    const double tol = dt == DType::f64 ? 1e-12 : 2e-6;
    EXPECT_TRUE(all_close(losses, want_loss, tol, tol)) << dtype_name(dt);
    EXPECT_TRUE(all_close(lse, want_lse, tol, tol)) << dtype_name(dt);
    EXPECT_TRUE(all_close(dlogits, want_d, tol, tol)) << dtype_name(dt);
  }
}

TEST(CrossEntropyKernel, Int32TargetsLargeLogitsAndCustomIgnoreIndex) {
  // Logits far from 0 must not overflow the exp (the max is subtracted first).
  Tensor logits = Tensor::from_vector(std::vector<float>{1000, 1001, 999, -1000, -1001, -999}, {2, 3});
  Tensor targets = Tensor::from_vector(std::vector<int32_t>{1, 2});
  Tensor losses = Tensor::empty({2}, DType::f32), lse = Tensor::empty({2}, DType::f32);
  cpu().cross_entropy(logits, targets, 2, losses, lse);
  const double l0 = std::log(std::exp(-1.0) + 1 + std::exp(-2.0));
  EXPECT_NEAR(losses.to_vector<double>()[0], l0, 1e-5);
  EXPECT_EQ(losses.to_vector<double>()[1], 0.0);
  EXPECT_NEAR(lse.to_vector<double>()[0], 1001 + l0, 1e-3);
}

TEST(CrossEntropyKernel, ExpApproximationIsAccurateOverItsRange) {
  // Rows with one huge spread exercise the exp from -80 to 0.
  const int64_t V = 4001;
  std::vector<double> row(V);
  for (int64_t j = 0; j < V; ++j) row[j] = -80.0 + 0.02 * j;
  Tensor logits = Tensor::from_vector(row, {1, V}), logits32 = Tensor::empty({1, V}, DType::f32);
  for (int64_t j = 0; j < V; ++j) write_element(logits32, j, row[j]);
  Tensor targets = Tensor::from_vector(std::vector<int64_t>{0});
  Tensor dl = Tensor::from_vector(std::vector<float>{1}), losses = Tensor::empty({1}, DType::f32),
         lse = Tensor::empty({1}, DType::f32), d = Tensor::empty({1, V}, DType::f32);
  cpu().cross_entropy(logits32, targets, -100, losses, lse);
  cpu().cross_entropy_backward(dl, logits32, targets, lse, -100, d);
  double s = 0;
  for (double x : row) s += std::exp(x);
  const Vec dv = values(d), x32 = values(logits32);
  for (int64_t j = 1; j < V; ++j) {
    const double want = std::exp(x32[j]) / s;
    // The float argument x - lse carries a rounding error of |x - lse| * 6e-8.
    ASSERT_NEAR(dv[j], want, want * (3e-7 + 1.2e-7 * std::abs(x32[j] - std::log(s)))) << "logit " << x32[j];
  }
}

TEST(CrossEntropyKernel, ExpApproxHelper) {
  for (double x = -87; x <= 88; x += 0.0137) {
    const float xf = float(x);
    const double want = std::exp(double(xf));
    ASSERT_NEAR(cpu::fused::exp_approx(xf), want, 2.5e-7 * want) << xf;
  }
  EXPECT_EQ(cpu::fused::exp_approx(-INFINITY), 0.0f);
  EXPECT_EQ(cpu::fused::exp_approx(-100.0f), 0.0f);
  EXPECT_EQ(cpu::fused::exp_approx(INFINITY), INFINITY);
  EXPECT_EQ(cpu::fused::exp_approx(0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(cpu::fused::exp_approx(NAN)));
}

}  // namespace
}  // namespace mvgpt
