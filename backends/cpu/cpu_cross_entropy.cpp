// STUB: to be replaced by the real kernels.
#include <stdexcept>

#include "backends/cpu/cpu_backend.h"

namespace mvgpt::cpu {

void CpuBackend::cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, const Tensor& losses, const Tensor& lse) {
  throw std::logic_error("CpuBackend::cross_entropy: not implemented yet");
}

void CpuBackend::cross_entropy_backward(const Tensor& dlosses, const Tensor& logits, const Tensor& targets, const Tensor& lse, int64_t ignore_index, const Tensor& dlogits) {
  throw std::logic_error("CpuBackend::cross_entropy_backward: not implemented yet");
}

}  // namespace mvgpt::cpu
