#pragma once
// The caching device allocator (a CachingAllocator, tensor/allocator.h): freed blocks are handed
// out again, so a training step does not call cudaMalloc (which synchronizes the device) per temporary.
//
// NOTE [ Reuse is stream-ordered ]
// Every kernel, copy and GEMM of a device runs on that device's one stream. A block freed on the
// host while kernels that use it are still queued may be handed to the next tensor at once: that
// tensor's kernels are queued behind them on the same stream, so they cannot touch it early.
// Anything that uses device memory outside the stream must synchronize first.
#include <cstddef>

#include <mvgpt/tensor/allocator.h>

namespace mvgpt::cuda {

// Device memory from cudaMalloc on one device; size classes in 512-byte steps up to 1 MiB, then
// 1/8 of the power of two below (waste under 12.5%). MVGPT_CUDA_ALLOCATOR=direct passes every
// allocation straight to cudaMalloc and every free to cudaFree, exactly sized, for compute-sanitizer
// (scripts/gpu-check.sh sets it for memcheck and racecheck).
class CudaAllocator final : public CachingAllocator {
 public:
  explicit CudaAllocator(int device)
      : CachingAllocator(kSmallStep, kSmallLimit, allocator_mode_from_env("MVGPT_CUDA_ALLOCATOR")), device_(device) {}
  ~CudaAllocator() override;

  // The size class a request of nbytes is served from.
  static size_t round_size(size_t nbytes) { return size_class(nbytes, kSmallStep, kSmallLimit); }

 private:
  static constexpr size_t kSmallStep = 512, kSmallLimit = size_t(1) << 20;
  void* allocate_block(size_t size) override;
  void free_block(void* ptr) override;
  [[noreturn]] void out_of_memory(size_t size) override;
  [[noreturn]] void throw_failed(size_t size, int status) const;
  int device_;
};

}  // namespace mvgpt::cuda
