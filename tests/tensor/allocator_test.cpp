// The CPU allocator: live bytes return to baseline, freed blocks are reused, alignment holds.
#include <gtest/gtest.h>

#include <cstdint>

#include <mvgpt/tensor/allocator.h>
#include <mvgpt/tensor/tensor.h>

namespace mvgpt {
namespace {

TEST(Allocator, LiveBytesReturnToBaselineAndBlocksAreReused) {
  Allocator& a = allocator_for(Device::cpu());
  const size_t base = a.live_bytes();
  void* p = nullptr;
  {
    Tensor t = Tensor::empty({1000, 10}, DType::f32);
    p = t.raw_data();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % CpuAllocator::kAlignment, 0u);
    EXPECT_GE(a.live_bytes(), base + 40000);
    Tensor view = t.as_strided({10, 1000}, {1, 10}, 0);  // a view holds the storage, not new bytes
    EXPECT_EQ(a.live_bytes(), base + CpuAllocator::round_size(40000));
  }
  EXPECT_EQ(a.live_bytes(), base);
  EXPECT_GE(a.cached_bytes(), CpuAllocator::round_size(40000));
  // A request of the same size class gets the freed block back.
  Tensor again = Tensor::empty({40000}, DType::boolean);
  EXPECT_EQ(again.raw_data(), p);
}

TEST(Allocator, SizeClassesBoundWaste) {
  EXPECT_EQ(CpuAllocator::round_size(1), 64u);
  EXPECT_EQ(CpuAllocator::round_size(4096), 4096u);
  for (size_t n : {5000u, 100000u, 123456789u}) {
    size_t r = CpuAllocator::round_size(n);
    EXPECT_GE(r, n);
    EXPECT_LE(double(r), 1.125 * double(n) + 64);
  }
}

TEST(Allocator, PeakTracksTheHighWaterMark) {
  Allocator& a = allocator_for(Device::cpu());
  a.reset_peak();
  const size_t base = a.live_bytes();
  { Tensor big = Tensor::empty({1 << 18}, DType::f64); }
  EXPECT_GE(a.peak_bytes(), base + (size_t(1) << 21));
  EXPECT_EQ(a.live_bytes(), base);
}

}  // namespace
}  // namespace mvgpt
