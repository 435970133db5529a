// The decision that keeps OpenBLAS's per-thread buffers inside an address-space limit (ulimit -v).
#include <mvgpt/backends/cpu/address_space.h>

#include <gtest/gtest.h>

namespace mvgpt::cpu {
namespace {

constexpr uint64_t MiB = uint64_t(1) << 20;

TEST(BlasThreadsThatFit, HalfOfWhatIsLeftGoesToTheBuffers) {
  // 16 threads want 16 x (~128 MiB buffer + 64 MiB arena): 8 GiB + what is in use is plenty.
  EXPECT_EQ(blas_threads_that_fit(8192 * MiB, 300 * MiB, 16).threads, 16);
  // ulimit -v 1000000 (976 MiB) with 200 MiB in use: 776 left, half for the threads: 2 of them.
  EXPECT_EQ(blas_threads_that_fit(976 * MiB, 200 * MiB, 16).threads, 2);
  EXPECT_EQ(blas_threads_that_fit(976 * MiB, 200 * MiB, 1).threads, 1);
  // Not even one: 0, and the smallest limit that fits one.
  const ThreadBudget none = blas_threads_that_fit(600 * MiB, 300 * MiB, 16);
  EXPECT_EQ(none.threads, 0);
  EXPECT_EQ(none.needed, 300 * MiB + 2 * kThreadAddressSpace);
  EXPECT_EQ(blas_threads_that_fit(none.needed, 300 * MiB, 16).threads, 1);
  EXPECT_EQ(blas_threads_that_fit(100 * MiB, 300 * MiB, 16).threads, 0);  // already past it
}

}  // namespace
}  // namespace mvgpt::cpu
