#include <mvgpt/backends/cpu/cpu_backend.h>

#include <mvgpt/backends/cpu/address_space.h>
#include <mvgpt/backends/cpu/blas.h>
#include <mvgpt/backends/cpu/openblas_core.h>
#include <mvgpt/tensor/allocator.h>

namespace mvgpt::cpu {

// Fix a mis-detected OpenBLAS kernel set and hold OpenBLAS to one thread (NOTE [ One thread pool ]
// in blas.cpp) before the first GEMM, once per process.
CpuBackend::CpuBackend() {
  ensure_openblas_core();
  fit_blas_buffers_in_address_space();  // a buffer per thread, or OpenBLAS spins (address_space.cpp)
  blas::use_one_blas_thread();
}

Allocator& CpuBackend::allocator() { return allocator_for(Device::cpu()); }

}  // namespace mvgpt::cpu
