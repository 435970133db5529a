#include "backends/cpu/cpu_backend.h"

#include "backends/cpu/openblas_core.h"
#include "tensor/allocator.h"

namespace mvgpt::cpu {

// Fix a mis-detected OpenBLAS kernel set before the first GEMM (once per process).
CpuBackend::CpuBackend() { ensure_openblas_core(); }

Allocator& CpuBackend::allocator() { return allocator_for(Device::cpu()); }

}  // namespace mvgpt::cpu
