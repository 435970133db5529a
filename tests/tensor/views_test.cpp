// Views are layouts on shared storage: writes through one are seen through the others.
#include <gtest/gtest.h>

#include <mvgpt/tensor/tensor.h>
#include <mvgpt/tensor/views.h>

namespace mvgpt {
namespace {

Tensor iota(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) write_element(t, i, double(i));
  return t;
}

TEST(Views, AliasTheirBase) {
  Tensor base = iota({3, 4});
  Tensor t = views::transpose(base, 0, 1);  // (4, 3)
  EXPECT_EQ(t.strides(), (Strides{1, 4}));
  EXPECT_EQ(read_element(t, 1), 4);  // t[0, 1] = base[1, 0]
  write_element(t, 1, -1);
  EXPECT_EQ(read_element(base, 4), -1);
  Tensor row = views::select(base, 0, 2);
  write_element(row, 3, 99);
  EXPECT_EQ(read_element(base, 11), 99);
  Tensor mid = views::narrow(base, 1, 1, 2);
  EXPECT_EQ(mid.offset(), 1);
  EXPECT_EQ(read_element(mid, 2), 5);
  EXPECT_FALSE(mid.is_contiguous());
}

TEST(Views, ExpandUsesStrideZero) {
  Tensor col = iota({3, 1});
  Tensor e = views::expand(col, {2, 3, 4});
  EXPECT_EQ(e.strides(), (Strides{0, 1, 0}));
  for (int64_t i = 0; i < e.numel(); ++i) EXPECT_EQ(read_element(e, i), double((i / 4) % 3));
}

TEST(Views, ReshapeStridesOnlyWhenTheLayoutAllows) {
  Tensor base = iota({2, 3, 4});
  EXPECT_TRUE(views::try_reshape(base, {6, 4}).has_value());
  Tensor t = views::transpose(base, 1, 2);  // (2, 4, 3)
  EXPECT_FALSE(views::try_reshape(t, {2, 12}).has_value());
  EXPECT_FALSE(views::try_reshape(t, {8, 3}).has_value());
  auto merged = views::try_reshape(t, {2, 4, 3, 1});
  ASSERT_TRUE(merged.has_value());
  EXPECT_EQ(merged->storage(), base.storage());
}

TEST(Views, UnsqueezeSqueezeRoundTrip) {
  Tensor base = iota({2, 3});
  Tensor u = views::unsqueeze(base, 1);
  EXPECT_EQ(u.shape(), (Shape{2, 1, 3}));
  EXPECT_TRUE(u.is_contiguous());
  EXPECT_EQ(views::squeeze(u, 1).shape(), base.shape());
  EXPECT_THROW(views::squeeze(base, 0), std::invalid_argument);
}

}  // namespace
}  // namespace mvgpt
