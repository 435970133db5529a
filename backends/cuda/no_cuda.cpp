// The CUDA backend's stand-in for builds without CUDA (MVGPT_CUDA=OFF, or no nvcc found).
#include <stdexcept>

#include <mvgpt/backends/cuda/cuda_backend.h>

namespace mvgpt::cuda {

bool built_with_cuda() { return false; }
int device_count() { return 0; }
std::string device_count_error() { return "this build has no CUDA backend"; }
bool device_count_failed() { return false; }
void force_walking_scatter_add(bool) {}
int64_t sorted_scatter_add_count() { return 0; }
int64_t kernel_launches() { return 0; }
Backend& backend(int index) {
  throw std::runtime_error("cuda:" + std::to_string(index) +
                           " requested, but mvgpt was built without CUDA (configure with -DMVGPT_CUDA=ON on a "
                           "machine with the CUDA toolkit, or use --device cpu)");
}

MemoryInfo memory_info(int index) {
  (void)backend(index);  // throws: no CUDA in this build
  return {};
}

}  // namespace mvgpt::cuda
