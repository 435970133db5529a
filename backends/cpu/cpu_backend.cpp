#include "backends/cpu/cpu_backend.h"

#include "tensor/allocator.h"

namespace mvgpt::cpu {

CpuBackend::CpuBackend() = default;

Allocator& CpuBackend::allocator() { return allocator_for(Device::cpu()); }

}  // namespace mvgpt::cpu
