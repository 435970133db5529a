// The harness itself: it must catch wrong gradients and report where.
#include <gtest/gtest.h>

#include <mvgpt/autograd/function.h>
#include <mvgpt/autograd/gradcheck.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/backends/ops.h>

namespace mvgpt {
namespace {

using autograd::gradcheck;
using autograd::Inputs;

// x^3 with a deliberately wrong backward (2x instead of 3x^2) at one element.
Tensor broken_cube(const Tensor& x) {
  const autograd::InternalOps internal;  // a differentiable op of its own: it records the node
  Tensor y = ops::pow(x, 3);
  if (!autograd::needs_grad(x)) return y;
  return autograd::record("broken_cube", std::move(y), {autograd::edge_to(x)},
                          [sx = autograd::SavedTensor(x)](const Tensor& g) -> autograd::Grads {
                            Tensor x = sx.unpack("broken_cube");
                            Tensor d = ops::mul(ops::square(x), 3.0);
                            write_element(d, 1, 2 * read_element(x, 1));
                            return {ops::mul(g, d)};
                          });
}

Tensor f64(std::vector<double> v, Shape s = {}) { return Tensor::from_vector(v, s); }

TEST(Gradcheck, PassesACorrectGradient) {
  auto r = gradcheck("cube", [](const Inputs& x) { return pow(x[0], 3.0); }, {f64({0.5, 1.5, -2})});
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.checked, 9);
}

TEST(Gradcheck, ReportsTheOpTheInputAndTheElementOfAWrongGradient) {
  auto r = gradcheck("broken_cube", [](const Inputs& x) { return broken_cube(x[0]); }, {f64({0.5, 1.5, -2})});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.mismatches, 1);
  EXPECT_NE(r.message.find("broken_cube"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("output[1] / d input 0[1]"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("backprop 3"), std::string::npos) << r.message;        // 2 * 1.5
  EXPECT_NE(r.message.find("finite difference 6.7"), std::string::npos) << r.message;  // 3 * 1.5^2
}

TEST(Gradcheck, CatchesAGradientThatIsMissing) {
  // detach hides x from backprop, but the finite differences see it.
  auto r = gradcheck("detached", [](const Inputs& x) { return x[0] * detach(x[0]); }, {f64({1, 2})});
  EXPECT_FALSE(r.ok);
}

TEST(Gradcheck, RejectsInputsItCannotCheck) {
  auto fn = [](const Inputs& x) { return x[0] * 2.0; };
  EXPECT_FALSE(gradcheck("f32", fn, {Tensor::from_vector<float>({1, 2})}).ok);
  EXPECT_FALSE(gradcheck("none", fn, {Tensor::from_vector<int64_t>({1, 2})}).ok);
  EXPECT_FALSE(gradcheck("constant output", [](const Inputs&) { return f64({1}); }, {f64({1})}).ok);
  auto throws = gradcheck("throws", [](const Inputs& x) { return reshape(x[0], {3}); }, {f64({1, 2})});
  EXPECT_FALSE(throws.ok);
  EXPECT_NE(throws.message.find("threw"), std::string::npos) << throws.message;
}

TEST(Gradcheck, LeavesInputsAsTheyWere) {
  Tensor x = f64({0.25, 0.5});
  auto r = gradcheck("exp", [](const Inputs& in) { return exp(in[0]); }, {x});
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_FALSE(x.requires_grad());
  EXPECT_EQ(x.to_vector<double>(), (std::vector<double>{0.25, 0.5}));
}

TEST(Gradcheck, ParametersKeepRequiringGrad) {
  Tensor w = parameter(f64({0.5, 1.5}));
  EXPECT_TRUE(gradcheck("square", [](const Inputs& in) { return square(in[0]); }, {w}).ok);
  EXPECT_TRUE(w.requires_grad());
  EXPECT_FALSE(gradcheck("throws", [](const Inputs& in) { return reshape(in[0], {3}); }, {w}).ok);
  EXPECT_TRUE(w.requires_grad());
  EXPECT_FALSE(w.grad().defined());  // gradcheck does not accumulate into .grad
}

TEST(Gradcheck, NonContiguousInputMakersGiveViews) {
  Tensor t = autograd::gc::transposed({3, 4}).make(1);
  EXPECT_EQ(t.shape(), (Shape{3, 4}));
  EXPECT_FALSE(t.is_contiguous());
  Tensor s = autograd::gc::sliced({2, 3}).make(1);
  EXPECT_EQ(s.shape(), (Shape{2, 3}));
  EXPECT_FALSE(s.is_contiguous());
  Tensor d = autograd::gc::distinct({7}).make(1);
  auto v = d.to_vector<double>();
  std::sort(v.begin(), v.end());
  for (size_t i = 1; i < v.size(); ++i) EXPECT_NEAR(v[i] - v[i - 1], 0.1, 1e-12);
}

}  // namespace
}  // namespace mvgpt
