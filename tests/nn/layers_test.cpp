// Linear, Embedding, LayerNorm, RMSNorm, MLP, SwiGLU and Dropout against naive double loops, and
// their gradients against finite differences in float64.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include <mvgpt/autograd/gradcheck.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/nn/dropout.h>
#include <mvgpt/nn/embedding.h>
#include <mvgpt/nn/layer_norm.h>
#include <mvgpt/nn/linear.h>
#include <mvgpt/nn/mlp.h>
#include <mvgpt/nn/rms_norm.h>
#include "nn/test_util.h"

namespace mvgpt::nn {
namespace {

using testing::expect_close;
using testing::vals;

// y (N, out) = x (N, in) @ W^T + b in double.
std::vector<double> naive_linear(const std::vector<double>& x, const Tensor& w, const Tensor& b, int64_t n) {
  const int64_t out = w.size(0), in = w.size(1);
  std::vector<double> wv = vals(w), bv = b.defined() ? vals(b) : std::vector<double>(size_t(out), 0.0);
  std::vector<double> y(size_t(n * out));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = bv[size_t(o)];
      for (int64_t i = 0; i < in; ++i) s += x[size_t(r * in + i)] * wv[size_t(o * in + i)];
      y[size_t(r * out + o)] = s;
    }
  return y;
}

double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

// Runs gradcheck on fn with x and every parameter of m as inputs (the layer reads its own
// parameters, which gradcheck perturbs in place).
void check_layer_gradients(const std::string& name, Module& m, const Tensor& x,
                           const std::function<Tensor(const Tensor&)>& fn) {
  std::vector<Tensor> inputs{x};
  for (const Tensor& p : m.parameters()) inputs.push_back(p);
  auto result = autograd::gradcheck(name, [&](const autograd::Inputs& in) { return fn(in[0]); }, inputs);
  EXPECT_TRUE(result.ok) << result.message;
  EXPECT_GT(result.checked, 0);
}

TEST(Linear, MatchesNaiveLoopsOnStridedInput) {
  Generator gen(3);
  Linear lin(5, 3, true, {.gen = &gen});
  EXPECT_EQ(lin.weight.shape(), (Shape{3, 5}));
  EXPECT_EQ(lin.bias.shape(), Shape{3});
  { NoGradGuard no_grad; ops::copy_(lin.bias, testing::randn({3}, 9)); }  // non-zero bias
  // (2, 4, 5) made by transposing a contiguous (2, 5, 4): non-contiguous.
  Tensor x = ops::transpose(testing::randn({2, 5, 4}, 7), 1, 2);
  ASSERT_FALSE(x.is_contiguous());
  Tensor y = lin(x);
  EXPECT_EQ(y.shape(), (Shape{2, 4, 3}));
  expect_close(y, naive_linear(vals(x), lin.weight, lin.bias, 8), 1e-5);

  Linear nobias(5, 2, false);
  EXPECT_FALSE(nobias.bias.defined());
  EXPECT_EQ(nobias.parameters().size(), 1u);
  Tensor x1 = testing::randn({5}, 1);  // a single vector
  expect_close(nobias(x1), naive_linear(vals(x1), nobias.weight, Tensor(), 1), 1e-5);
  EXPECT_EQ(lin(ops::zeros({0, 5})).shape(), (Shape{0, 3}));  // zero rows
  EXPECT_THROW(lin(ops::zeros({2, 4})), std::invalid_argument);
}

TEST(Linear, InitIsNormalWithStd002AndSeeded) {
  Generator g1(42), g2(42);
  Linear a(64, 64, true, {.gen = &g1}), b(64, 64, true, {.gen = &g2});
  EXPECT_EQ(vals(a.weight), vals(b.weight));  // same seed, same weights
  double sum = 0, sq = 0;
  for (double v : vals(a.weight)) sum += v, sq += v * v;
  const double n = 64 * 64, mean = sum / n, std = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0, 0.002);
  EXPECT_NEAR(std, 0.02, 0.001);
  for (double v : vals(a.bias)) EXPECT_EQ(v, 0);
}

TEST(Linear, Gradients) {
  Linear lin(3, 2, true, {.dtype = DType::f64});
  { NoGradGuard no_grad; ops::copy_(lin.bias, testing::randn({2}, 2)); }
  Tensor x = testing::randn({2, 2, 3}, 4, DType::f64);
  check_layer_gradients("Linear", lin, x, [&](const Tensor& in) { return lin(in); });
}

TEST(Embedding, LooksUpRows) {
  Embedding emb(6, 3);
  EXPECT_EQ(emb.weight.shape(), (Shape{6, 3}));
  Tensor ids = Tensor::from_vector<int64_t>({5, 0, 2, 2}, {2, 2});
  Tensor y = emb(ids);
  EXPECT_EQ(y.shape(), (Shape{2, 2, 3}));
  std::vector<double> w = vals(emb.weight), want;
  for (int64_t id : {5, 0, 2, 2})
    for (int c = 0; c < 3; ++c) want.push_back(w[size_t(id * 3 + c)]);
  expect_close(y, want, 0);
  EXPECT_THROW(emb(Tensor::from_vector<int64_t>({6})), std::invalid_argument);
}

TEST(Embedding, Gradients) {
  Embedding emb(4, 3, {.dtype = DType::f64});
  Tensor ids = Tensor::from_vector<int64_t>({1, 3, 1}, {3});  // a repeated id accumulates
  std::vector<Tensor> inputs{emb.weight};
  auto r = autograd::gradcheck("Embedding", [&](const autograd::Inputs&) { return emb(ids); }, inputs);
  EXPECT_TRUE(r.ok) << r.message;
}

std::vector<double> naive_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  std::vector<double> xv = vals(x), out(xv.size());
  const int64_t c = x.size(-1), rows = x.numel() / c;
  std::vector<double> wv = w.defined() ? vals(w) : std::vector<double>(size_t(c), 1.0);
  std::vector<double> bv = b.defined() ? vals(b) : std::vector<double>(size_t(c), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < c; ++i) mean += xv[size_t(r * c + i)];
    mean /= double(c);
    for (int64_t i = 0; i < c; ++i) var += std::pow(xv[size_t(r * c + i)] - mean, 2);
    var /= double(c);
    for (int64_t i = 0; i < c; ++i)
      out[size_t(r * c + i)] = (xv[size_t(r * c + i)] - mean) / std::sqrt(var + eps) * wv[size_t(i)] + bv[size_t(i)];
  }
  return out;
}

TEST(LayerNorm, MatchesNaiveWithAndWithoutAffine) {
  LayerNorm ln(6);
  EXPECT_EQ(vals(ln.weight), std::vector<double>(6, 1.0));
  EXPECT_EQ(vals(ln.bias), std::vector<double>(6, 0.0));
  { NoGradGuard no_grad; ops::copy_(ln.weight, testing::randn({6}, 1)); }
  { NoGradGuard no_grad; ops::copy_(ln.bias, testing::randn({6}, 2)); }
  Tensor x = ops::narrow(testing::randn({3, 2, 8}, 3), 2, 1, 6);  // sliced: non-contiguous rows
  expect_close(ln(x), naive_layer_norm(x, ln.weight, ln.bias, 1e-5), 1e-5);

  LayerNorm nobias(6, 1e-3, true, false);
  EXPECT_FALSE(nobias.bias.defined());
  expect_close(nobias(x), naive_layer_norm(x, nobias.weight, Tensor(), 1e-3), 1e-5);
  LayerNorm plain(6, 1e-5, false);
  EXPECT_TRUE(plain.parameters().empty());
  expect_close(plain(x), naive_layer_norm(x, Tensor(), Tensor(), 1e-5), 1e-5);
  EXPECT_THROW(ln(ops::zeros({2, 5})), std::invalid_argument);
}

TEST(LayerNorm, Gradients) {
  LayerNorm ln(4, 1e-5, true, true, {.dtype = DType::f64});
  { NoGradGuard no_grad; ops::copy_(ln.weight, testing::randn({4}, 5)); }
  { NoGradGuard no_grad; ops::copy_(ln.bias, testing::randn({4}, 6)); }
  check_layer_gradients("LayerNorm", ln, testing::randn({3, 4}, 7, DType::f64), [&](const Tensor& in) { return ln(in); });
}

TEST(RMSNorm, MatchesNaive) {
  RMSNorm rn(5, 1e-6);
  { NoGradGuard no_grad; ops::copy_(rn.weight, testing::randn({5}, 1)); }
  Tensor x = ops::transpose(testing::randn({5, 4}, 2), 0, 1);  // (4, 5) transposed
  std::vector<double> xv = vals(x), w = vals(rn.weight), want(xv.size());
  for (int r = 0; r < 4; ++r) {
    double ms = 0;
    for (int i = 0; i < 5; ++i) ms += xv[size_t(r * 5 + i)] * xv[size_t(r * 5 + i)];
    double rstd = 1 / std::sqrt(ms / 5 + 1e-6);
    for (int i = 0; i < 5; ++i) want[size_t(r * 5 + i)] = xv[size_t(r * 5 + i)] * rstd * w[size_t(i)];
  }
  expect_close(rn(x), want, 1e-5);
}

TEST(RMSNorm, Gradients) {
  RMSNorm rn(4, 1e-6, true, {.dtype = DType::f64});
  { NoGradGuard no_grad; ops::copy_(rn.weight, testing::randn({4}, 5)); }
  check_layer_gradients("RMSNorm", rn, testing::randn({2, 4}, 8, DType::f64), [&](const Tensor& in) { return rn(in); });
}

TEST(MLP, IsGeluTanhBetweenTwoLinears) {
  Generator gen(11);
  MLP mlp(4, 0, true, {.gen = &gen, .std = 0.5});
  EXPECT_EQ(mlp.c_fc->weight.shape(), (Shape{16, 4}));
  EXPECT_EQ(mlp.c_proj->weight.shape(), (Shape{4, 16}));
  { NoGradGuard no_grad; ops::copy_(mlp.c_fc->bias, testing::randn({16}, 1)); }
  Tensor x = testing::randn({2, 3, 4}, 12);
  std::vector<double> h = naive_linear(vals(x), mlp.c_fc->weight, mlp.c_fc->bias, 6);
  for (double& v : h) v = gelu_tanh(v);
  expect_close(mlp(x), naive_linear(h, mlp.c_proj->weight, mlp.c_proj->bias, 6), 1e-5);
  std::vector<std::string> names;
  for (const auto& [n, t] : mlp.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"c_fc.weight", "c_fc.bias", "c_proj.weight", "c_proj.bias"}));
}

TEST(MLP, Gradients) {
  MLP mlp(2, 3, true, {.dtype = DType::f64, .std = 0.7});
  check_layer_gradients("MLP", mlp, testing::randn({2, 2}, 13, DType::f64), [&](const Tensor& in) { return mlp(in); });
}

TEST(SwiGLU, IsSiluGateTimesUp) {
  Generator gen(12);
  SwiGLU ff(4, 6, false, {.gen = &gen, .std = 0.5});
  EXPECT_EQ(ff.w1->weight.shape(), (Shape{6, 4}));
  EXPECT_EQ(ff.w3->weight.shape(), (Shape{6, 4}));
  EXPECT_EQ(ff.w2->weight.shape(), (Shape{4, 6}));
  EXPECT_FALSE(ff.w1->bias.defined());
  Tensor x = testing::randn({5, 4}, 14);
  std::vector<double> gate = naive_linear(vals(x), ff.w1->weight, Tensor(), 5);
  std::vector<double> up = naive_linear(vals(x), ff.w3->weight, Tensor(), 5);
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
  expect_close(ff(x), naive_linear(gate, ff.w2->weight, Tensor(), 5), 1e-5);
}

TEST(SwiGLU, Gradients) {
  SwiGLU ff(2, 3, true, {.dtype = DType::f64, .std = 0.7});
  check_layer_gradients("SwiGLU", ff, testing::randn({2, 2}, 15, DType::f64), [&](const Tensor& in) { return ff(in); });
}

TEST(Dropout, TrainOnlyScaledAndSeeded) {
  Generator g1(5), g2(5);
  Dropout d1(0.25, &g1), d2(0.25, &g2);
  Tensor x = ops::ones({4000});
  Tensor y1 = d1(x), y2 = d2(x);
  EXPECT_EQ(vals(y1), vals(y2));  // same seed, same mask
  int zeros = 0;
  for (double v : vals(y1)) {
    if (v == 0) ++zeros;
    else EXPECT_NEAR(v, 1 / 0.75, 1e-6);
  }
  EXPECT_NEAR(zeros / 4000.0, 0.25, 0.03);
  EXPECT_NE(vals(d1(x)), vals(y1));  // the stream advanced
  d1.eval();
  EXPECT_TRUE(d1(x).same(x));  // eval: identity
  EXPECT_TRUE(Dropout(0.0)(x).same(x));
  EXPECT_THROW(Dropout(1.0), std::invalid_argument);
  EXPECT_THROW(Dropout(-0.1), std::invalid_argument);
}

TEST(Dropout, Gradients) {
  Generator gen(9);
  Dropout d(0.5, &gen);
  std::vector<Tensor> inputs{testing::randn({3, 4}, 16, DType::f64)};
  // Each evaluation restarts the stream, so finite differences see the same mask as backprop.
  auto r = autograd::gradcheck("Dropout", [&](const autograd::Inputs& in) {
    gen = Generator(9);
    return d(in[0]);
  }, inputs);
  EXPECT_TRUE(r.ok) << r.message;
}

}  // namespace
}  // namespace mvgpt::nn
