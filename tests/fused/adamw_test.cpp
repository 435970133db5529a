// AdamW (autograd/fused/adamw.h): the CPU kernel against hand-computed values, PyTorch's float32
// results bit for bit, the shared device math and the slow reference; the op's checks.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <mvgpt/backends/ops.h>
#include <mvgpt/fused/adamw.h>
#include <mvgpt/fused/adamw_math.h>
#include "backends/fused_test_util.h"
#include "backends/ops_test_util.h"

namespace mvgpt {
namespace {

using namespace fused_test;
using Vec = std::vector<double>;

// The CPU kernels themselves, without the op's checks and preparation.
const fused::AdamWKernels& cpu() { return cpu_kernels<fused::adamw_cpu_kernels>(); }

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
      cpu().step(param, grad, m, v, a, nullptr);
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
    cpu().step(p, g, m, v, a, nullptr);
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
  cpu().step(param, grad, m, v, a, nullptr);
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
  cpu().step(param, grad, m, v, a, nullptr);
  const Vec p1 = values(param);
  for (int64_t i = 0; i < n; i += 997) {
    HandAdamW h{p0[i], m0[i], v0[i]};
    h.step(g[i], a);
    ASSERT_NEAR(p1[i], h.p, 1e-6) << i;
  }
}

// NOTE [ Weights rounded by the optimizer ]: a rounded tensor gets the new weights rounded as ops::to
// rounds them (sizes past one block and one thread's part, a tail), and the step itself is unchanged.
TEST(AdamWKernel, WritesTheUpdatedWeightsRoundedWhereAsked) {
  for (const int64_t n : {int64_t(5), int64_t(4096 + 17), int64_t(100003)}) {
    Tensor param = random_tensor({n}, DType::f32, 13), grad = random_tensor({n}, DType::f32, 14);
    Tensor m = random_tensor({n}, DType::f32, 15, 0, 0.1), v = random_tensor({n}, DType::f32, 16, 0, 0.1);
    Tensor param2 = ops::contiguous(ops::mul(param, 1.0)), m2 = ops::mul(m, 1.0), v2 = ops::mul(v, 1.0);
    Tensor rounded = Tensor::empty({n}, DType::bf16);
    AdamWParams a;
    a.step = 3;
    a.weight_decay = 0.1;
    cpu().step(param, grad, m, v, a, &rounded);
    cpu().step(param2, grad, m2, v2, a, nullptr);
    EXPECT_EQ(values(param), values(param2)) << n;
    EXPECT_EQ(values(rounded), values(ops::to(param, DType::bf16))) << n;
  }
  Tensor p64 = random_tensor({4}, DType::f64, 1), r = Tensor::empty({4}, DType::bf16);
  EXPECT_THROW(cpu().step(p64, p64, p64, p64, AdamWParams{}, &r), std::logic_error);  // float32 weights only
}

TEST(AdamWKernel, SharedDeviceMathMatchesTheCpuKernelBitForBit) {
  AdamWParams p;
  p.lr = 1e-2, p.weight_decay = 0.1, p.step = 3;
  const int n = 37;
  Tensor param = testing::make_input({n}, DType::f32, 1), grad = testing::make_input({n}, DType::f32, 2);
  Tensor m = testing::make_input({n}, DType::f32, 3, testing::Kind::contiguous, -0.1, 0.1);
  Tensor v = testing::make_input({n}, DType::f32, 4, testing::Kind::contiguous, 0, 0.1);
  std::vector<float> pp = param.to_vector<float>(), gg = grad.to_vector<float>(), mm = m.to_vector<float>(),
                     vv = v.to_vector<float>();
  fused::adamw_step_(param, grad, m, v, p);
  const auto s = math::adamw_scalars<float>(p);
  for (int i = 0; i < n; ++i) {
    math::adamw_update(pp[size_t(i)], gg[size_t(i)], mm[size_t(i)], vv[size_t(i)], s);
    // Bit for bit: both round after every operation and contract nothing into an FMA.
    EXPECT_EQ(pp[size_t(i)], read_element(param, i)) << i;
    EXPECT_EQ(mm[size_t(i)], read_element(m, i)) << i;
    EXPECT_EQ(vv[size_t(i)], read_element(v, i)) << i;
  }
}

TEST(AdamWOp, ChecksAndBumpsVersions) {
  Tensor p = random_tensor({4}, DType::f32, 17), g = random_tensor({4}, DType::f32, 18);
  Tensor m = random_tensor({4}, DType::f32, 19, 0, 0), v = random_tensor({4}, DType::f32, 20, 0, 0);
  const uint64_t pv = p.version(), mv = m.version(), vv = v.version();
  fused::adamw_step_(p, g, m, v, AdamWParams{});
  EXPECT_GT(p.version(), pv);
  EXPECT_GT(m.version(), mv);
  EXPECT_GT(v.version(), vv);
  expect_error([&] { fused::adamw_step_(p, random_tensor({5}, DType::f32, 1), m, v, AdamWParams{}); },
               "adamw_step_: grad must have shape [4], found [5]");
  expect_error([&] { fused::adamw_step_(p, packed(g, DType::f64), m, v, AdamWParams{}); }, "grad is float64 but param is float32");
  AdamWParams bad;
  bad.step = 0;
  expect_error([&] { fused::adamw_step_(p, g, m, v, bad); }, "step is 1-based, found 0");
  Tensor p2 = random_tensor({2, 2}, DType::f32, 21);
  expect_error([&] { fused::adamw_step_(p2.as_strided({2, 2}, {1, 2}, 0), packed(p2, DType::f32), packed(p2, DType::f32),
                                      packed(p2, DType::f32), AdamWParams{}); },
               "param must be contiguous");
}

TEST(AdamWKernel, MatchesTheSlowReference) {
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor p = random_tensor({3, 50}, dt, 1), g = random_tensor({3, 50}, dt, 2);
    Tensor m = random_tensor({3, 50}, dt, 3, -0.1, 0.1), v = random_tensor({3, 50}, dt, 4, 0, 0.1);
    AdamWParams a;
    a.lr = 1e-2, a.weight_decay = 0.1, a.step = 5, a.beta2 = 0.95;
    std::vector<Tensor> want = fused::reference::adamw_step(p, g, m, v, a);
    fused::adamw_step_(p, g, m, v, a);
    const double tol = dt == DType::f64 ? 1e-14 : 1e-6;
    EXPECT_TRUE(all_close(p, want[0], tol, tol));
    EXPECT_TRUE(all_close(m, want[1], tol, tol));
    EXPECT_TRUE(all_close(v, want[2], tol, tol));
  }
}

}  // namespace
}  // namespace mvgpt
