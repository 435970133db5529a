// NOTE [ Deferred range checks ] (backends/deferred_checks.h), exercised on the CPU by deferring
// there too: an out-of-range index or target does not throw at the op, reaches no kernel out of
// bounds, and the next check (or read) throws the message the immediate check gives.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include <mvgpt/backends/deferred_checks.h>
#include <mvgpt/backends/ops.h>
#include "backends/fused_test_util.h"

namespace mvgpt::ops {
namespace {

Tensor ids(const std::vector<int64_t>& v) { return Tensor::from_vector(v); }

using fused_test::message_of;

TEST(DeferredChecks, TheCpuChecksAtOnceByDefault) {
  EXPECT_FALSE(range_checks_deferred(Device::cpu()));
  EXPECT_TRUE(range_checks_deferred(Device::cuda()));
  Tensor x = arange(0, 12, 1, DType::f32);
  EXPECT_EQ(message_of([&] { index_select(x, 0, ids({3, 12})); }),
            "index_select: index 12 is out of range for axis 0 of size 12");
}

TEST(DeferredChecks, AnOutOfRangeIndexThrowsAtTheCheckWithTheSameMessage) {
  Tensor x = arange(0, 12, 1, DType::f32);
  const std::string immediate = message_of([&] { index_select(x, 0, ids({3, 12, -1})); });
  DeferRangeChecksOnCpu defer;
  Tensor out = index_select(x, 0, ids({3, 12, -1}));  // clamped for the kernel: no out-of-bounds read
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{3, 11, 0}));
  EXPECT_EQ(message_of([] { check_deferred_errors(); }), immediate);
  EXPECT_EQ(message_of([] { check_deferred_errors(); }), "(no exception)") << "the records were not forgotten";
}

TEST(DeferredChecks, GoodIndicesGiveTheSameResultsAndNoError) {
  Tensor x = reshape(arange(0, 20, 1, DType::f64), {4, 5});
  Tensor gidx = Tensor::from_vector(std::vector<int64_t>{0, 3, 1, 2, 2}, Shape{1, 5});
  const std::vector<double> want_sel = index_select(x, 1, ids({4, 0})).to_vector<double>();
  const std::vector<double> want_gather = gather(x, 0, gidx).to_vector<double>();
  const std::vector<double> want_add = index_add(x, 0, ids({1, 1}), ones({2, 5}, DType::f64)).to_vector<double>();
  const std::vector<double> want_scatter = scatter_add(x, 0, gidx, ones({1, 5}, DType::f64)).to_vector<double>();
  DeferRangeChecksOnCpu defer;
  EXPECT_EQ(index_select(x, 1, ids({4, 0})).to_vector<double>(), want_sel);
  EXPECT_EQ(gather(x, 0, gidx).to_vector<double>(), want_gather);
  EXPECT_EQ(index_add(x, 0, ids({1, 1}), ones({2, 5}, DType::f64)).to_vector<double>(), want_add);
  EXPECT_EQ(scatter_add(x, 0, gidx, ones({1, 5}, DType::f64)).to_vector<double>(), want_scatter);
  EXPECT_NO_THROW(check_deferred_errors());
}

TEST(DeferredChecks, TheFirstBadOpIsReportedWhenSeveralAre) {
  Tensor x = reshape(arange(0, 20, 1, DType::f32), {4, 5});
  DeferRangeChecksOnCpu defer;
  index_select(x, 0, ids({0, 1}));                                                      // fine
  gather(x, 1, Tensor::from_vector(std::vector<int64_t>{7}, Shape{1, 1}));              // first bad
  scatter_add(x, 0, Tensor::from_vector(std::vector<int64_t>{9}, Shape{1, 1}), ones({1, 1}));  // second bad
  EXPECT_EQ(message_of([] { check_deferred_errors(); }), "gather: index 7 is out of range for axis 1 of size 5");
}

// Indices changed in place before the check can no longer be named: the error still comes.
TEST(DeferredChecks, IndicesChangedBeforeTheCheckStillFail) {
  Tensor x = arange(0, 12, 1, DType::f32);
  Tensor idx = ids({1, 40});
  DeferRangeChecksOnCpu defer;
  index_select(x, 0, idx);
  fill_(idx, 0);
  EXPECT_EQ(message_of([] { check_deferred_errors(); }),
            "index_select: 1 indices were out of range (the index tensor was changed in place before the deferred "
            "check could name one)");
}

// A program that never reads still hears of a bad index, after at most 1024 deferred checks.
TEST(DeferredChecks, ManyChecksWithoutAReadAreCheckedOnTheWay) {
  Tensor x = arange(0, 12, 1, DType::f32);
  DeferRangeChecksOnCpu defer;
  index_select(x, 0, ids({99}));
  EXPECT_EQ(message_of([&] {
              for (int i = 0; i < 1100; ++i) index_select(x, 0, ids({1}));
            }),
            "index_select: index 99 is out of range for axis 0 of size 12");
  EXPECT_NO_THROW(check_deferred_errors());
}

// Without a GPU nothing waits for a device.
TEST(DeferredChecks, TheCpuCountsNoHostSyncs) {
  const uint64_t before = host_sync_count();
  Tensor x = arange(0, 12, 1, DType::f32);
  to(index_select(x, 0, ids({1, 2})), Device::cpu());
  EXPECT_EQ(host_sync_count(), before);
}

}  // namespace
}  // namespace mvgpt::ops
