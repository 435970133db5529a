// STUB: to be replaced by the real kernels.
#include <stdexcept>

#include "backends/cpu/cpu_backend.h"

namespace mvgpt::cpu {

void CpuBackend::reduce(ReduceOp op, const Tensor& x, const Tensor& out) {
  throw std::logic_error("CpuBackend::reduce: not implemented yet");
}

void CpuBackend::softmax(const Tensor& x, const Tensor& out, bool log) {
  throw std::logic_error("CpuBackend::softmax: not implemented yet");
}

}  // namespace mvgpt::cpu
