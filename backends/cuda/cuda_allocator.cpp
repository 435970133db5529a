#include "backends/cuda/cuda_allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <new>
#include <string>

#include "backends/cuda/cuda_check.h"

namespace mvgpt::cuda {

CudaAllocator::~CudaAllocator() {
  // Never throws: the CUDA runtime may already be shutting down at exit.
  std::lock_guard lock(mutex_);
  for (auto& [size, blocks] : free_)
    for (void* p : blocks) cudaFree(p);
  free_.clear();
}

size_t CudaAllocator::round_size(size_t nbytes) {
  constexpr size_t kSmallStep = 512, kSmallLimit = size_t(1) << 20;
  if (nbytes <= kSmallLimit) return (std::max<size_t>(nbytes, 1) + kSmallStep - 1) / kSmallStep * kSmallStep;
  const size_t p = size_t(1) << (63 - __builtin_clzll(nbytes));
  const size_t step = p / 8;
  return (nbytes + step - 1) / step * step;
}

void* CudaAllocator::allocate(size_t nbytes) {
  const size_t size = round_size(nbytes);
  {
    std::lock_guard lock(mutex_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= size;
      live_ += size;
      peak_ = std::max(peak_, live_);
      return p;
    }
  }
  MVGPT_CUDA_CHECK(cudaSetDevice(device_));
  void* p = nullptr;
  cudaError_t status = cudaMalloc(&p, size);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it, give the cache back (cudaFree waits for the device) and retry once
    empty_cache();
    status = cudaMalloc(&p, size);
  }
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error("CudaAllocator: cudaMalloc of " + std::to_string(size) + " bytes on cuda:" +
                             std::to_string(device_) + " failed (" + cudaGetErrorString(status) + "); " +
                             std::to_string(live_bytes()) + " bytes are live");
  }
  std::lock_guard lock(mutex_);
  live_ += size;
  peak_ = std::max(peak_, live_);
  return p;
}

void CudaAllocator::deallocate(void* ptr, size_t nbytes) {
  if (!ptr) return;
  const size_t size = round_size(nbytes);
  std::lock_guard lock(mutex_);
  live_ -= size;
  free_[size].push_back(ptr);
  cached_ += size;
}

size_t CudaAllocator::live_bytes() const {
  std::lock_guard lock(mutex_);
  return live_;
}
size_t CudaAllocator::peak_bytes() const {
  std::lock_guard lock(mutex_);
  return peak_;
}
void CudaAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  peak_ = live_;
}
size_t CudaAllocator::cached_bytes() const {
  std::lock_guard lock(mutex_);
  return cached_;
}

void CudaAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  free_cached_locked();
}

void CudaAllocator::free_cached_locked() {
  if (free_.empty()) return;
  MVGPT_CUDA_CHECK(cudaSetDevice(device_));
  // cudaFree waits for the device, so queued kernels that still read a cached block finish first.
  for (auto& [size, blocks] : free_)
    for (void* p : blocks) MVGPT_CUDA_CHECK(cudaFree(p));
  free_.clear();
  cached_ = 0;
}

}  // namespace mvgpt::cuda
