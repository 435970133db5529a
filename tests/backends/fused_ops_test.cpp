// The ops layer of the fused kernels: argument checks and their messages, dtype handling (bfloat16
// widened and cast back), non-contiguous inputs, version bumps.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <mvgpt/backends/ops.h>
#include "fused_test_util.h"

namespace mvgpt {
namespace {

using namespace fused_test;
using Vec = std::vector<double>;

// Expects `f` to throw std::invalid_argument whose message contains `needle`.
template <typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning \"" << needle << "\"";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

// A packed copy of any view, made element by element (independent of the ops under test).
Tensor packed(const Tensor& t, DType dt) {
  Tensor c = Tensor::empty(t.shape(), dt);
  for (int64_t i = 0; i < t.numel(); ++i) write_element(c, i, read_element(t, i));
  return c;
}

TEST(FusedOps, LayerNormAcceptsAnyLayoutAndKeepsBatchShape) {
  // x (B, T, C) as a transposed view of a (B, C, T) buffer.
  Tensor buf = random_tensor({2, 8, 5}, DType::f32, 1);
  Tensor x = buf.as_strided({2, 5, 8}, {40, 1, 5}, 0);
  Tensor w = random_tensor({8}, DType::f32, 2), b = random_tensor({8}, DType::f32, 3);
  ops::NormResult got = ops::layer_norm(x, w, b, 1e-5);
  ops::NormResult want = ops::layer_norm(packed(x, DType::f32), w, b, 1e-5);
  EXPECT_EQ(got.y.shape(), (Shape{2, 5, 8}));
  EXPECT_EQ(got.mean.shape(), (Shape{2, 5}));
  EXPECT_EQ(values(got.y), values(want.y));
  auto grads = ops::layer_norm_backward(got.y, x, w, b, got);
  ASSERT_EQ(grads.size(), 3u);
  EXPECT_EQ(grads[0].shape(), x.shape());
  EXPECT_EQ(grads[1].shape(), (Shape{8}));
}

TEST(FusedOps, Bfloat16IsWidenedAndCastBack) {
  Tensor x = packed(random_tensor({3, 16}, DType::f32, 4), DType::bf16);
  Tensor xf = packed(x, DType::f32);  // the same values in float32
  Tensor w = random_tensor({16}, DType::f32, 5);
  ops::NormResult r = ops::layer_norm(x, w, Tensor(), 1e-5);
  EXPECT_EQ(r.y.dtype(), DType::bf16);
  EXPECT_EQ(r.rstd.dtype(), DType::f32);
  EXPECT_TRUE(all_close(r.y, ops::layer_norm(xf, w, Tensor(), 1e-5).y, 2e-2, 1e-2));
  auto g = ops::layer_norm_backward(r.y, x, w, Tensor(), r);
  EXPECT_EQ(g[0].dtype(), DType::bf16);
  EXPECT_EQ(g[1].dtype(), DType::f32);
  EXPECT_FALSE(g[2].defined());

  Tensor q = packed(random_tensor({1, 2, 3, 4}, DType::f32, 6), DType::bf16);
  Tensor pos = Tensor::from_vector(std::vector<int64_t>{0, 1, 2});
  Tensor rq = ops::rope(q, pos);
  EXPECT_EQ(rq.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(rq, ops::rope(packed(q, DType::f32), pos), 2e-2, 1e-2));
  EXPECT_EQ(ops::rms_norm(x, Tensor(), 1e-6).y.dtype(), DType::bf16);
  EXPECT_EQ(ops::attention(q, q, q, 0.5, true).out.dtype(), DType::bf16);
}

TEST(FusedOps, NormErrors) {
  Tensor x = random_tensor({2, 4}, DType::f32, 7);
  expect_error([&] { ops::layer_norm(x, random_tensor({5}, DType::f32, 1), Tensor(), 1e-5); }, "weight must have shape [4], found [5]");
  expect_error([&] { ops::layer_norm(Tensor::from_vector(std::vector<int64_t>{1, 2}), Tensor(), Tensor(), 1e-5); },
               "layer_norm: x must be floating point, found int64");
  expect_error([&] { ops::rms_norm(x, Tensor(), -1); }, "rms_norm: eps must be >= 0");
  ops::NormResult r = ops::layer_norm(x, Tensor(), Tensor(), 1e-5);
  expect_error([&] { ops::layer_norm_backward(random_tensor({2, 3}, DType::f32, 8), x, Tensor(), Tensor(), r); },
               "layer_norm_backward: dy must have shape [2, 4], found [2, 3]");
  expect_error([&] { ops::rms_norm_backward(x, x, Tensor(), ops::NormResult{}); }, "rms_norm_backward: rstd is undefined");
}

TEST(FusedOps, RopeChecksAndPerSequencePositions) {
  Tensor x = random_tensor({2, 2, 3, 8}, DType::f32, 9);
  expect_error([&] { ops::rope(random_tensor({2, 3, 7}, DType::f32, 1), Tensor::from_vector(std::vector<int64_t>{0, 1, 2})); },
               "rope: head size 7 is odd");
  expect_error([&] { ops::rope(x, Tensor::from_vector(std::vector<float>{0, 1, 2})); },
               "rope: positions must be int32 or int64, found float32");
  expect_error([&] { ops::rope(x, Tensor::from_vector(std::vector<int64_t>{0, 1})); },
               "positions must have shape [3] or [2, 3] for x of shape [2, 2, 3, 8], found [2]");
  Tensor p012 = Tensor::from_vector(std::vector<int64_t>{0, 1, 2});
  expect_error([&] { ops::rope(x, p012, 10000, RopeLayout::split_half, false, 0.0); },
               "rope: position_scale must be finite and > 0");
  expect_error([&] { ops::rope(x, p012, 10000, RopeLayout::split_half, false, std::nan("")); },
               "position_scale must be finite");
  // Per-sequence positions (B, T) equal running each sequence with its own (T) positions.
  Tensor pos = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 10, 11, 12}, {2, 3});
  Vec both = values(ops::rope(x, pos));
  for (int64_t b = 0; b < 2; ++b) {
    Tensor xb = x.as_strided({1, 2, 3, 8}, {48, 24, 8, 1}, b * 48);
    Vec one = values(ops::rope(xb, Tensor::from_vector(std::vector<int64_t>{10 * b, 10 * b + 1, 10 * b + 2})));
    EXPECT_EQ(Vec(both.begin() + b * 48, both.begin() + (b + 1) * 48), one);
  }
  // A transposed x (stride on D not 1) is copied first and gives the same result.
  Tensor buf = random_tensor({1, 2, 8, 3}, DType::f32, 10);
  Tensor xt = buf.as_strided({1, 2, 3, 8}, {48, 24, 1, 3}, 0);
  Tensor p3 = Tensor::from_vector(std::vector<int32_t>{4, 5, 6});
  EXPECT_EQ(values(ops::rope(xt, p3)), values(ops::rope(packed(xt, DType::f32), p3)));
}

TEST(FusedOps, AttentionChecks) {
  Tensor q = random_tensor({1, 4, 3, 8}, DType::f32, 11), k = random_tensor({1, 3, 5, 8}, DType::f32, 12);
  expect_error([&] { ops::attention(q, k, k, 1, true); }, "q has 4 heads, not a multiple of the 3 kv heads");
  Tensor k2 = random_tensor({1, 2, 5, 8}, DType::f32, 13);
  expect_error([&] { ops::attention(q, k2, random_tensor({1, 2, 4, 8}, DType::f32, 1), 1, true); },
               "v (same shape as k) must have shape [1, 2, 5, 8], found [1, 2, 4, 8]");
  expect_error([&] { ops::attention(q, random_tensor({1, 2, 5, 6}, DType::f32, 1), k2, 1, true); }, "k must be");
  expect_error([&] { ops::attention(q, packed(k2, DType::f64), packed(k2, DType::f64), 1, true); },
               "k is float64 but q is float32");
  expect_error([&] { ops::attention(random_tensor({1, 2, 6, 8}, DType::f32, 1), k2, k2, 1, true); },
               "found Tq 6 > Tk 5");
  expect_error([&] { ops::attention(random_tensor({4, 3, 8}, DType::f32, 1), k2, k2, 1, true); },
               "q must be (B, heads, T, D)");
  // GQA through the ops layer: Hkv = 2 equals repeating each kv head twice.
  ops::AttentionResult r = ops::attention(q, k2, k2, 0.3, true);
  Tensor rep = Tensor::empty({1, 4, 5, 8}, DType::f32);
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < 40; ++i) write_element(rep, h * 40 + i, read_element(k2, (h / 2) * 40 + i));
  EXPECT_TRUE(all_close(r.out, ops::attention(q, rep, rep, 0.3, true).out, 1e-6));
  auto g = ops::attention_backward(r.out, q, k2, k2, r, 0.3, true);
  EXPECT_EQ(g[1].shape(), k2.shape());
  expect_error([&] { ops::attention_backward(k2, q, k2, k2, r, 0.3, true); }, "dout must have shape [1, 4, 3, 8]");
}

TEST(FusedOps, AttentionOnStridedAndExpandedViews) {
  // k expanded over T (stride 0 rows) must be copied, not read with overlapping rows.
  Tensor q = random_tensor({1, 1, 3, 4}, DType::f64, 14), row = random_tensor({1, 1, 1, 4}, DType::f64, 15);
  Tensor kx = row.as_strided({1, 1, 5, 4}, {4, 4, 0, 1}, 0);
  ops::AttentionResult a = ops::attention(q, kx, kx, 1, false);
  ops::AttentionResult b = ops::attention(q, packed(kx, DType::f64), packed(kx, DType::f64), 1, false);
  EXPECT_TRUE(all_close(a.out, b.out, 1e-14));
  EXPECT_TRUE(all_close(a.lse, b.lse, 1e-14));
}

TEST(FusedOps, CrossEntropyNamesBadTargets) {
  Tensor logits = random_tensor({3, 10}, DType::f32, 16);
  expect_error([&] { ops::cross_entropy(logits, Tensor::from_vector(std::vector<int64_t>{1, 12, 0})); },
               "cross_entropy: target 12 at row 1 is out of range for 10 classes");
  expect_error([&] { ops::cross_entropy(logits, Tensor::from_vector(std::vector<int32_t>{1, -1, 0})); }, "target -1");
  expect_error([&] { ops::cross_entropy(logits, Tensor::from_vector(std::vector<float>{1, 1, 0})); },
               "targets must be int32 or int64, found float32");
  expect_error([&] { ops::cross_entropy(logits, Tensor::from_vector(std::vector<int64_t>{1, 1})); },
               "targets must have shape [3], found [2]");
  // ignore_index rows pass the check and give zero loss and zero gradient.
  Tensor t = Tensor::from_vector(std::vector<int64_t>{1, -100, 9});
  ops::CrossEntropyResult r = ops::cross_entropy(logits, t);
  EXPECT_EQ(values(r.losses)[1], 0.0);
  Tensor d = ops::cross_entropy_backward(Tensor::from_vector(std::vector<float>{1, 1, 1}), logits, t, r);
  for (int64_t j = 0; j < 10; ++j) EXPECT_EQ(read_element(d, 10 + j), 0.0);
  expect_error([&] { ops::cross_entropy(logits, t, 5); }, "target -100 at row 1");
}

TEST(FusedOps, AdamWChecksAndBumpsVersions) {
  Tensor p = random_tensor({4}, DType::f32, 17), g = random_tensor({4}, DType::f32, 18);
  Tensor m = random_tensor({4}, DType::f32, 19, 0, 0), v = random_tensor({4}, DType::f32, 20, 0, 0);
  const uint64_t pv = p.version(), mv = m.version(), vv = v.version();
  ops::adamw_step_(p, g, m, v, AdamWParams{});
  EXPECT_GT(p.version(), pv);
  EXPECT_GT(m.version(), mv);
  EXPECT_GT(v.version(), vv);
  expect_error([&] { ops::adamw_step_(p, random_tensor({5}, DType::f32, 1), m, v, AdamWParams{}); },
               "adamw_step_: grad must have shape [4], found [5]");
  expect_error([&] { ops::adamw_step_(p, packed(g, DType::f64), m, v, AdamWParams{}); }, "grad is float64 but param is float32");
  AdamWParams bad;
  bad.step = 0;
  expect_error([&] { ops::adamw_step_(p, g, m, v, bad); }, "step is 1-based, found 0");
  Tensor p2 = random_tensor({2, 2}, DType::f32, 21);
  expect_error([&] { ops::adamw_step_(p2.as_strided({2, 2}, {1, 2}, 0), packed(p2, DType::f32), packed(p2, DType::f32),
                                      packed(p2, DType::f32), AdamWParams{}); },
               "param must be contiguous");
}

}  // namespace
}  // namespace mvgpt
