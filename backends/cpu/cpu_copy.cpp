// STUB: to be replaced by the real kernels.
#include <stdexcept>

#include "backends/cpu/cpu_backend.h"

namespace mvgpt::cpu {

void CpuBackend::copy(const Tensor& src, const Tensor& dst) {
  throw std::logic_error("CpuBackend::copy: not implemented yet");
}

void CpuBackend::copy_between_devices(const Tensor& src, const Tensor& dst) {
  throw std::logic_error("CpuBackend::copy_between_devices: not implemented yet");
}

void CpuBackend::fill(const Tensor& dst, double value) {
  throw std::logic_error("CpuBackend::fill: not implemented yet");
}

void CpuBackend::arange(const Tensor& dst, double start, double step) {
  throw std::logic_error("CpuBackend::arange: not implemented yet");
}

void CpuBackend::random(const Tensor& dst, RandomKind kind, uint64_t seed, uint64_t offset) {
  throw std::logic_error("CpuBackend::random: not implemented yet");
}

}  // namespace mvgpt::cpu
