// The op profile's bookkeeping (NOTE [ The op profile ]): own time excludes inner spans, rows fall
// in their phase, only the recording thread records, nothing is recorded when off.
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <thread>

#include <mvgpt/util/profile.h>

namespace mvgpt::profile {
namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

const Row* find(const Report& r, const std::string& phase, const std::string& op) {
  for (const Row& row : r.rows)
    if (row.phase == phase && row.op == op) return &row;
  return nullptr;
}

TEST(Profile, OwnTimeLeavesOutTheSpansInside) {
  start();
  {
    const Phase phase("forward");
    const Span outer("outer");
    sleep_ms(5);
    const Span inner("inner", [] { return Detail{"4 x 4", 128}; });
    sleep_ms(150);
  }
  const Report r = stop();
  ASSERT_EQ(r.phases.size(), 1u);
  EXPECT_EQ(r.phases[0].name, "forward");
  EXPECT_EQ(r.phases[0].count, 1);
  const Row* outer = find(r, "forward", "outer");
  const Row* inner = find(r, "forward", "inner");
  ASSERT_TRUE(outer && inner);
  EXPECT_EQ(inner->detail, "4 x 4");
  EXPECT_EQ(inner->flops, 128);
  EXPECT_EQ(outer->calls, 1);
  EXPECT_GE(inner->seconds, 0.149);
  EXPECT_GE(outer->seconds, 0.0049);
  EXPECT_LT(outer->seconds, 0.1);  // the inner 150 ms are not the outer span's own
  EXPECT_LE(outer->seconds + inner->seconds, r.phases[0].seconds);
}

TEST(Profile, RowsAddUpPerPhaseAndKeepThePhasesOrder) {
  start();
  for (int step = 0; step < 3; ++step) {
    {
      const Phase phase("forward");
      const Span a("add");
      const Span b("matmul", [] { return Detail{"float32 2 x 3 x 4", 48}; });
    }
    const Phase phase("backward");
    const Span a("add");
  }
  { const Span outside("fill"); }
  const Report r = stop();
  ASSERT_EQ(r.phases.size(), 2u);
  EXPECT_EQ(r.phases[0].name, "forward");
  EXPECT_EQ(r.phases[1].name, "backward");
  EXPECT_EQ(r.phases[1].count, 3);
  EXPECT_EQ(find(r, "forward", "add")->calls, 3);
  EXPECT_EQ(find(r, "backward", "add")->calls, 3);
  EXPECT_EQ(find(r, "forward", "matmul")->flops, 3 * 48);
  ASSERT_TRUE(find(r, "", "fill"));
  EXPECT_EQ(r.rows.back().phase, "");  // outside every phase: last
}

TEST(Profile, OffRecordsNothingAndOtherThreadsAreIgnored) {
  EXPECT_FALSE(enabled());
  { const Span ignored("add"); }  // no profile: nothing to record into, nothing thrown
  start();
  EXPECT_TRUE(enabled());
  std::thread worker([] {
    EXPECT_FALSE(enabled());
    const Span s("worker");
    const Phase p("worker phase");
  });
  worker.join();
  EXPECT_THROW(start(), std::logic_error);  // one profile at a time
  const Report r = stop();
  EXPECT_TRUE(r.rows.empty());
  EXPECT_TRUE(r.phases.empty());
  EXPECT_FALSE(enabled());
  EXPECT_THROW(stop(), std::logic_error);
}

TEST(Profile, StopRefusesWhileASpanIsOpen) {
  start();
  {
    const Span open("open");
    EXPECT_THROW(stop(), std::logic_error);
  }
  EXPECT_EQ(stop().rows.size(), 1u);
}

}  // namespace
}  // namespace mvgpt::profile
