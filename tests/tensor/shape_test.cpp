#include <gtest/gtest.h>

#include <mvgpt/tensor/shape.h>

namespace mvgpt {
namespace {

TEST(Shape, BroadcastFollowsNumPy) {
  EXPECT_EQ(broadcast_shapes({2, 1, 4}, {3, 1}, "test"), (Shape{2, 3, 4}));
  EXPECT_EQ(broadcast_shapes({}, {5}, "test"), (Shape{5}));
  EXPECT_EQ(broadcast_shapes({0, 1}, {1, 3}, "test"), (Shape{0, 3}));
}

TEST(Shape, BroadcastMismatchNamesOpAndShapes) {
  try {
    broadcast_shapes({2, 3}, {4}, "add");
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("add: shapes [2, 3] and [4]"), std::string::npos) << e.what();
  }
}

TEST(Shape, ContiguousStrides) {
  EXPECT_EQ(contiguous_strides({2, 3, 4}), (Strides{12, 4, 1}));
  EXPECT_EQ(numel(Shape{}), 1);
  EXPECT_EQ(numel(Shape{3, 0}), 0);
}

TEST(Shape, RankAboveMaximumIsRejected) {
  std::vector<int64_t> nine(9, 1);
  EXPECT_THROW(Shape{nine}, std::invalid_argument);
}

}  // namespace
}  // namespace mvgpt
