#include <mvgpt/backends/cuda/cuda_allocator.h>

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#include <mvgpt/backends/cuda/cuda_check.h>

namespace mvgpt::cuda {

CudaAllocator::~CudaAllocator() {
  // Never throws: the CUDA runtime may already be shutting down at exit.
  release_cached([](void* p) { cudaFree(p); });
}

void* CudaAllocator::allocate_block(size_t size) {
  MVGPT_CUDA_CHECK(cudaSetDevice(device_));
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, size);
  if (status == cudaSuccess) return p;
  cudaGetLastError();  // clear it; out of memory: the caller gives the cache back (cudaFree waits) and retries once
  if (status == cudaErrorMemoryAllocation) return nullptr;
  throw_failed(size, status);
}

void CudaAllocator::free_block(void* ptr) {
  MVGPT_CUDA_CHECK(cudaSetDevice(device_));
  // cudaFree waits for the device, so queued kernels that still read a cached block finish first.
  MVGPT_CUDA_CHECK(cudaFree(ptr));
}

void CudaAllocator::out_of_memory(size_t size) { throw_failed(size, cudaErrorMemoryAllocation); }

void CudaAllocator::throw_failed(size_t size, int status) const {
  throw std::runtime_error("CudaAllocator: cudaMalloc of " + std::to_string(size) + " bytes on cuda:" +
                           std::to_string(device_) + " failed (" + cudaGetErrorString(cudaError_t(status)) + "); " +
                           std::to_string(live_bytes()) + " bytes are live");
}

}  // namespace mvgpt::cuda
