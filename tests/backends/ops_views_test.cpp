// Views share storage; reshape copies only when it must.
#include <gtest/gtest.h>

#include <mvgpt/backends/ops.h>
#include "ops_test_util.h"

namespace mvgpt {
namespace {

using testing::expect_throw_with;
using testing::Kind;
using testing::make_input;

TEST(OpsViews, ReshapeIsAViewWhenContiguousAndACopyOtherwise) {
  Tensor x = ops::arange(0, 24, 1, DType::f32);
  Tensor r = ops::reshape(x, {2, -1, 4});
  EXPECT_EQ(r.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(r.storage(), x.storage());
  Tensor t = ops::transpose(r, 0, 2);  // (4, 3, 2), not contiguous
  Tensor flat = ops::reshape(t, {24});
  EXPECT_NE(flat.storage(), x.storage());
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(read_element(flat, i), read_element(t, i));
  // Merging dims that are contiguous among themselves stays a view even in a transposed tensor.
  Tensor p = ops::permute(ops::reshape(x, {2, 3, 4}), {1, 0, 2});  // (3, 2, 4)
  EXPECT_EQ(ops::reshape(p, {3, 2, 2, 2}).storage(), x.storage());
  expect_throw_with([&] { ops::reshape(x, {5, -1}); }, "reshape: cannot reshape 24 elements");
}

TEST(OpsViews, WritesThroughAViewAreSeenInTheBase) {
  Tensor base = ops::zeros({3, 4});
  Tensor col = ops::select(ops::transpose(base, 0, 1), 0, 2);  // base[:, 2]
  ops::fill_(col, 7);
  for (int64_t r = 0; r < 3; ++r) EXPECT_EQ(read_element(base, r * 4 + 2), 7);
  EXPECT_EQ(read_element(base, 0), 0);
  ops::copy_(ops::narrow(ops::unsqueeze(base, 0), 2, 0, 1), ops::full({3, 1}, 2.0));
  EXPECT_EQ(read_element(base, 4), 2);
}

TEST(OpsViews, FlattenSqueezeExpand) {
  Tensor x = make_input({2, 3, 4, 5}, DType::f32, 1);
  EXPECT_EQ(ops::flatten(x).shape(), (Shape{120}));
  EXPECT_EQ(ops::flatten(x, 1, 2).shape(), (Shape{2, 12, 5}));
  EXPECT_EQ(ops::flatten(x, -2).shape(), (Shape{2, 3, 20}));
  EXPECT_EQ(ops::flatten(ops::zeros({})).shape(), (Shape{1}));
  EXPECT_EQ(ops::squeeze(ops::unsqueeze(x, 1), 1).shape(), x.shape());
  Tensor e = ops::expand(ops::zeros({3, 1}), {2, 3, 4});
  EXPECT_EQ(e.strides(), (Strides{0, 1, 0}));
  expect_throw_with([&] { ops::flatten(x, 2, 1); }, "flatten: start axis 2 comes after end axis 1");
  expect_throw_with([&] { ops::squeeze(x, 0); }, "squeeze: axis 0 has size 2, not 1");
  expect_throw_with([&] { ops::expand(x, {3, 3, 4, 5}); }, "expand: cannot expand [2, 3, 4, 5]");
  expect_throw_with([&] { ops::transpose(Tensor(), 0, 1); }, "transpose: input is undefined");
  expect_throw_with([&] { ops::narrow(x, 1, 2, 2); }, "narrow: range [2, 4) is outside axis 1 of size 3");
}

}  // namespace
}  // namespace mvgpt
