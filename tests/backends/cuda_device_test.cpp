// The CUDA device itself: what asking for it does without a GPU (a clear error, never a crash or an
// abort of the CPU-only run), and with one: transfers, the caching allocator, device indices.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <mvgpt/backends/cuda/cuda_backend.h>
#include <mvgpt/backends/deferred_checks.h>
#include <mvgpt/backends/ops.h>
#include "cuda_required.h"
#include "backends/ops_test_util.h"

namespace mvgpt {
namespace {

using testing::expect_throw_with;

TEST(CudaDevice, CountingDevicesNeverThrows) {
  int n = -1;
  EXPECT_NO_THROW(n = cuda_device_count());
  EXPECT_GE(n, 0);
  EXPECT_EQ(cuda_available(), n > 0);
  if (!cuda::built_with_cuda()) {
    EXPECT_EQ(n, 0);
  }
}

TEST(CudaDevice, WithoutGpuRequestsFailClearly) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is present: the no-GPU errors cannot be observed here";
  Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3});
  expect_throw_with<std::runtime_error>([&] { backend_for(Device::cuda()); }, "cuda:0");
  expect_throw_with<std::runtime_error>([&] { ops::to(t, Device::cuda()); }, "cuda:0");
  expect_throw_with<std::runtime_error>([&] { ops::to(t, Device::cuda(3)); }, "cuda:3");
  expect_throw_with<std::runtime_error>([&] { Tensor::empty({2}, DType::f32, Device::cuda()); }, "cuda:0");
  // The message says what to do instead.
  try {
    backend_for(Device::cuda());
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--device cpu"), std::string::npos) << e.what();
  }
  // And the CPU carries on.
  EXPECT_EQ(ops::sum(t).item<float>(), 6.0f);
}

// Why there is no GPU is said, and only a failing CUDA runtime (a driver too old) counts as an error:
// no GPU, no driver or no CUDA in the build is a CPU machine, not a broken one.
TEST(CudaDevice, StatusSaysWhyThereIsNoGpu) {
  const CudaStatus s = cuda_status();
  EXPECT_EQ(s.available, cuda_available());
  if (s.available) {
    EXPECT_TRUE(s.reason.empty()) << s.reason;
    EXPECT_FALSE(s.error);
    return;
  }
  EXPECT_FALSE(s.reason.empty());
  if (!cuda::built_with_cuda()) {
    EXPECT_EQ(s.reason, "this build has no CUDA backend");
    EXPECT_FALSE(s.error);
  }
  if (s.error) {
    EXPECT_NE(s.reason.find("cudaGetDeviceCount failed"), std::string::npos) << s.reason;
  } else {
    EXPECT_NE(s.reason.find("no CUDA"), std::string::npos) << s.reason;
  }
}

// On the CPU an upload is the host tensors themselves, with nothing to wait for.
TEST(CpuDevice, UploadIsTheTensorsThemselves) {
  Backend& be = backend_for(Device::cpu());
  const Tensor a = ops::ones({3}), b = ops::transpose(ops::ones({2, 3}), 0, 1);
  Backend::PendingUpload u = be.upload_async({a, b});
  be.wait_upload(u);
  ASSERT_EQ(u.tensors.size(), 2u);
  EXPECT_TRUE(u.tensors[0].same(a));
  EXPECT_TRUE(u.tensors[1].same(b));
  EXPECT_FALSE(u.ready);
}

class CudaOnly : public ::testing::Test {
 protected:
  void SetUp() override {
    MVGPT_SKIP_WITHOUT_CUDA("these cases run on a GPU machine (scripts/gpu-check.sh)");
  }
};

TEST_F(CudaOnly, RoundTripsEveryDtypeAndChunkedTransfers) {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::i32, DType::i64, DType::boolean}) {
    Tensor h = testing::make_input({7, 5}, dt, 1, testing::Kind::transposed, -30, 30);
    Tensor d = ops::to(h, Device::cuda());
    EXPECT_EQ(d.device(), Device::cuda());
    Tensor back = ops::to(d, Device::cpu());
    for (int64_t i = 0; i < h.numel(); ++i) EXPECT_EQ(read_element(back, i), read_element(h, i)) << dtype_name(dt);
  }
  // Larger than one 32 MiB staging chunk, with a distinct value per element.
  const int64_t n = (int64_t(40) << 20) / 4;
  Tensor big = ops::arange(0, double(n), 1, DType::i32);
  Tensor back = ops::to(ops::to(big, Device::cuda()), Device::cpu());
  EXPECT_EQ(std::memcmp(big.raw_data(), back.raw_data(), big.nbytes()), 0);
}

TEST_F(CudaOnly, CreationOpsWorkOnAFreshDevice) {
  Tensor z = ops::zeros({3, 4}, DType::f32, Device::cuda());
  EXPECT_EQ(ops::sum(ops::to(z, Device::cpu())).item<float>(), 0.0f);
}

TEST_F(CudaOnly, AllocatorCachesFreedBlocks) {
  backend_for(Device::cuda());
  Allocator& a = allocator_for(Device::cuda());
  if (auto* c = dynamic_cast<CachingAllocator*>(&a); c && c->mode() == AllocatorMode::direct)
    GTEST_SKIP() << "MVGPT_CUDA_ALLOCATOR=direct: nothing is cached";
  const size_t live = a.live_bytes();
  void* p = a.allocate(1000);
  EXPECT_GT(a.live_bytes(), live);
  a.deallocate(p, 1000);
  EXPECT_EQ(a.live_bytes(), live);
  EXPECT_GE(a.cached_bytes(), 1000u);
  void* q = a.allocate(900);  // the same size class comes back without cudaMalloc
  EXPECT_EQ(p, q);
  a.deallocate(q, 900);
  a.empty_cache();
  EXPECT_EQ(a.cached_bytes(), 0u);
}

// NOTE [ Sorted scatter-add ]: the sorted index_add against the walking kernel it replaces, bit
// for bit, at an embedding backward's shape (a long index, few rows, many repeats) along either axis,
// with more columns than a block has threads.
TEST_F(CudaOnly, SortedIndexAddEqualsTheWalk) {
  std::vector<int64_t> tokens(3000);
  for (size_t k = 0; k < tokens.size(); ++k) tokens[k] = int64_t((k * 104729 + k * k) % 37);
  struct Restore {
    ~Restore() { cuda::force_walking_scatter_add(false); }
  } restore;
  for (DType idt : {DType::i64, DType::i32}) {
    Tensor index = ops::to(ops::to(Tensor::from_vector(tokens), idt), Device::cuda());
    for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::i32, DType::boolean}) {
      for (int axis : {0, 1}) {
        const Shape table = axis == 0 ? Shape{37, 300} : Shape{300, 37};
        const Shape grads = axis == 0 ? Shape{3000, 300} : Shape{300, 3000};
        Tensor base = ops::to(testing::make_input(table, dt, 3, testing::Kind::transposed, -9, 9), Device::cuda());
        Tensor src = ops::to(testing::make_input(grads, dt, 4, testing::Kind::contiguous, -9, 9), Device::cuda());
        cuda::force_walking_scatter_add(true);
        Tensor walk = ops::contiguous(ops::to(ops::index_add(base, axis, index, src), Device::cpu()));
        cuda::force_walking_scatter_add(false);
        const int64_t before = cuda::sorted_scatter_add_count();
        Tensor sorted = ops::contiguous(ops::to(ops::index_add(base, axis, index, src), Device::cpu()));
        EXPECT_EQ(cuda::sorted_scatter_add_count(), before + 1) << "the sorted path did not run";
        ASSERT_EQ(walk.nbytes(), sorted.nbytes());
        EXPECT_EQ(std::memcmp(walk.raw_data(), sorted.raw_data(), walk.nbytes()), 0)
            << dtype_name(dt) << " along axis " << axis << ", index " << dtype_name(idt);
      }
    }
  }
}

// Uploads on the copy stream (NOTE [ Uploads on a copy stream ]): the data arrives before the work
// queued after wait_upload, while the compute stream is busy with earlier work, through both pinned
// buffers in turn; a dropped, unwaited upload waits for its copy before its blocks are reused.
TEST_F(CudaOnly, UploadsArriveBeforeTheWorkQueuedAfterThem) {
  Backend& be = backend_for(Device::cuda());
  const Tensor busy = ops::to(ops::ones({1024, 1024}), Device::cuda());
  for (int round = 0; round < 40; ++round) {
    Tensor queued = ops::matmul(busy, busy);  // work in flight on the compute stream
    const Tensor ids = ops::arange(double(round), double(round) + 2000, 1, DType::i32);
    const Tensor weights = ops::transpose(testing::make_input({30, 20}, DType::f32, uint64_t(round) + 1), 0, 1);
    Backend::PendingUpload u = be.upload_async({ids, weights});
    if (round % 7 == 3) continue;  // dropped unwaited: its ticket waits for the copy
    be.wait_upload(u);
    const Tensor twice = ops::add(u.tensors[0], u.tensors[0]);  // queued after the wait
    EXPECT_EQ(ops::to(twice, Device::cpu()).to_vector<int32_t>()[1999], 2 * (round + 1999)) << "round " << round;
    const Tensor back = ops::to(u.tensors[1], Device::cpu());
    EXPECT_EQ(back.shape(), weights.shape());
    for (int64_t i = 0; i < weights.numel(); ++i)
      ASSERT_EQ(read_element(back, i), read_element(weights, i)) << "round " << round << ", element " << i;
    EXPECT_EQ(ops::to(queued, Device::cpu()).to_vector<float>()[0], 1024.0f);
  }
}

// The launch counter behind bench/compare --device cuda's launches per step: one elementwise op is
// one kernel, one 2-d product one cuBLAS call, and without a GPU it stays at 0.
TEST_F(CudaOnly, EachLaunchCountsOnce) {
  const Tensor a = ops::to(ops::ones({64, 32}), Device::cuda()), b = ops::to(ops::ones({32, 16}), Device::cuda());
  int64_t before = cuda::kernel_launches();
  const Tensor sum = ops::add(a, a);
  EXPECT_EQ(cuda::kernel_launches() - before, 1);
  before = cuda::kernel_launches();
  const Tensor product = ops::matmul(a, b);
  EXPECT_EQ(cuda::kernel_launches() - before, 1);
  EXPECT_EQ(ops::to(product, Device::cpu()).to_vector<float>()[0], 32.0f);
}

// The counter sees every launch only if every launch names its stream through counted(): read
// from the sources, so that a new kernel cannot forget it (on any machine, with or without a GPU).
TEST(CudaSources, EveryKernelLaunchIsCounted) {
  namespace fs = std::filesystem;
  int launches = 0;
  for (const char* folder : {"backends/cuda", "autograd/fused"}) {
    for (const auto& entry : fs::directory_iterator(fs::path(MVGPT_SOURCE_DIR) / folder)) {
      if (entry.path().extension() != ".cu") continue;
      std::ifstream in(entry.path());
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      for (size_t at = text.find("<<<"); at != std::string::npos; at = text.find("<<<", at + 3)) {
        const size_t end = text.find(">>>", at);
        ASSERT_NE(end, std::string::npos) << entry.path();
        EXPECT_NE(text.substr(at, end - at).find("counted("), std::string::npos)
            << entry.path().filename() << ": a launch whose stream is not counted(...): " << text.substr(at, end - at + 3);
        ++launches;
      }
    }
  }
  EXPECT_GE(launches, 35);  // the sources were found and read
}

TEST(CudaDevice, LaunchCounterStaysAtZeroWithoutAGpu) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is present: EachLaunchCountsOnce covers the counter";
  EXPECT_EQ(cuda::kernel_launches(), 0);
}

TEST_F(CudaOnly, OutOfRangeIndexIsAClearError) {
  const int n = cuda_device_count();
  expect_throw_with<std::runtime_error>([&] { backend_for(Device::cuda(n)); }, "cuda:" + std::to_string(n));
}

// NOTE [ Deferred range checks ]: no host read at the op; the next read throws the CPU's message.
TEST_F(CudaOnly, AnOutOfRangeIndexThrowsAtTheNextRead) {
  Tensor x = ops::to(ops::arange(0, 10, 1, DType::f32), Device::cuda());
  Tensor idx = ops::to(Tensor::from_vector(std::vector<int64_t>{2, 12}), Device::cuda());
  const uint64_t syncs = ops::host_sync_count();
  Tensor out = ops::index_select(x, 0, idx);
  EXPECT_EQ(ops::host_sync_count(), syncs) << "the range check waited for the GPU";
  expect_throw_with<std::invalid_argument>([&] { ops::to(out, Device::cpu()); },
                                           "index_select: index 12 is out of range for axis 0 of size 10");
  // Forgotten after the throw; good indices read back as they are.
  Tensor good = ops::index_select(x, 0, ops::to(Tensor::from_vector(std::vector<int64_t>{9, 0}), Device::cuda()));
  EXPECT_EQ(ops::to(good, Device::cpu()).to_vector<float>(), (std::vector<float>{9, 0}));
}

TEST_F(CudaOnly, MixedDevicesAreRejected) {
  Tensor h = Tensor::from_vector(std::vector<float>{1, 2});
  Tensor d = ops::to(h, Device::cuda());
  EXPECT_THROW(ops::add(h, d), std::invalid_argument);
}

}  // namespace
}  // namespace mvgpt
