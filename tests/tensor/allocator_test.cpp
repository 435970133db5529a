// The CPU allocator: live bytes return to baseline, freed blocks are reused, alignment holds (2 MB
// for large blocks); the caching allocator's direct mode (what compute-sanitizer runs the CUDA
// allocator in).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <vector>

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

// Blocks of 2 MB or more start on a huge page's boundary (their whole 2 MB pieces advised as
// transparent huge pages); all of the block is there.
TEST(Allocator, LargeBlocksStartOnAHugePage) {
  Tensor big = Tensor::empty({int64_t(3 * CpuAllocator::kHugePage / 4 + 5)}, DType::f32);  // 6 MB and 20 bytes
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.raw_data()) % CpuAllocator::kHugePage, 0u);
  float* p = big.data<float>();
  for (int64_t i = 0; i < big.numel(); ++i) p[i] = float(i % 1000);
  EXPECT_EQ(p[big.numel() - 1], float((big.numel() - 1) % 1000));
  Tensor small = Tensor::empty({1000}, DType::f32);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.raw_data()) % CpuAllocator::kAlignment, 0u);
}

TEST(Allocator, PeakTracksTheHighWaterMark) {
  Allocator& a = allocator_for(Device::cpu());
  a.reset_peak();
  const size_t base = a.live_bytes();
  { Tensor big = Tensor::empty({1 << 18}, DType::f64); }
  EXPECT_GE(a.peak_bytes(), base + (size_t(1) << 21));
  EXPECT_EQ(a.live_bytes(), base);
}

// A caching allocator over malloc that records what reaches the system.
class RecordingAllocator final : public CachingAllocator {
 public:
  explicit RecordingAllocator(AllocatorMode mode) : CachingAllocator(512, 1 << 20, mode) {}
  ~RecordingAllocator() override { empty_cache(); }
  std::vector<size_t> allocated;
  int freed = 0;

 private:
  void* allocate_block(size_t size) override {
    allocated.push_back(size);
    return std::malloc(size);
  }
  void free_block(void* ptr) override {
    ++freed;
    std::free(ptr);
  }
  [[noreturn]] void out_of_memory(size_t) override { throw std::bad_alloc(); }
};

TEST(Allocator, DirectModeGivesEachRequestItsExactBlockAndFreesAtOnce) {
  RecordingAllocator a(AllocatorMode::direct);
  void* p = a.allocate(1000);
  EXPECT_EQ(a.allocated, std::vector<size_t>{1000});
  EXPECT_EQ(a.live_bytes(), 1000u);
  a.deallocate(p, 1000);
  EXPECT_EQ(a.freed, 1);
  EXPECT_EQ(a.live_bytes(), 0u);
  EXPECT_EQ(a.cached_bytes(), 0u);
  // The same size again is a fresh block, not a reused one.
  a.deallocate(a.allocate(1000), 1000);
  EXPECT_EQ(a.allocated, (std::vector<size_t>{1000, 1000}));
  EXPECT_EQ(a.freed, 2);
  EXPECT_EQ(a.peak_bytes(), 1000u);
}

TEST(Allocator, CachingModeRoundsAndReuses) {
  RecordingAllocator a(AllocatorMode::caching);
  a.deallocate(a.allocate(1000), 1000);
  a.deallocate(a.allocate(1000), 1000);
  EXPECT_EQ(a.allocated, std::vector<size_t>{1024});
  EXPECT_EQ(a.freed, 0);
  EXPECT_EQ(a.cached_bytes(), 1024u);
}

TEST(Allocator, ModeFromTheEnvironment) {
  const char* var = "MVGPT_TEST_ALLOCATOR_MODE";
  unsetenv(var);
  EXPECT_EQ(allocator_mode_from_env(var), AllocatorMode::caching);
  setenv(var, "caching", 1);
  EXPECT_EQ(allocator_mode_from_env(var), AllocatorMode::caching);
  setenv(var, "direct", 1);
  EXPECT_EQ(allocator_mode_from_env(var), AllocatorMode::direct);
  setenv(var, "cudaMalloc", 1);
  try {
    allocator_mode_from_env(var);
    ADD_FAILURE() << "an unknown mode was accepted";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("MVGPT_TEST_ALLOCATOR_MODE=cudaMalloc"), std::string::npos) << m;
    EXPECT_NE(m.find("direct"), std::string::npos) << m;
  }
  unsetenv(var);
}

}  // namespace
}  // namespace mvgpt
