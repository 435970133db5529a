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
TEST(FusedOps, Bfloat16IsWidenedAndCastBack) {
  Tensor q = packed(random_tensor({1, 2, 3, 4}, DType::f32, 6), DType::bf16);
  Tensor pos = Tensor::from_vector(std::vector<int64_t>{0, 1, 2});
  Tensor rq = ops::rope(q, pos);
  EXPECT_EQ(rq.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(rq, ops::rope(packed(q, DType::f32), pos), 2e-2, 1e-2));
  EXPECT_EQ(ops::attention(q, q, q, 0.5, true).out.dtype(), DType::bf16);
}

TEST(FusedOps, RopeChecksAndPerSequencePositions) {
  Tensor x = random_tensor({2, 2, 3, 8}, DType::f32, 9);
  expect_error([&] { ops::rope(random_tensor({2, 3, 7}, DType::f32, 1), Tensor::from_vector(std::vector<int64_t>{0, 1, 2})); },
               "rope: head size 7 is odd");
  expect_error([&] { ops::rope(x, Tensor::from_vector(std::vector<float>{0, 1, 2})); },
               "rope: positions must be int32 or int64, found float32");
  expect_error([&] { ops::rope(x, Tensor::from_vector(std::vector<int64_t>{0, 1})); },
               "positions must have shape [3] or [2, 3] for x of shape [2, 2, 3, 8], found [2]");
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

}  // namespace
}  // namespace mvgpt
