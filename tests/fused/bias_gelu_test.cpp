// Bias + GELU (autograd/fused/bias_gelu.h): the CPU kernels against the slow reference, linear_gelu
// bit for bit the composition it replaces on the CPU (forward and every gradient), the checks; on a
// GPU, the launches it saves.
#include <gtest/gtest.h>

#include <vector>

#include <mvgpt/autograd/engine.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/autograd/precision.h>
#include <mvgpt/backends/cuda/cuda_backend.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/fused/bias_gelu.h>
#include <mvgpt/fused/unit.h>
#include "backends/device_compare.h"  // bitwise_equal
#include "backends/fused_test_util.h"
#include "cuda_required.h"

namespace mvgpt {
namespace {

using namespace fused_test;

TEST(BiasGelu, KernelsMatchTheSlowReference) {
  for (DType dt : {DType::f32, DType::f64}) {
    const double tol = dt == DType::f64 ? 1e-14 : 2e-6;
    Tensor x = random_tensor({3, 7, 40}, dt, 1, -5, 5), b = random_tensor({40}, dt, 2), g = random_tensor({3, 7, 40}, dt, 3);
    EXPECT_TRUE(all_close(fused::bias_gelu_forward(x, b), fused::reference::bias_gelu(x, b), tol, tol));
    // d/dx gelu(x + b) by the reference's own backward (the unary GELU's derivative).
    Tensor want = ops::unary_backward(UnaryOp::gelu, ops::add(x, b), g, 0);
    EXPECT_TRUE(all_close(fused::bias_gelu_backward(g, x, b), want, tol, tol));
  }
}

TEST(BiasGelu, LinearGeluIsTheCompositionBitForBitOnTheCpu) {
  Tensor x = random_tensor({2, 5, 8}, DType::f32, 4), w = random_tensor({12, 8}, DType::f32, 5);
  Tensor b = random_tensor({12}, DType::f32, 6), g = random_tensor({2, 5, 12}, DType::f32, 7);
  std::vector<std::vector<Tensor>> grads;
  std::vector<Tensor> outs;
  for (bool fused_path : {true, false}) {
    Tensor xi = ops::clone(x), wi = ops::clone(w), bi = ops::clone(b);
    for (Tensor* t : {&xi, &wi, &bi}) t->requires_grad_(true);
    Tensor y = fused_path ? linear_gelu(xi, wi, bi) : gelu(linear(xi, wi, bi));
    backward(sum(mul(y, g)));
    outs.push_back(y.detach());
    grads.push_back({xi.grad(), wi.grad(), bi.grad()});
  }
  EXPECT_TRUE(testing::bitwise_equal(outs[0], outs[1]));
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(testing::bitwise_equal(grads[0][i], grads[1][i])) << "gradient " << i;
}

// Under bf16 products, linear_gelu_linear's passes write the products' rounded operands and its
// hidden activations are bfloat16; the result and every gradient are still the composition's
// (NOTE [ The MLP's activations in bf16 ]: linear(mlp_hidden_gelu(linear(x, w1, b1), w1), w2, b2)
// from the autograd ops, the same roundings of the same floats, the bias sums in ops::sum's order;
// the products' float32 sums in the same order here, one oneDNN call each whether it writes
// bfloat16 or float32); under float32 products, the plain composition's. 150 rows: sums over two full blocks of 64 and a part, groups of 8 and a
// shorter last one; a hidden width of 44: sixteen-lane, eight-lane and scalar columns.
TEST(BiasGelu, LinearGeluLinearIsTheCompositionBitForBitUnderBf16Products) {
  auto composition = [](const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2) {
    return linear(mlp_hidden_gelu(linear(x, w1, b1), w1), w2, b2);  // gelu(pre) under float32 products
  };
  Tensor x = random_tensor({2, 75, 12}, DType::f32, 8, -2, 2), w1 = random_tensor({44, 12}, DType::f32, 9);
  Tensor b1 = random_tensor({44}, DType::f32, 10), w2 = random_tensor({20, 44}, DType::f32, 11);
  Tensor b2 = random_tensor({20}, DType::f32, 12), g = random_tensor({2, 75, 20}, DType::f32, 13);
  for (Precision p : {Precision::bf16, Precision::fp32}) {
    std::vector<std::vector<Tensor>> grads;
    std::vector<Tensor> outs;
    for (bool fused_path : {true, false}) {
      PrecisionGuard guard(p);
      std::vector<Tensor> in = {ops::clone(x), ops::clone(w1), ops::clone(b1), ops::clone(w2), ops::clone(b2)};
      for (Tensor& t : in) t.requires_grad_(true);
      Tensor y = fused_path ? linear_gelu_linear(in[0], in[1], in[2], in[3], in[4])
                            : composition(in[0], in[1], in[2], in[3], in[4]);
      backward(sum(mul(y, g)));
      outs.push_back(y.detach());
      grads.emplace_back();
      for (Tensor& t : in) grads.back().push_back(t.grad());
    }
    EXPECT_TRUE(testing::bitwise_equal(outs[0], outs[1])) << precision_name(p);
    for (size_t i = 0; i < 5; ++i)
      EXPECT_TRUE(testing::bitwise_equal(grads[0][i], grads[1][i])) << precision_name(p) << " gradient " << i;
  }
  PrecisionGuard guard(Precision::bf16);
  // Without gradients (inference), and without biases.
  EXPECT_TRUE(testing::bitwise_equal(linear_gelu_linear(x, w1, Tensor(), w2, Tensor()),
                                     composition(x, w1, Tensor(), w2, Tensor())));
  // Gradients for some inputs only (each set its own node's early exits): the weights, x, b1, b2, w2.
  for (const std::vector<int>& wanted : std::vector<std::vector<int>>{{1, 3}, {0}, {2}, {4}, {3}}) {
    std::vector<std::vector<Tensor>> got(2);
    for (int path = 0; path < 2; ++path) {
      std::vector<Tensor> in = {ops::clone(x), ops::clone(w1), ops::clone(b1), ops::clone(w2), ops::clone(b2)};
      for (int i : wanted) in[size_t(i)].requires_grad_(true);
      Tensor y = path == 0 ? linear_gelu_linear(in[0], in[1], in[2], in[3], in[4])
                           : composition(in[0], in[1], in[2], in[3], in[4]);
      backward(sum(mul(y, g)));
      for (int i : wanted) got[size_t(path)].push_back(in[size_t(i)].grad());
    }
    for (size_t i = 0; i < wanted.size(); ++i)
      EXPECT_TRUE(testing::bitwise_equal(got[0][i], got[1][i])) << "input " << wanted[i] << " of " << wanted.size();
  }
  // A hidden width of 1 takes the composition (ops::sum adds one column as a row, in another order).
  const Tensor w1n = random_tensor({1, 12}, DType::f32, 16), b1n = random_tensor({1}, DType::f32, 17);
  const Tensor w2n = random_tensor({20, 1}, DType::f32, 18);
  std::vector<std::vector<Tensor>> narrow(2);
  for (int path = 0; path < 2; ++path) {
    Tensor w = ops::clone(w1n), b = ops::clone(b1n);
    w.requires_grad_(true), b.requires_grad_(true);
    Tensor y = path == 0 ? linear_gelu_linear(x, w, b, w2n, b2) : composition(x, w, b, w2n, b2);
    backward(sum(mul(y, g)));
    narrow[size_t(path)] = {w.grad(), b.grad()};
  }
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(testing::bitwise_equal(narrow[0][i], narrow[1][i])) << i;
}

TEST(BiasGelu, GeluBackwardRoundedIsTheUnaryBackwardRoundedAndSummed) {
  Tensor x = random_tensor({150, 44}, DType::f32, 14, -9, 9), g = random_tensor({150, 44}, DType::f32, 15);
  // x and grad float32 or bfloat16, each read as float32; the sums are of dx's rounded values.
  for (DType xd : {DType::f32, DType::bf16})
    for (DType gd : {DType::f32, DType::bf16}) {
      const Tensor xi = ops::to(x, xd), gi = ops::to(g, gd);
      auto [dx, sums] = fused::gelu_backward_rounded(xi, gi);
      const Tensor want = ops::to(ops::unary_backward(UnaryOp::gelu, ops::to(xi, DType::f32), ops::to(gi, DType::f32), 0),
                                  DType::bf16);
      EXPECT_TRUE(testing::bitwise_equal(dx, want)) << dtype_name(xd) << " " << dtype_name(gd);
      EXPECT_TRUE(testing::bitwise_equal(sums, ops::sum(ops::to(want, DType::f32), {0})))
          << dtype_name(xd) << " " << dtype_name(gd);
    }
  const Tensor none = Tensor::empty({0, 5}, DType::f32);
  auto [empty_dx, empty_sums] = fused::gelu_backward_rounded(none, none);
  EXPECT_EQ(empty_dx.shape(), (Shape{0, 5}));
  EXPECT_TRUE(testing::bitwise_equal(empty_sums, ops::zeros({5}, DType::f32, Device::cpu())));
  expect_error([&] { fused::gelu_backward_rounded(x, random_tensor({150, 43}, DType::f32, 1)); },
               "gelu_backward_rounded");
  expect_error([&] { fused::gelu_backward_rounded(x, ops::to(g, DType::f64)); },
               "gelu_backward_rounded: grad must be float32 or bfloat16");
  expect_error([&] { fused::gelu_backward_rounded(ops::reshape(x, {3, 50, 44}), ops::reshape(g, {3, 50, 44})); },
               "gelu_backward_rounded: x must be (N, C)");
}

TEST(BiasGelu, GeluRoundedRoundsTheUnaryGelu) {
  // Every 16-lane block and a tail, and a transposed view.
  for (Tensor x : {random_tensor({3, 7, 41}, DType::f32, 12, -9, 9),
                   ops::transpose(random_tensor({6, 5}, DType::f32, 13), 0, 1)}) {
    Tensor got = fused::gelu_rounded(x);
    EXPECT_EQ(got.dtype(), DType::bf16);
    EXPECT_TRUE(testing::bitwise_equal(got, ops::to(ops::gelu(x), DType::bf16)));
    // A bfloat16 x (the MLP's pre-activation) is read as its float32 values.
    const Tensor xb = ops::to(x, DType::bf16);
    EXPECT_TRUE(testing::bitwise_equal(fused::gelu_rounded(xb), ops::to(ops::gelu(ops::to(xb, DType::f32)), DType::bf16)));
  }
  expect_error([] { fused::gelu_rounded(random_tensor({4}, DType::f64, 1)); },
               "gelu_rounded: x must be float32 or bfloat16");
}

// Every bfloat16 value, as the MLP's pre-activation (NOTE [ GELU of a bfloat16 by table ] in
// autograd/fused/bias_gelu_cpu.cpp: where the build has AVX-512 its GELU and derivative come from
// tables of all 65,536): the same bits as the float32 ops on the widened values, infinities and NaNs
// included, sixteen-lane blocks and tails.
TEST(BiasGelu, EveryBfloat16PreActivationGivesTheFloat32OpsBits) {
  std::vector<bfloat16> patterns(65536);
  for (uint32_t b = 0; b < 65536; ++b) patterns[b].bits = uint16_t(b);
  const Tensor all = Tensor::from_vector(patterns, {65536});
  for (const Shape& shape : {Shape{2048, 32}, Shape{4096, 16}, Shape{1024, 64}}) {
    const Tensor xb = ops::reshape(all, shape), x32 = ops::to(xb, DType::f32);
    EXPECT_TRUE(testing::bitwise_equal(fused::gelu_rounded(xb), fused::gelu_rounded(x32))) << to_string(shape);
    const Tensor g = random_tensor(shape, DType::f32, 21, -2, 2);
    for (DType gd : {DType::f32, DType::bf16}) {
      auto [dx, sums] = fused::gelu_backward_rounded(xb, ops::to(g, gd));
      auto [dx32, sums32] = fused::gelu_backward_rounded(x32, ops::to(g, gd));
      EXPECT_TRUE(testing::bitwise_equal(dx, dx32)) << to_string(shape) << " " << dtype_name(gd);
      EXPECT_TRUE(testing::bitwise_equal(sums, sums32)) << to_string(shape) << " " << dtype_name(gd);
    }
  }
  // A tail past the last block of sixteen, and a row shorter than sixteen.
  const Tensor odd = ops::narrow(all, 0, 40000, 16 * 37 + 5);
  EXPECT_TRUE(testing::bitwise_equal(fused::gelu_rounded(odd), fused::gelu_rounded(ops::to(odd, DType::f32))));
  const Tensor narrow_rows = ops::reshape(ops::narrow(all, 0, 16000, 13 * 9), {13, 9});
  const Tensor gn = random_tensor({13, 9}, DType::f32, 22);
  EXPECT_TRUE(testing::bitwise_equal(fused::gelu_backward_rounded(narrow_rows, gn).first,
                                     fused::gelu_backward_rounded(ops::to(narrow_rows, DType::f32), gn).first));
}

TEST(BiasGelu, ZeroWidthGivesEmptyGradients) {
  Tensor x = Tensor::empty({3, 0}, DType::f32), b = Tensor::empty({0}, DType::f32);
  x.requires_grad_(true);
  b.requires_grad_(true);
  backward(sum(bias_gelu(x, b)));
  EXPECT_EQ(x.grad().shape(), (Shape{3, 0}));
  EXPECT_EQ(b.grad().shape(), (Shape{0}));
}

TEST(BiasGelu, Checks) {
  Tensor x = random_tensor({4, 6}, DType::f32, 1);
  expect_error([&] { fused::bias_gelu_forward(x, random_tensor({5}, DType::f32, 2)); }, "bias_gelu: bias");
  expect_error([&] { fused::bias_gelu_forward(x, Tensor()); }, "bias_gelu");
  expect_error([&] { fused::bias_gelu_backward(random_tensor({4, 5}, DType::f32, 3), x, random_tensor({6}, DType::f32, 4)); },
               "bias_gelu_backward");
}

// linear_gelu on a GPU: the GEMM and one pass, where linear (GEMM, bias add) and GELU took three.
TEST(BiasGeluCuda, LinearGeluTakesTheGemmAndOnePass) {
  MVGPT_SKIP_WITHOUT_CUDA("launches of linear_gelu against linear then gelu");
  const Device d = Device::cuda(0);
  Tensor x = fused::uniform_on(d, {64, 96}, DType::f32, 1), w = fused::uniform_on(d, {384, 96}, DType::f32, 2);
  Tensor b = fused::uniform_on(d, {384}, DType::f32, 3);
  int64_t before = cuda::kernel_launches();
  Tensor fused_y = linear_gelu(x, w, b);
  EXPECT_EQ(cuda::kernel_launches() - before, 2);
  before = cuda::kernel_launches();
  Tensor composed = gelu(linear(x, w, b));
  EXPECT_EQ(cuda::kernel_launches() - before, 3);
  EXPECT_TRUE(all_close(ops::to(fused_y, Device::cpu()), ops::to(composed, Device::cpu()), 1e-6, 1e-6));
}

}  // namespace
}  // namespace mvgpt
