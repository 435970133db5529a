// The op profile's bookkeeping (NOTE [ The op profile ]): own time excludes inner spans, rows fall
// in their (innermost) phase, only the recording thread records, nothing is recorded when off, and
// a Recording never outlives its scope.
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
  Recording recording;
  {
    const Phase phase("forward");
    const Span outer("outer");
    sleep_ms(5);
    const Span inner("inner", [] { return Detail{"4 x 4", 128}; });
    sleep_ms(150);
  }
  const Report r = recording.stop();
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
  EXPECT_LT(outer->seconds, 0.5 * inner->seconds);  // the inner 150 ms are not the outer span's own
  EXPECT_LE(outer->seconds + inner->seconds, r.phases[0].seconds);
  EXPECT_GE(r.phases[0].profiler_seconds, 0.0);
}

TEST(Profile, RowsAddUpPerPhaseAndKeepThePhasesOrder) {
  Recording recording;
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
  const Report r = recording.stop();
  ASSERT_EQ(r.phases.size(), 2u);
  EXPECT_EQ(r.phases[0].name, "forward");
  EXPECT_EQ(r.phases[1].name, "backward");
  EXPECT_EQ(r.phases[1].count, 3);
  const Row* forward_add = find(r, "forward", "add");
  const Row* backward_add = find(r, "backward", "add");
  const Row* matmul = find(r, "forward", "matmul");
  ASSERT_TRUE(forward_add && backward_add && matmul);
  EXPECT_EQ(forward_add->calls, 3);
  EXPECT_EQ(backward_add->calls, 3);
  EXPECT_EQ(matmul->flops, 3 * 48);
  ASSERT_TRUE(find(r, "", "fill"));
  EXPECT_EQ(r.rows.back().phase, "");  // outside every phase: last
}

// note_kernel names the innermost span's implementation in its detail, once; its name is not even
// computed where no profile records, and its time is the profiler's, not the span's.
TEST(Profile, AKernelNoteJoinsTheInnermostSpansDetailOnce) {
  bool asked = false;
  note_kernel([&] { asked = true; return std::string("never"); });
  EXPECT_FALSE(asked);
  Recording recording;
  {
    const Span product("matmul", [] { return Detail{"bfloat16 8 x 4 x 2", 128}; });
    note_kernel([] {
      sleep_ms(100);
      return std::string("brg:avx512_core_bf16");
    });
    note_kernel([] { return std::string("gemm:jit"); });
  }
  {
    const Span plain("add");
    note_kernel([] { return std::string("loops"); });
  }
  note_kernel([] { return std::string("outside every span"); });
  const Report r = recording.stop();
  const Row* matmul = find(r, "", "matmul");
  const Row* add = find(r, "", "add");
  ASSERT_TRUE(matmul && add);
  EXPECT_EQ(matmul->detail, "bfloat16 8 x 4 x 2, brg:avx512_core_bf16");
  EXPECT_LT(matmul->seconds, 0.05);  // the 100 ms of naming it were the profiler's
  EXPECT_EQ(add->detail, "loops");
  EXPECT_EQ(r.rows.size(), 2u);
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

TEST(Profile, StopRefusesWhileASpanOrPhaseIsOpen) {
  Recording recording;
  {
    const Span open("open");
    EXPECT_THROW(stop(), std::logic_error);
  }
  {
    const Phase open("open");
    EXPECT_THROW(stop(), std::logic_error);
  }
  EXPECT_EQ(recording.stop().rows.size(), 1u);
}

TEST(Profile, NestedPhasesNameTheirSpansAndRestoreTheOuter) {
  Recording recording;
  {
    const Phase outer("optimizer");
    { const Span a("mul"); }
    {
      const Phase inner("clip");
      const Span b("square");
    }
    const Span c("adamw");
  }
  const Report r = recording.stop();
  EXPECT_TRUE(find(r, "optimizer", "mul"));
  EXPECT_TRUE(find(r, "clip", "square"));
  EXPECT_FALSE(find(r, "optimizer", "square"));
  EXPECT_TRUE(find(r, "optimizer", "adamw"));  // after the inner phase ended
}

TEST(Profile, SpansMadeBeforeTheProfileRecordNothingInIt) {
  const Span before("before");  // off when made: stays off
  Recording recording;
  { const Span during("during"); }
  const Report r = recording.stop();
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.rows[0].op, "during");
}

TEST(Profile, ARecordingLeftByAnExceptionIsCancelled) {
  try {
    Recording recording;
    const Phase phase("forward");
    const Span span("matmul");
    throw std::runtime_error("a failing step");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(enabled());
  Recording again;  // a new profile starts
  EXPECT_TRUE(again.stop().rows.empty());
}

}  // namespace
}  // namespace mvgpt::profile
