// STUB: to be replaced by the real kernels.
#include <stdexcept>

#include "backends/cpu/cpu_backend.h"

namespace mvgpt::cpu {

void CpuBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  throw std::logic_error("CpuBackend::matmul: not implemented yet");
}

}  // namespace mvgpt::cpu
