#pragma once
// Entry points of the CUDA backend. Built from backends/cuda/*.cu when MVGPT_CUDA is on; otherwise
// no_cuda.cpp provides them and each says that this build has no CUDA.
#include "backends/backend.h"

namespace mvgpt::cuda {

bool built_with_cuda();
int device_count();
Backend& backend(int index);

}  // namespace mvgpt::cuda
