// STUB: to be replaced by the real kernels.
#include <stdexcept>

#include "backends/cpu/cpu_backend.h"

namespace mvgpt::cpu {

void CpuBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  throw std::logic_error("CpuBackend::layer_norm: not implemented yet");
}

void CpuBackend::layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias) {
  throw std::logic_error("CpuBackend::layer_norm_backward: not implemented yet");
}

void CpuBackend::rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd) {
  throw std::logic_error("CpuBackend::rms_norm: not implemented yet");
}

void CpuBackend::rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dx, const Tensor& dweight) {
  throw std::logic_error("CpuBackend::rms_norm_backward: not implemented yet");
}

}  // namespace mvgpt::cpu
