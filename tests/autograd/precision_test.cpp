// The precision policy (NOTE [ Precision policy ] in autograd/precision.h): under bf16, linear and
// matmul multiply bfloat16-rounded operands and sum in float32, forward and backward, against a
// double-precision reference over the same rounded values; fp32 and float64 are untouched; a
// weight's cached copy follows in-place updates; choose_precision's answers.
#include <gtest/gtest.h>

#include <cmath>

#include <mvgpt/autograd/ops.h>
#include <mvgpt/autograd/precision.h>
#include <mvgpt/backends/backend.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/tensor/host_arena.h>

namespace mvgpt {
namespace {

Tensor uniform(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return ops::rand(shape, DType::f32, Device::cpu(), &g) * 2.0 - 1.0;
}
bool same_values(const Tensor& a, const Tensor& b) { return a.to_vector<double>() == b.to_vector<double>(); }
double round_bf16(double v) { return double(float(bfloat16(float(v)))); }

// out (M, N) = a (M, K) @ b (K, N) in double over (optionally bf16-rounded) values.
std::vector<double> product(const Tensor& a, const Tensor& b, bool rounded) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  std::vector<double> out(size_t(M * N));
  auto at = [&](const Tensor& t, int64_t i) { return rounded ? round_bf16(read_element(t, i)) : read_element(t, i); };
  Tensor ca = ops::contiguous(a.detach()), cb = ops::contiguous(b.detach());  // values only
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += at(ca, i * K + k) * at(cb, k * N + j);
      out[size_t(i * N + j)] = acc;
    }
  return out;
}

void expect_close(const Tensor& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(size_t(got.numel()), want.size()) << what;
  Tensor c = ops::contiguous(got.detach());
  int failures = 0;
  for (size_t i = 0; i < want.size() && failures < 5; ++i) {
    const double g = read_element(c, int64_t(i));
    if (std::abs(g - want[i]) > tol * (1 + std::abs(want[i]))) {
      ++failures;
      ADD_FAILURE() << what << " element " << i << ": got " << g << ", expected " << want[i];
    }
  }
}

TEST(Precision, LinearUnderBf16MultipliesRoundedOperandsBothWays) {
  Tensor x = uniform({12, 48}, 1).requires_grad_();
  Tensor w = parameter(uniform({40, 48}, 2)), b = parameter(uniform({40}, 3));
  Tensor r = uniform({12, 40}, 4);  // d loss / d y
  {
    PrecisionGuard bf16(Precision::bf16);
    Tensor y = linear(x, w, b);  // (12, 40)
    ASSERT_EQ(y.dtype(), DType::f32);
    std::vector<double> want = product(x, ops::transpose(w.detach(), 0, 1), true);
    for (size_t i = 0; i < want.size(); ++i) want[i] += read_element(b, int64_t(i % 40));
    expect_close(y, want, 1e-5, "y");
    backward(sum(y * r));
  }
  // The incoming gradient is rounded too; the sums, and so the gradients, are float32.
  ASSERT_EQ(x.grad().dtype(), DType::f32);
  ASSERT_EQ(w.grad().dtype(), DType::f32);
  expect_close(x.grad(), product(r, w.detach(), true), 1e-5, "dx");                      // r (12, 40) @ w (40, 48)
  expect_close(w.grad(), product(ops::transpose(r, 0, 1), x.detach(), true), 1e-5, "dw");  // r^T (40, 12) @ x
  std::vector<double> db(40, 0.0);
  for (int64_t i = 0; i < r.numel(); ++i) db[size_t(i % 40)] += read_element(r, i);  // the bias sees r unrounded
  expect_close(b.grad(), db, 1e-5, "db");
}

TEST(Precision, MatmulUnderBf16MultipliesRoundedOperandsBothWays) {
  Tensor a = uniform({9, 32}, 5).requires_grad_(), bm = uniform({32, 7}, 6).requires_grad_();
  Tensor r = uniform({9, 7}, 7);
  {
    PrecisionGuard bf16(Precision::bf16);
    Tensor y = matmul(a, bm);
    expect_close(y, product(a.detach(), bm.detach(), true), 1e-5, "y");
    backward(sum(y * r));
  }
  expect_close(a.grad(), product(r, ops::transpose(bm.detach(), 0, 1), true), 1e-5, "da");
  expect_close(bm.grad(), product(ops::transpose(a.detach(), 0, 1), r, true), 1e-5, "db");
  // And within bf16's own error of the float32 product of the unrounded values.
  PrecisionGuard bf16(Precision::bf16);
  expect_close(matmul(a.detach(), bm.detach()), product(a.detach(), bm.detach(), false), 2e-2, "vs float32");
}

// An activation made in bfloat16 for its product (NOTE [ Norms made for products ] in
// autograd/fused/norms.h) multiplies as its float32 values would, and gets a bfloat16 gradient: the
// float32 one rounded (the same sums). The activations here are to(leaf, bf16), as a norm's output
// is made; a bfloat16 parameter is not the policy's (a forward error, as before).
TEST(Precision, ABfloat16ActivationMultipliesAsItsValuesAndGetsABfloat16Gradient) {
  const Tensor x0 = ops::to(ops::to(uniform({12, 48}, 1), DType::bf16), DType::f32);  // bf16 values
  const Tensor w0 = uniform({40, 48}, 2), b0 = uniform({40}, 3), r = uniform({12, 40}, 4);
  auto rounded = [](const Tensor& t) { return ops::to(ops::to(t, DType::bf16), DType::f32); };
  auto run = [&](bool as_bf16) {
    Tensor x = ops::clone(x0).requires_grad_();
    Tensor w = parameter(ops::clone(w0)), b = parameter(ops::clone(b0));
    PrecisionGuard bf16(Precision::bf16);
    Tensor y = linear(as_bf16 ? to(x, DType::bf16) : x, w, b);
    backward(sum(y * r));
    return std::vector<Tensor>{y, x.grad(), w.grad(), b.grad()};
  };
  const auto got = run(true), ref = run(false);
  EXPECT_EQ(got[0].dtype(), DType::f32);
  EXPECT_TRUE(same_values(got[0], ref[0]));
  EXPECT_TRUE(same_values(got[1], rounded(ref[1])));  // made in bf16, widened by to's backward
  EXPECT_TRUE(same_values(got[2], ref[2]));
  EXPECT_TRUE(same_values(got[3], ref[3]));
  // matmul, either operand; a broadcast operand's gradient summed over the batch, then rounded once.
  const Tensor a0 = uniform({2, 40, 12}, 8), m0 = ops::to(ops::to(uniform({12, 48}, 9), DType::bf16), DType::f32);
  auto run_mm = [&](bool as_bf16) {
    Tensor a = ops::clone(a0).requires_grad_(), m = ops::clone(m0).requires_grad_();
    PrecisionGuard bf16(Precision::bf16);
    Tensor y = matmul(a, as_bf16 ? to(m, DType::bf16) : m);  // (2, 40, 48)
    EXPECT_EQ(y.dtype(), DType::f32);
    backward(sum(y * y));
    return std::vector<Tensor>{y, a.grad(), m.grad()};
  };
  const auto mm = run_mm(true), mm_ref = run_mm(false);
  EXPECT_TRUE(same_values(mm[0], mm_ref[0]));
  EXPECT_TRUE(same_values(mm[1], mm_ref[1]));
  EXPECT_TRUE(same_values(mm[2], rounded(mm_ref[2])));
  PrecisionGuard bf16(Precision::bf16);
  EXPECT_EQ(matmul(ops::to(x0, DType::bf16), ops::to(ops::transpose(w0, 0, 1), DType::bf16)).dtype(), DType::bf16);
  EXPECT_THROW(linear(x0, parameter(ops::to(w0, DType::bf16)), Tensor()), std::invalid_argument);
}

TEST(Precision, Fp32AndFloat64AreUntouched) {
  Tensor x = uniform({6, 16}, 8), w = parameter(uniform({5, 16}, 9));
  const Tensor plain = linear(x, w, Tensor());
  EXPECT_EQ(autograd::product_precision(), Precision::fp32);
  {
    PrecisionGuard bf16(Precision::bf16);
    EXPECT_EQ(autograd::product_precision(), Precision::bf16);
    const Tensor rounded = linear(x, w, Tensor());
    EXPECT_FALSE(same_values(rounded, plain)) << "bf16 should round the operands";
    {
      PrecisionGuard fp32(Precision::fp32);  // nested: back to float32 products
      EXPECT_TRUE(same_values(linear(x, w, Tensor()), plain));
    }
    EXPECT_EQ(autograd::product_precision(), Precision::bf16);
    // float64 products are never rounded (the gradient checks run in float64).
    Tensor x64 = ops::to(x, DType::f64), w64 = ops::to(w.detach(), DType::f64);
    Tensor y64 = linear(x64, w64, Tensor());
    EXPECT_EQ(y64.dtype(), DType::f64);
    expect_close(y64, product(x64, ops::transpose(w64, 0, 1), false), 1e-12, "float64");
  }
  EXPECT_EQ(autograd::product_precision(), Precision::fp32);
  EXPECT_TRUE(same_values(linear(x, w, Tensor()), plain));
}

TEST(Precision, AWeightsCopyFollowsInPlaceUpdates) {
  Tensor x = uniform({4, 8}, 10), w = parameter(uniform({3, 8}, 11));
  PrecisionGuard bf16(Precision::bf16);
  const Tensor before = linear(x, w, Tensor());
  {
    // An optimizer's in-place step: the weight doubles (exact in bf16 too), its version moves on.
    NoGradGuard no_grad;
    backend_for(Device::cpu()).copy(ops::mul(w.detach(), 2.0), w);
    w.bump_version();
  }
  const Tensor after = linear(x, w, Tensor());
  expect_close(after, [&] {
    std::vector<double> v;
    for (int64_t i = 0; i < before.numel(); ++i) v.push_back(2 * read_element(before, i));
    return v;
  }(), 0, "after the update");
}

// Inference (grad mode off) makes the CPU copies one after the other in the guard's arena (NOTE
// [ Host arena ] in tensor/host_arena.h), with the values ops::to gives; a copy held past the guard
// keeps its memory.
TEST(Precision, InferenceCopiesLieSideBySide) {
  Tensor w1 = parameter(uniform({3, 8}, 12)), w2 = parameter(uniform({5, 8}, 13));
  Tensor kept;
  {
    PrecisionGuard bf16(Precision::bf16);
    NoGradGuard no_grad;
    const Tensor c1 = autograd::detail::product_operand(w1), c2 = autograd::detail::product_operand(w2);
    ASSERT_EQ(c1.dtype(), DType::bf16);
    EXPECT_TRUE(same_values(c1, ops::to(w1.detach(), DType::bf16)));
    EXPECT_TRUE(same_values(c2, ops::to(w2.detach(), DType::bf16)));
    const auto* first = static_cast<const std::byte*>(c1.raw_data());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % HostArena::kAlignment, 0u);
    EXPECT_EQ(static_cast<const std::byte*>(c2.raw_data()), first + HostArena::kAlignment);  // 48 bytes, rounded
    EXPECT_EQ(autograd::detail::product_operand(w1).raw_data(), c1.raw_data());  // made once
    kept = c2;
  }
  {
    PrecisionGuard bf16(Precision::bf16);
    NoGradGuard no_grad;
    (void)autograd::detail::product_operand(w1);  // a new guard, a new arena
  }
  EXPECT_TRUE(same_values(kept, ops::to(w2.detach(), DType::bf16)));
}

TEST(Precision, ChoosePrecisionFollowsTheDevice) {
  const Backend::Bf16Support support = backend_for(Device::cpu()).bf16_support();
  EXPECT_EQ(choose_precision("fp32", Device::cpu()).precision, Precision::fp32);
  const PrecisionChoice automatic = choose_precision("auto", Device::cpu());
  EXPECT_EQ(automatic.precision, support.native ? Precision::bf16 : Precision::fp32);
  EXPECT_NE(automatic.reason.find(support.what), std::string::npos) << automatic.reason;
  const PrecisionChoice bf16 = choose_precision("bf16", Device::cpu());
  EXPECT_EQ(bf16.precision, Precision::bf16);
  EXPECT_EQ(bf16.reason.find("slower") != std::string::npos, !support.native) << bf16.reason;
  try {
    (void)choose_precision("fp16", Device::cpu());
    FAIL() << "fp16 should be refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'fp16' is not one of fp32, bf16, auto"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mvgpt
