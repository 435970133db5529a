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

TEST(FusedOps, Bfloat16IsWidenedAndCastBack) {
  Tensor q = packed(random_tensor({1, 2, 3, 4}, DType::f32, 6), DType::bf16);
  Tensor pos = Tensor::from_vector(std::vector<int64_t>{0, 1, 2});
  Tensor rq = ops::rope(q, pos);
  EXPECT_EQ(rq.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(rq, ops::rope(packed(q, DType::f32), pos), 2e-2, 1e-2));
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

}  // namespace
}  // namespace mvgpt
