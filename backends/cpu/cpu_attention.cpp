// STUB: to be replaced by the real kernels.
#include <stdexcept>

#include "backends/cpu/cpu_backend.h"

namespace mvgpt::cpu {

void CpuBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal, const Tensor& out, const Tensor& lse) {
  throw std::logic_error("CpuBackend::attention: not implemented yet");
}

void CpuBackend::attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, double scale, bool causal, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  throw std::logic_error("CpuBackend::attention_backward: not implemented yet");
}

}  // namespace mvgpt::cpu
