// STUB: to be replaced by the real kernels.
#include <stdexcept>

#include "backends/cpu/cpu_backend.h"

namespace mvgpt::cpu {

void CpuBackend::index_select(const Tensor& src, int axis, const Tensor& index, const Tensor& out) {
  throw std::logic_error("CpuBackend::index_select: not implemented yet");
}

void CpuBackend::gather(const Tensor& src, int axis, const Tensor& index, const Tensor& out) {
  throw std::logic_error("CpuBackend::gather: not implemented yet");
}

void CpuBackend::index_add(const Tensor& dst, int axis, const Tensor& index, const Tensor& src) {
  throw std::logic_error("CpuBackend::index_add: not implemented yet");
}

void CpuBackend::scatter_add(const Tensor& dst, int axis, const Tensor& index, const Tensor& src) {
  throw std::logic_error("CpuBackend::scatter_add: not implemented yet");
}

}  // namespace mvgpt::cpu
