#pragma once
// Fitting OpenBLAS's work buffers under an address-space limit (ulimit -v). See NOTE [ OpenBLAS
// under ulimit -v ] in address_space.cpp.
#include <cstdint>
#include <string>

namespace mvgpt::cpu {

// Address space OpenBLAS 0.3.21 (x86-64) reserves per thread that calls it: a 128 MiB buffer plus a
// page, measured; other builds use 32 or 64 MiB, so this is an upper bound.
inline constexpr uint64_t kBlasBufferBytes = (uint64_t(128) << 20) + 4096;
// With the 64 MiB malloc arena glibc reserves for each thread that allocates.
inline constexpr uint64_t kThreadAddressSpace = kBlasBufferBytes + (uint64_t(64) << 20);

struct ThreadBudget {
  int threads = 0;      // how many threads may call BLAS (0: not even one fits)
  uint64_t needed = 0;  // the smallest limit (bytes) that fits one thread
};
// Pure decision: with `limit` bytes of address space of which `in_use` are taken, how many of
// `wanted` threads get a BLAS buffer (and a malloc arena), keeping half of what is left for
// everything else.
ThreadBudget blas_threads_that_fit(uint64_t limit, uint64_t in_use, int wanted);

// Once per process, before the first BLAS call (CpuBackend's constructor): when RLIMIT_AS is finite
// and too small for a buffer per TBB thread, lowers TBB's parallelism to what fits (with a note on
// stderr); throws std::runtime_error saying which limit to set when not even one thread fits.
void fit_blas_buffers_in_address_space();

}  // namespace mvgpt::cpu
