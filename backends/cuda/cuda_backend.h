#pragma once
// Entry points of the CUDA backend. Built from backends/cuda/*.cu when MVGPT_CUDA is on; otherwise
// no_cuda.cpp provides them and each says that this build has no CUDA.
#include <cstdint>
#include <string>

#include <mvgpt/backends/backend.h>

namespace mvgpt::cuda {

bool built_with_cuda();
int device_count();
// Why device_count() is 0: "no CUDA GPU is visible", the driver's error, or "this build has no CUDA";
// "" when GPUs are visible.
std::string device_count_error();
// True when device_count() is 0 because the CUDA runtime failed (not for want of a GPU or a driver).
bool device_count_failed();
Backend& backend(int index);

// Free and total bytes of GPU `index` now (cudaMemGetInfo: the driver's view, other processes
// included; blocks cached by our allocator count as used). Throws without CUDA or such a GPU.
struct MemoryInfo {
  size_t free = 0, total = 0;
};
MemoryInfo memory_info(int index);

// Kernel launches on every GPU since the process began (NOTE in cuda_check.h: a cuBLAS GEMM or a
// CUB sort counts once); 0 without CUDA. bench_model's CUDA cases report it per step and token.
int64_t kernel_launches();

// Tests only: true sends every scatter-add through the walking kernel, the reference of the sorted
// one (NOTE [ Sorted scatter-add ], backends/cuda/cuda_index.cu). No effect without CUDA.
void force_walking_scatter_add(bool on);
// Tests only: how many scatter-adds have taken the sorted path (0 without CUDA).
int64_t sorted_scatter_add_count();

}  // namespace mvgpt::cuda
