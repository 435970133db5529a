#pragma once
// Entry points of the CUDA backend. Built from backends/cuda/*.cu when MVGPT_CUDA is on; otherwise
// no_cuda.cpp provides them and each says that this build has no CUDA.
#include "backends/backend.h"

namespace mvgpt::cuda {

bool built_with_cuda();
int device_count();
Backend& backend(int index);

// Free and total bytes of GPU `index` now (cudaMemGetInfo: the driver's view, other processes
// included; blocks cached by our allocator count as used). Throws without CUDA or such a GPU.
struct MemoryInfo {
  size_t free = 0, total = 0;
};
MemoryInfo memory_info(int index);

}  // namespace mvgpt::cuda
