#pragma once
// The caching device allocator: freed blocks go to size-class free lists and are handed out again,
// so a training step does not call cudaMalloc (which synchronizes the device) per temporary.
//
// NOTE [ Reuse is stream-ordered ]
// Every kernel, copy and GEMM of a device runs on that device's one stream. A block freed on the
// host while kernels that use it are still queued may be handed to the next tensor at once: that
// tensor's kernels are queued behind them on the same stream, so they cannot touch it early.
// Anything that uses device memory outside the stream must synchronize first.
#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

#include "tensor/allocator.h"

namespace mvgpt::cuda {

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int device) : device_(device) {}
  ~CudaAllocator() override;
  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  size_t live_bytes() const override;
  size_t peak_bytes() const override;
  void reset_peak() override;
  size_t cached_bytes() const override;
  void empty_cache() override;

  // The size class a request of nbytes is served from: 512-byte steps up to 1 MiB, then 1/8 of the
  // power of two below (waste under 12.5%).
  static size_t round_size(size_t nbytes);

 private:
  void free_cached_locked();
  int device_;
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;
  size_t live_ = 0, peak_ = 0, cached_ = 0;
};

}  // namespace mvgpt::cuda
