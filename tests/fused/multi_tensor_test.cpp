// The multi-tensor unit (autograd/fused/multi_tensor.h) on the CPU: the sum of squares against a
// float64 loop, scale_ and the many-tensor AdamW step bit for bit against the per-tensor ops they
// replace, the checks; on a GPU, the launches they take (a few, not one per tensor).
#include <gtest/gtest.h>

#include <vector>

#include <mvgpt/backends/cuda/cuda_backend.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/fused/multi_tensor.h>
#include <mvgpt/fused/unit.h>
#include "backends/device_compare.h"  // bitwise_equal
#include "backends/fused_test_util.h"
#include "cuda_required.h"

namespace mvgpt {
namespace {

using namespace fused_test;

std::vector<Tensor> mixed_tensors(Device d, uint64_t seed) {
  return {fused::uniform_on(d, {3, 5}, DType::f32, seed), fused::uniform_on(d, {0}, DType::f32, seed + 1),
          fused::uniform_on(d, {1 << 20 | 7}, DType::f32, seed + 2), fused::uniform_on(d, {17}, DType::f64, seed + 3),
          ops::to(fused::uniform_on(d, {9}, DType::f32, seed + 4), DType::bf16),
          ops::transpose(fused::uniform_on(d, {6, 4}, DType::f32, seed + 5), 0, 1)};
}

TEST(MultiTensor, SumSquaresIsTheFloat64SumOfEverySquare) {
  const std::vector<Tensor> xs = mixed_tensors(Device::cpu(), 1);
  double want = 0;
  for (const Tensor& x : xs)
    for (double v : values(x)) want += v * v;
  EXPECT_NEAR(fused::sum_squares(xs), want, 1e-12 * want);
  EXPECT_EQ(fused::sum_squares({}), 0.0);
}

TEST(MultiTensor, ScaleRoundsAsOpsMul) {
  const std::vector<Tensor> xs = mixed_tensors(Device::cpu(), 2);
  std::vector<Tensor> want;
  for (const Tensor& x : xs) want.push_back(ops::mul(x, 0.0371));
  fused::scale_(xs, 0.0371);
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_TRUE(testing::bitwise_equal(xs[i], want[i])) << "tensor " << i;
}

TEST(MultiTensor, AdamWStepManyIsAdamWStepPerTensor) {
  std::vector<fused::AdamWSlot> many;
  std::vector<std::vector<Tensor>> one;  // {param, grad, m, v} copies for adamw_step_
  for (int i = 0; i < 7; ++i) {
    const DType dt = i == 3 ? DType::f64 : DType::f32;
    const Shape s{int64_t(i) * 1000 + 1};
    Tensor p = random_tensor(s, dt, 10 + i), g = random_tensor(s, dt, 20 + i);
    Tensor m = random_tensor(s, dt, 30 + i, -0.1, 0.1), v = random_tensor(s, dt, 40 + i, 0, 0.1);
    AdamWParams hp;
    hp.lr = 1e-3 * (1 + i % 3), hp.weight_decay = i % 2 ? 0.1 : 0, hp.step = 3;
    many.push_back({p, g, m, v, hp});
    one.push_back({ops::clone(p), ops::clone(g), ops::clone(m), ops::clone(v)});
  }
  for (int step = 0; step < 2; ++step) {
    fused::adamw_step_many_(many);
    for (size_t i = 0; i < many.size(); ++i) {
      fused::adamw_step_(one[i][0], one[i][1], one[i][2], one[i][3], many[i].hp);
      ++many[i].hp.step;
    }
  }
  for (size_t i = 0; i < many.size(); ++i) {
    EXPECT_TRUE(testing::bitwise_equal(many[i].param, one[i][0])) << "param " << i;
    EXPECT_TRUE(testing::bitwise_equal(many[i].m, one[i][2])) << "m " << i;
    EXPECT_TRUE(testing::bitwise_equal(many[i].v, one[i][3])) << "v " << i;
  }
}

TEST(MultiTensor, Checks) {
  Tensor p = random_tensor({4}, DType::f32, 1), g = random_tensor({5}, DType::f32, 2);
  expect_error([&] { fused::adamw_step_many_({{p, g, ops::clone(p), ops::clone(p), AdamWParams{}}}); },
               "adamw_step_many_");
  AdamWParams zero_step;
  zero_step.step = 0;
  expect_error([&] { fused::adamw_step_many_({{p, p, ops::clone(p), ops::clone(p), zero_step}}); }, "1-based");
  expect_error([&] { fused::sum_squares({p, Tensor::from_vector(std::vector<int64_t>{1, 2})}); }, "sum_squares");
  expect_error([&] { fused::scale_({Tensor::from_vector(std::vector<int64_t>{1, 2})}, 2.0); }, "scale_");
}

// The launches of a step of the series' model's 75 parameters: AdamW one, clipping three.
TEST(MultiTensorCuda, AStepsParametersTakeAFewLaunches) {
  MVGPT_SKIP_WITHOUT_CUDA("launches of the multi-tensor kernels");
  const Device d = Device::cuda(0);
  std::vector<fused::AdamWSlot> slots;
  std::vector<Tensor> grads;
  for (int i = 0; i < 75; ++i) {
    const Shape s{int64_t(i % 5) * 40000 + 384};
    Tensor g = fused::uniform_on(d, s, DType::f32, 100 + uint64_t(i));
    AdamWParams hp;
    hp.weight_decay = i % 2 ? 0.1 : 0;  // two groups
    slots.push_back({fused::uniform_on(d, s, DType::f32, 200 + uint64_t(i)), g, fused::uniform_on(d, s, DType::f32, 1, 0, 0),
                     fused::uniform_on(d, s, DType::f32, 2, 0, 0), hp});
    grads.push_back(g);
  }
  int64_t before = cuda::kernel_launches();
  fused::adamw_step_many_(slots);
  EXPECT_EQ(cuda::kernel_launches() - before, 1);
  before = cuda::kernel_launches();
  const double sum = fused::sum_squares(grads);
  fused::scale_(grads, 0.5);
  EXPECT_EQ(cuda::kernel_launches() - before, 3);
  EXPECT_NEAR(fused::sum_squares(grads), sum / 4, 1e-9 * sum);
}

}  // namespace
}  // namespace mvgpt
