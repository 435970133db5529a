// Cross-entropy and AdamW kernels against naive double loops and hand-computed values.
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

// AdamW by hand in double (torch.optim.AdamW's formula).
struct HandAdamW {
  double p, m = 0, v = 0;
  void step(double g, const AdamWParams& a) {
    p *= 1 - a.lr * a.weight_decay;
    m = a.beta1 * m + (1 - a.beta1) * g;
    v = a.beta2 * v + (1 - a.beta2) * g * g;
    const double mhat = m / (1 - std::pow(a.beta1, a.step)), vhat = v / (1 - std::pow(a.beta2, a.step));
    p -= a.lr * mhat / (std::sqrt(vhat) + a.eps);
  }
};

TEST(AdamWKernel, ThreeStepsMatchHandComputedValues) {
  for (DType dt : {DType::f64, DType::f32}) {
    const Vec p0 = {0.5, -1.5, 2.0, 0.0}, g1 = {0.1, -0.2, 0.0, 3.0}, g2 = {-0.3, 0.2, 1e-4, 3.0};
    Tensor param = Tensor::empty({4}, dt), m = Tensor::empty({4}, dt), v = Tensor::empty({4}, dt);
    Tensor grad = Tensor::empty({4}, dt);
    for (int i = 0; i < 4; ++i) {
      write_element(param, i, p0[i]);
      write_element(m, i, 0);
      write_element(v, i, 0);
    }
    std::vector<HandAdamW> hand;
    for (double p : p0) hand.push_back({p});
    AdamWParams a;
    a.lr = 0.01;
    a.weight_decay = 0.1;
    for (int step = 1; step <= 3; ++step) {
      a.step = step;
      const Vec& g = step == 2 ? g2 : g1;
      for (int i = 0; i < 4; ++i) {
        write_element(grad, i, g[i]);
        hand[i].step(g[i], a);
      }
      cpu().adamw_step(param, grad, m, v, a);
    }
    const double tol = dt == DType::f64 ? 1e-14 : 1e-6;
    for (int i = 0; i < 4; ++i) {
      EXPECT_NEAR(read_element(param, i), hand[i].p, tol) << i;
      EXPECT_NEAR(read_element(m, i), hand[i].m, tol) << i;
      EXPECT_NEAR(read_element(v, i), hand[i].v, tol) << i;
    }
  }
}

TEST(AdamWKernel, Float32MatchesPyTorchBitForBit) {
  // torch.optim.AdamW(lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1), torch 1.13, 3 steps:
  // p_i = (i % 7) / 3 - 1.1, g_i at step s = ((13 i + 7 s) % 29) / 5 - 2.9 (formed in double, stored
  // as float32). 20 values: the 8-wide loop and its scalar tail.
  const std::vector<float> want = {-1.09382629f, -0.772514343f, -0.42593354f, -0.105320305f, 0.24104993f,
                                   0.564735234f, 0.896055639f,  -1.09792376f, -0.767365694f, -0.428605795f,
                                   -0.106758237f, 0.239642411f, 0.560340166f, 0.906885684f,  -1.10349476f,
                                   -0.76970619f, -0.432931751f, -0.101857409f, 0.236487433f, 0.565755785f};
  const int64_t n = 20;
  Tensor p = Tensor::empty({n}, DType::f32), g = Tensor::empty({n}, DType::f32);
  Tensor m = Tensor::empty({n}, DType::f32), v = Tensor::empty({n}, DType::f32);
  for (int64_t i = 0; i < n; ++i) {
    p.data<float>()[i] = float(double(i % 7) / 3 - 1.1);
    m.data<float>()[i] = v.data<float>()[i] = 0;
  }
  AdamWParams a;
  a.lr = 3e-3;
  a.beta2 = 0.95;
  a.weight_decay = 0.1;
  for (int s = 1; s <= 3; ++s) {
    for (int64_t i = 0; i < n; ++i) g.data<float>()[i] = float(double((13 * i + 7 * s) % 29) / 5 - 2.9);
    a.step = s;
    cpu().adamw_step(p, g, m, v, a);
  }
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(p.data<float>()[i], want[size_t(i)]) << i;
}

TEST(AdamWKernel, FirstStepMovesEachWeightByAboutLr) {
  // At step 1 mhat / sqrt(vhat) = sign(g): a textbook value, independent of the formula above.
  Tensor param = Tensor::from_vector(std::vector<double>{1, 1, 1}), grad = Tensor::from_vector(std::vector<double>{5, -0.01, 0});
  Tensor m = Tensor::from_vector(std::vector<double>{0, 0, 0}), v = Tensor::from_vector(std::vector<double>{0, 0, 0});
  AdamWParams a;
  a.lr = 0.1;
  a.eps = 0;
  cpu().adamw_step(param, grad, m, v, a);
  EXPECT_NEAR(read_element(param, 0), 0.9, 1e-15);
  EXPECT_NEAR(read_element(param, 1), 1.1, 1e-15);
  EXPECT_TRUE(std::isnan(read_element(param, 2)));  // 0 / 0 with eps = 0, as PyTorch
}

TEST(AdamWKernel, LargeTensorTakesTheParallelPath) {
  const int64_t n = 100000;
  Tensor param = random_tensor({n}, DType::f32, 3), grad = random_tensor({n}, DType::f32, 4);
  Tensor m = random_tensor({n}, DType::f32, 5, 0, 0.1), v = random_tensor({n}, DType::f32, 6, 0, 0.1);
  const Vec p0 = values(param), g = values(grad), m0 = values(m), v0 = values(v);
  AdamWParams a;
  a.step = 7;
  a.weight_decay = 0.01;
  cpu().adamw_step(param, grad, m, v, a);
  const Vec p1 = values(param);
  for (int64_t i = 0; i < n; i += 997) {
    HandAdamW h{p0[i], m0[i], v0[i]};
    h.step(g[i], a);
    ASSERT_NEAR(p1[i], h.p, 1e-6) << i;
  }
}

}  // namespace
}  // namespace mvgpt
