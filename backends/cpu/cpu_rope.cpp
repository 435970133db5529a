// STUB: to be replaced by the real kernels.
#include <stdexcept>

#include "backends/cpu/cpu_backend.h"

namespace mvgpt::cpu {

void CpuBackend::rope(const Tensor& x, const Tensor& positions, double base, RopeLayout layout, bool inverse, const Tensor& out) {
  throw std::logic_error("CpuBackend::rope: not implemented yet");
}

}  // namespace mvgpt::cpu
