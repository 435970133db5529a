// STUB: to be replaced by the real kernels.
#include <stdexcept>

#include "backends/cpu/cpu_backend.h"

namespace mvgpt::cpu {

void CpuBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWParams& p) {
  throw std::logic_error("CpuBackend::adamw_step: not implemented yet");
}

}  // namespace mvgpt::cpu
