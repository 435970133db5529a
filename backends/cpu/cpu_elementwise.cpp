// STUB: to be replaced by the real kernels.
#include <stdexcept>

#include "backends/cpu/cpu_backend.h"

namespace mvgpt::cpu {

void CpuBackend::unary(UnaryOp op, const Tensor& x, const Tensor& out, double scalar) {
  throw std::logic_error("CpuBackend::unary: not implemented yet");
}

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  throw std::logic_error("CpuBackend::binary: not implemented yet");
}

void CpuBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  throw std::logic_error("CpuBackend::where: not implemented yet");
}

}  // namespace mvgpt::cpu
