#pragma once
// Every CUDA runtime and cuBLAS call is checked: a failure throws std::runtime_error naming the
// error, the call as written, and the file and line.
#include <cstdint>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace mvgpt::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);

// Every kernel launch counts itself (kernel_launches() in cuda_backend.h: launches per training
// step are a figure of bench/compare --device cuda) by naming its stream through counted():
//   kernel<<<grid, block, shared, cuda::counted(stream)>>>(...);
// A cuBLAS GEMM and a CUB sort count once each, though either may run more than one kernel.
void count_launches(int64_t n);
inline cudaStream_t counted(cudaStream_t stream) {
  count_launches(1);
  return stream;
}

}  // namespace mvgpt::cuda

#define MVGPT_CUDA_CHECK(call)                                                              \
  do {                                                                                      \
    const cudaError_t mvgpt_status_ = (call);                                               \
    if (mvgpt_status_ != cudaSuccess)                                                       \
      ::mvgpt::cuda::throw_cuda_error(mvgpt_status_, #call, __FILE__, __LINE__);           \
  } while (0)

#define MVGPT_CUBLAS_CHECK(call)                                                            \
  do {                                                                                      \
    const cublasStatus_t mvgpt_status_ = (call);                                            \
    if (mvgpt_status_ != CUBLAS_STATUS_SUCCESS)                                             \
      ::mvgpt::cuda::throw_cublas_error(mvgpt_status_, #call, __FILE__, __LINE__);         \
  } while (0)

// After a kernel launch: launch errors (bad configuration) surface here, at the launch site.
#define MVGPT_CUDA_CHECK_LAUNCH() MVGPT_CUDA_CHECK(cudaGetLastError())
