// Whole small networks through gradcheck, and fused ops against the same math built from primitives.
#include <gtest/gtest.h>

#include <cmath>

#include <mvgpt/autograd/gradcheck.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/fused/attention.h>
#include <mvgpt/fused/cross_entropy.h>
#include <mvgpt/fused/norms.h>

namespace mvgpt {
namespace {

using autograd::gradcheck;
using autograd::Inputs;
namespace gc = autograd::gc;

Inputs make(const std::vector<autograd::InputSpec>& specs) {
  Inputs in;
  for (size_t i = 0; i < specs.size(); ++i) in.push_back(specs[i].make(100 + i));
  return in;
}

TEST(Composite, TwoLayerMlpWithCrossEntropy) {
  // x (4, 3) -> (4, 5) -> gelu -> (4, 6) logits; one target ignored.
  Inputs in = make({gc::input({4, 3}), gc::input({3, 5}), gc::input({5}), gc::transposed({5, 6}), gc::input({6})});
  Tensor targets = Tensor::from_vector<int64_t>({2, 5, -100, 0});
  auto mlp = [targets](const Inputs& p) {
    Tensor h = gelu(matmul(p[0], p[1]) + p[2]);
    Tensor logits = matmul(h, p[3]) + p[4];
    return cross_entropy(logits, targets);
  };
  auto r = gradcheck("mlp", mlp, in);
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.checked, 4 * 3 + 3 * 5 + 5 + 5 * 6 + 6);
}

// Causal attention from primitives: q (B, H, T, D), k and v (B, H, T, D).
Tensor naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  const int64_t T = q.size(-2);
  Tensor scores = matmul(q, transpose(k, -1, -2)) * scale;  // (B, H, T, T)
  Tensor row = ops::reshape(ops::arange(0, double(T), 1, DType::i64), {T, 1});
  Tensor col = ops::reshape(ops::arange(0, double(T), 1, DType::i64), {1, T});
  Tensor future = ops::gt(col, row);  // (T, T): key after query
  return matmul(softmax(masked_fill(scores, future, -INFINITY), -1), v);
}

TEST(Composite, CausalAttentionFromPrimitives) {
  Inputs in = make({gc::input({1, 2, 3, 4}), gc::input({1, 2, 3, 4}), gc::transposed({1, 2, 3, 4})});
  auto r = gradcheck("naive attention", [](const Inputs& x) { return naive_attention(x[0], x[1], x[2], 0.5); }, in);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Composite, FusedAttentionAndLayerNormInAResidualBlock) {
  // x (1, 3, 4) -> layer_norm -> heads (1, 2, 3, 2) -> attention -> back, plus the residual.
  Inputs in = make({gc::input({1, 3, 4}), gc::input({4}), gc::input({4})});
  auto block = [](const Inputs& p) {
    Tensor h = layer_norm(p[0], p[1], p[2], 1e-5);
    Tensor heads = transpose(reshape(h, {1, 3, 2, 2}), 1, 2);  // (B, H, T, D)
    Tensor a = attention(heads, heads * 0.5, heads, 0.7, true);
    return p[0] + reshape(transpose(a, 1, 2), {1, 3, 4});
  };
  auto r = gradcheck("block", block, in);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Composite, FusedAttentionMatchesPrimitivesWithGradients) {
  Generator gen(11);
  auto leaf = [&](Shape s) { return parameter(ops::randn(s, DType::f64, Device::cpu(), &gen)); };
  Tensor q = leaf({2, 2, 5, 3}), k = leaf({2, 2, 5, 3}), v = leaf({2, 2, 5, 3});
  Tensor w = ops::randn({2, 2, 5, 3}, DType::f64, Device::cpu(), &gen);
  auto grads = [&](const Tensor& out) {
    std::vector<Tensor> g = autograd::grad(sum(out * w), {q, k, v});
    return std::vector<std::vector<double>>{g[0].to_vector<double>(), g[1].to_vector<double>(), g[2].to_vector<double>()};
  };
  Tensor fused = attention(q, k, v, 0.4, true), naive = naive_attention(q, k, v, 0.4);
  auto a = fused.to_vector<double>(), b = naive.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-12) << i;
  auto ga = grads(fused), gb = grads(naive);
  for (size_t t = 0; t < 3; ++t)
    for (size_t i = 0; i < ga[t].size(); ++i) ASSERT_NEAR(ga[t][i], gb[t][i], 1e-12) << "input " << t << " at " << i;
}

TEST(Composite, LayerNormMatchesPrimitives) {
  Generator gen(5);
  Tensor x = parameter(ops::randn({3, 6}, DType::f64, Device::cpu(), &gen));
  Tensor w = parameter(ops::randn({6}, DType::f64, Device::cpu(), &gen));
  Tensor b = parameter(ops::randn({6}, DType::f64, Device::cpu(), &gen));
  Tensor dy = ops::randn({3, 6}, DType::f64, Device::cpu(), &gen);
  auto naive = [&] {
    Tensor mu = mean(x, {-1}, true);
    Tensor xc = x - mu;
    Tensor var = mean(square(xc), {-1}, true);
    return xc * rsqrt(var + 1e-5) * w + b;
  };
  auto g1 = autograd::grad(sum(layer_norm(x, w, b, 1e-5) * dy), {x, w, b});
  auto g2 = autograd::grad(sum(naive() * dy), {x, w, b});
  for (size_t t = 0; t < 3; ++t) {
    auto a = g1[t].to_vector<double>(), c = g2[t].to_vector<double>();
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], c[i], 1e-10) << "input " << t << " at " << i;
  }
}

TEST(Composite, CrossEntropyMatchesLogSoftmaxAndReductionsAgree) {
  Generator gen(9);
  Tensor logits = parameter(ops::randn({4, 5}, DType::f64, Device::cpu(), &gen));
  Tensor targets = Tensor::from_vector<int64_t>({1, -100, 4, 0});
  Tensor fused = cross_entropy(logits, targets);
  // -mean over counted rows of log_softmax at the target.
  Tensor ls = log_softmax(logits, -1);
  double want = -(read_element(ls, 1) + read_element(ls, 14) + read_element(ls, 15)) / 3.0;
  EXPECT_NEAR(fused.item<double>(), want, 1e-12);
  Tensor none = cross_entropy(logits, targets, -100, Reduction::none);
  EXPECT_EQ(none.shape(), (Shape{4}));
  EXPECT_EQ(read_element(none, 1), 0.0);
  EXPECT_NEAR(cross_entropy(logits, targets, -100, Reduction::sum).item<double>(), 3 * want, 1e-12);
  // All ignored: NaN, as PyTorch.
  Tensor all_ignored = Tensor::from_vector<int64_t>({-100, -100, -100, -100});
  EXPECT_TRUE(std::isnan(cross_entropy(logits, all_ignored).item<double>()));
  EXPECT_THROW(cross_entropy(logits, Tensor::from_vector<int64_t>({1, 2})), std::invalid_argument);
}

TEST(Composite, DropoutScalesKeptElementsAndIsTheIdentityInEval) {
  Tensor x = parameter(ops::ones({1000}, DType::f32));
  Generator gen(1);
  Tensor y = dropout(x, 0.25, &gen, true);
  auto v = y.to_vector<float>();
  int kept = 0;
  for (float e : v) {
    ASSERT_TRUE(e == 0.0f || std::abs(e - 1.0f / 0.75f) < 1e-6f) << e;
    kept += e != 0.0f;
  }
  EXPECT_NEAR(kept, 750, 60);
  backward(sum(y));
  EXPECT_EQ(x.grad().to_vector<float>(), v);  // the gradient is the same mask and scale
  EXPECT_TRUE(dropout(x, 0.5, nullptr, false).same(x));
  EXPECT_TRUE(dropout(x, 0.0, nullptr, true).same(x));
  EXPECT_EQ(sum(dropout(x, 1.0, nullptr, true)).item<float>(), 0.0f);
  EXPECT_THROW(dropout(x, 1.5), std::invalid_argument);
}

TEST(Composite, SplitChunkAndCatRoundTrip) {
  Tensor x = parameter(ops::arange(0, 10, 1, DType::f32));
  auto parts = chunk(x, 3, 0);  // 4, 4, 2
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].shape(), (Shape{2}));
  EXPECT_NE(parts[0].grad_fn(), parts[1].grad_fn());
  Tensor back = cat({parts[2], parts[0], parts[1]}, 0);
  backward(sum(back * back));
  auto g = x.grad().to_vector<float>();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(g[size_t(i)], 2.0f * float(i));
  EXPECT_THROW(split(x, {3, 3}, 0), std::invalid_argument);
  EXPECT_THROW(chunk(x, 0, 0), std::invalid_argument);
}

TEST(Composite, MixedPrecisionCastsGradientsBack) {
  Tensor w = parameter(Tensor::from_vector<float>({1, 2, 3}));
  Tensor y = to(w, DType::bf16);
  EXPECT_EQ(y.dtype(), DType::bf16);
  backward(sum(to(y * 2.0, DType::f32)));
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{2, 2, 2}));
}

}  // namespace
}  // namespace mvgpt
