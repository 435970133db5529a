// Creation, copies, conversions and random tensors.
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <cmath>
#include <vector>

#include <mvgpt/backends/ops.h>
#include "ops_test_util.h"
#include <mvgpt/tensor/philox.h>

namespace mvgpt {
namespace {

using testing::expect_all_close;
using testing::expect_throw_with;
using testing::Kind;
using testing::make_input;

TEST(OpsCreate, FilledTensorsAndRanges) {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::i32, DType::i64, DType::boolean}) {
    Tensor z = ops::zeros({2, 3}, dt), o = ops::ones({2, 3}, dt), f = ops::full({4}, 3, dt);
    EXPECT_EQ(z.dtype(), dt);
    for (int64_t i = 0; i < 6; ++i) {
      EXPECT_EQ(read_element(z, i), 0);
      EXPECT_EQ(read_element(o, i), 1);
    }
    EXPECT_EQ(read_element(f, 3), dt == DType::boolean ? 1 : 3);
  }
  EXPECT_EQ(ops::zeros_like(ops::zeros({0, 5}, DType::i32)).shape(), (Shape{0, 5}));
  EXPECT_EQ(ops::full_like(ops::zeros({2}, DType::f64), 2.5).to_vector<double>(), (std::vector<double>{2.5, 2.5}));
  EXPECT_EQ(ops::arange(0, 5).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(ops::arange(1, 2, 0.25, DType::f32).to_vector<float>(), (std::vector<float>{1, 1.25, 1.5, 1.75}));
  EXPECT_EQ(ops::arange(5, 0, -2, DType::i32).to_vector<int32_t>(), (std::vector<int32_t>{5, 3, 1}));
  EXPECT_EQ(ops::arange(3, 3).numel(), 0);
  expect_throw_with([] { ops::arange(0, 1, 0); }, "arange: start, end and step must be finite and step nonzero");
}

TEST(OpsCreate, RandomFollowsPhiloxAndTheGenerator) {
  Generator g(1234);
  Tensor u = ops::rand({3, 5}, DType::f64, Device::cpu(), &g);
  Tensor n = ops::randn({7}, DType::f32, Device::cpu(), &g);
  EXPECT_EQ(g.offset, 22u);
  for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(read_element(u, i), philox::uniform(1234, uint64_t(i)));
  for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(read_element(n, i), double(float(philox::normal(1234, uint64_t(15 + i)))));
  // Uniform stays in [0, 1); normal has the right moments.
  Tensor big = ops::randn({100000}, DType::f32, Device::cpu(), &g);
  double mean = ops::mean(big).item<double>();
  double var = ops::mean(ops::square(big)).item<double>() - mean * mean;
  EXPECT_NEAR(mean, 0, 0.02);
  EXPECT_NEAR(var, 1, 0.02);
  Tensor ub = ops::rand({100000}, DType::f32, Device::cpu(), &g);
  EXPECT_GE(ops::min(ub).item<float>(), 0.0f);
  EXPECT_LT(ops::max(ub).item<float>(), 1.0f);
  EXPECT_EQ(ops::rand({4}, DType::bf16, Device::cpu(), &g).dtype(), DType::bf16);
  expect_throw_with([&] { ops::rand({2}, DType::i64); }, "rand: expected a floating-point dtype, found int64");
}

TEST(OpsCreate, RandomIsBitwiseIdenticalAcrossThreadCounts) {
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 2}) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, size_t(threads));
    Generator g(77);
    runs.push_back(ops::randn({200000}, DType::f32, Device::cpu(), &g).to_vector<float>());
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST(OpsCreate, DefaultGeneratorAdvances) {
  manual_seed(5);
  Tensor a = ops::randn({3});
  Tensor b = ops::randn({3});
  manual_seed(5);
  EXPECT_EQ(ops::randn({3}).to_vector<float>(), a.to_vector<float>());
  EXPECT_NE(a.to_vector<float>(), b.to_vector<float>());
}

TEST(OpsCopy, CloneContiguousAndConversions) {
  for (Kind kind : testing::kAllKinds) {
    Tensor x = make_input({3, 4, 5}, DType::f32, 1, kind);
    Tensor c = ops::clone(x);
    EXPECT_TRUE(c.is_contiguous());
    EXPECT_NE(c.storage(), x.storage());
    expect_all_close(c, [&](int64_t i) { return read_element(x, i); }, 0, "clone");
    Tensor k = ops::contiguous(x);
    if (kind == Kind::contiguous) {
      EXPECT_TRUE(k.same(x));
    }
    expect_all_close(k, [&](int64_t i) { return read_element(x, i); }, 0, "contiguous");
    for (DType to : {DType::f64, DType::bf16, DType::i32, DType::i64, DType::boolean}) {
      Tensor y = ops::to(x, to);
      EXPECT_EQ(y.dtype(), to);
      expect_all_close(y, [&](int64_t i) {
        double v = read_element(x, i);
        if (to == DType::bf16) return double(float(bfloat16(float(v))));
        if (is_integral(to)) return std::trunc(v);
        if (to == DType::boolean) return double(v != 0);
        return v;
      }, 0, std::string("to ") + std::string(dtype_name(to)));
    }
  }
  Tensor x = ops::zeros({2});
  EXPECT_TRUE(ops::to(x, DType::f32).same(x));
  EXPECT_TRUE(ops::to(x, Device::cpu()).same(x));
  // Without CUDA built in, or without a GPU, the message names the device and says why.
  if (!cuda_available())
    expect_throw_with<std::runtime_error>([&] { ops::to(x, Device::cuda(0)); }, "cuda:0 requested, but");
}

TEST(OpsCopy, Bfloat16RoundTrips) {
  // Every bfloat16 value is a float, so float -> bf16 -> float -> bf16 is the identity on bf16 values.
  Tensor x = ops::to(make_input({1000}, DType::f32, 3, Kind::contiguous, -1e4, 1e4), DType::bf16);
  Tensor back = ops::to(ops::to(x, DType::f32), DType::bf16);
  EXPECT_EQ(x.to_vector<float>(), back.to_vector<float>());
  // Rounds to nearest even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(ops::to(Tensor::from_vector<float>({1.00390625f}), DType::bf16).item<float>(), 1.0f);
  EXPECT_EQ(ops::to(Tensor::from_vector<float>({1.01171875f}), DType::bf16).item<float>(), 1.015625f);
}

TEST(OpsCopy, CopyBroadcastsConvertsAndBumpsTheVersion) {
  Tensor dst = ops::zeros({3, 4}, DType::f64);
  Tensor view = ops::narrow(dst, 1, 1, 2);
  uint64_t v0 = dst.version();
  ops::copy_(view, Tensor::from_vector<float>({5, 6}));  // broadcast over rows, float -> double
  EXPECT_GT(dst.version(), v0);
  EXPECT_EQ(dst.to_vector<double>(), (std::vector<double>{0, 5, 6, 0, 0, 5, 6, 0, 0, 5, 6, 0}));
  uint64_t v1 = dst.version();
  ops::fill_(ops::select(dst, 0, 2), 1);
  EXPECT_GT(dst.version(), v1);
  EXPECT_EQ(read_element(dst, 8), 1);
  EXPECT_EQ(read_element(dst, 7), 0);
  // Overlapping source and destination behave as if the source were read first.
  Tensor s = ops::arange(0, 6, 1, DType::f32);
  ops::copy_(ops::narrow(s, 0, 1, 5), ops::narrow(s, 0, 0, 5));
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{0, 0, 1, 2, 3, 4}));
  expect_throw_with([&] { ops::copy_(dst, ops::zeros({5})); }, "copy_: src of shape [5] does not broadcast to dst shape [3, 4]");
  expect_throw_with([&] { ops::copy_(view, ops::zeros({3, 4})); }, "copy_: src of shape [3, 4] does not broadcast to dst shape [3, 2]");
  expect_throw_with([&] { ops::fill_(Tensor(), 1); }, "fill_: dst is undefined");
}

TEST(OpsCopy, LargeStridedCopyUsesThreads) {
  Tensor x = make_input({512, 300}, DType::f32, 4, Kind::transposed);
  Tensor y = ops::contiguous(x);
  expect_all_close(y, [&](int64_t i) { return read_element(x, i); }, 0, "large transpose copy");
}

}  // namespace
}  // namespace mvgpt
