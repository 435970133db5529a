// Sharded random streams (NOTE [ Sharded streams ] in tensor/generator.h): shard r of N draws rank
// r's rows of what one stream draws for the whole batch, and keeps the global offset.
#include <gtest/gtest.h>

#include <stdexcept>

#include <mvgpt/autograd/ops.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/dist/data_parallel.h>
#include <mvgpt/dist/world.h>
#include <mvgpt/tensor/generator.h>

namespace mvgpt {
namespace {

// The bits of every element of a and b (same shape) are equal.
void expect_same_values(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  for (int64_t i = 0; i < a.numel(); ++i)
    ASSERT_EQ(read_element(a, i), read_element(b, i)) << what << ": element " << i;
}

TEST(GeneratorShard, TakeReservesThisShardsPartOfTheGlobalDraw) {
  Generator g(1);
  g.offset = 100;
  g.set_shard(2, 3);
  EXPECT_EQ(g.take(10), 120u);  // the global draw is [100, 130); shard 2 of 3 takes [120, 130)
  EXPECT_EQ(g.offset, 130u);
  EXPECT_EQ(g.take(0), 130u);   // nothing drawn, nothing skipped
  EXPECT_EQ(g.offset, 130u);
  Generator plain(1);
  EXPECT_EQ(plain.shard_index, 0u);
  EXPECT_EQ(plain.shard_count, 1u);
  EXPECT_EQ(plain.take(7), 0u);
  EXPECT_EQ(plain.offset, 7u);
}

TEST(GeneratorShard, RejectsAShardOutsideItsCount) {
  Generator g(1);
  EXPECT_THROW(g.set_shard(2, 2), std::invalid_argument);
  EXPECT_THROW(g.set_shard(0, 0), std::invalid_argument);
  try {
    g.set_shard(5, 3);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("shard 5 of 3"), std::string::npos) << e.what();
  }
  EXPECT_EQ(g.shard_count, 1u);  // unchanged by the failed calls
}

// Shards' draws of (B/N, ...) are the rows of one stream's draws of (B, ...), draw after draw.
TEST(GeneratorShard, ShardsDrawTheRowsOfTheWholeBatch) {
  constexpr int64_t kBatch = 12;
  for (int n : {1, 2, 3, 4}) {
    for (int r = 0; r < n; ++r) {
      Generator whole(42), part(42);
      part.set_shard(uint64_t(r), uint64_t(n));
      // Uniform, normal, float64 and a zero-size draw in between: the offsets stay in step.
      for (const Shape& shape : {Shape{kBatch, 3, 5}, Shape{kBatch, 0}, Shape{kBatch, 7}}) {
        Tensor all = ops::rand(shape, DType::f32, Device::cpu(), &whole);
        Shape share = shape;
        share[0] = kBatch / n;
        Tensor mine = ops::rand(share, DType::f32, Device::cpu(), &part);
        expect_same_values(mine, dist::shard_rows(all, r, n), "rand, shard " + std::to_string(r) + " of " + std::to_string(n));
        EXPECT_EQ(part.offset, whole.offset);
      }
      Tensor all = ops::randn({kBatch, 2}, DType::f64, Device::cpu(), &whole);
      Tensor mine = ops::randn({kBatch / n, 2}, DType::f64, Device::cpu(), &part);
      expect_same_values(mine, dist::shard_rows(all, r, n), "randn");
    }
  }
}

// The dropout masks of a share are the masks of those rows in one process; without the shard every
// share would get the first rows' pattern.
TEST(GeneratorShard, DropoutMasksOfASharedBatchMatchOneProcess) {
  Tensor x = ops::ones({8, 4, 6}, DType::f32);  // (B, T, C)
  Generator whole(9), second(9), unsharded(9);
  second.set_shard(1, 2);
  Tensor all = dropout(x, 0.5, &whole, true);
  Tensor share = dist::shard_rows(x, 1, 2);
  expect_same_values(dropout(share, 0.5, &second, true), dist::shard_rows(all, 1, 2), "shard 1 of 2");
  // The check can fail: an unsharded stream gives the second share the first share's mask.
  Tensor wrong = dropout(share, 0.5, &unsharded, true);
  Tensor first_rows = dist::shard_rows(all, 0, 2);
  for (int64_t i = 0; i < wrong.numel(); ++i) ASSERT_EQ(read_element(wrong, i), read_element(first_rows, i));
  bool differs = false;
  Tensor second_rows = dist::shard_rows(all, 1, 2);
  for (int64_t i = 0; i < wrong.numel() && !differs; ++i) differs = read_element(wrong, i) != read_element(second_rows, i);
  EXPECT_TRUE(differs);
}

// Resuming saves (seed, offset): a sharded stream rebuilt from them continues where it stopped.
TEST(GeneratorShard, ResumesFromTheSavedGlobalOffset) {
  Generator before(5);
  before.set_shard(1, 2);
  ops::rand({6, 3}, DType::f32, Device::cpu(), &before);
  Generator resumed(before.seed);
  resumed.offset = before.offset;
  resumed.set_shard(1, 2);
  expect_same_values(ops::rand({6, 3}, DType::f32, Device::cpu(), &resumed),
                     ops::rand({6, 3}, DType::f32, Device::cpu(), &before), "after resuming");
}

TEST(GeneratorShard, ShardGeneratorIsTheWholeStreamForOneRank) {
  dist::init();
  Generator g(3);
  g.set_shard(1, 2);
  dist::shard_generator(g);  // a world of one: shard 0 of 1
  EXPECT_EQ(g.shard_index, 0u);
  EXPECT_EQ(g.shard_count, 1u);
  // manual_seed restarts the default stream unsharded.
  default_generator().set_shard(1, 2);
  manual_seed(8);
  EXPECT_EQ(default_generator().shard_count, 1u);
  EXPECT_EQ(default_generator().offset, 0u);
}

}  // namespace
}  // namespace mvgpt
