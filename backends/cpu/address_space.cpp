#include <mvgpt/backends/cpu/address_space.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <stdexcept>

#include <tbb/global_control.h>
#include <tbb/task_arena.h>

namespace mvgpt::cpu {

// NOTE [ OpenBLAS under ulimit -v ]
// OpenBLAS gives each thread that calls it a work buffer (blas_memory_alloc: a malloc of 128 MiB + 4 KiB
// in 0.3.21, mostly never touched) at that thread's first call, and when the allocation fails it
// retries in a loop that never ends: under a low `ulimit -v` (RLIMIT_AS) the first GEMM spins at full
// CPU with no message (seen with gdb: a TBB worker in blas_memory_alloc -> malloc, forever). Our GEMMs
// run on every TBB thread (OpenBLAS itself is held to one: NOTE [ One thread pool ] in blas.cpp), so
// the buffers take about threads x 128 MiB of address space, and glibc reserves 64 MiB more for the
// malloc arena of each thread that allocates (measured: the space in use when the backend starts
// varies by 64 MiB steps with how far the TBB workers got). Resident memory is not the problem (the
// pages are never touched); only the address-space limit is. So, before the first GEMM: with a finite
// limit, TBB's parallelism is lowered to the threads whose buffers fit in half of the space left (the
// other half for the model and its activations, whose failures are std::bad_alloc, a clear error);
// when not even one fits, a one-line error says which limit would do.

ThreadBudget blas_threads_that_fit(uint64_t limit, uint64_t in_use, int wanted) {
  ThreadBudget b;
  b.needed = in_use + 2 * kThreadAddressSpace;
  const uint64_t left = limit > in_use ? limit - in_use : 0;
  b.threads = int(std::min<uint64_t>(uint64_t(std::max(wanted, 0)), left / 2 / kThreadAddressSpace));
  return b;
}

namespace {

uint64_t address_space_in_use() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0;
  statm >> pages;  // the first field: total program size, in pages
  return pages * uint64_t(::sysconf(_SC_PAGESIZE));
}

std::string mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

void fit_blas_buffers_in_address_space() {
  static std::mutex mutex;
  static bool done = false;
  static std::unique_ptr<tbb::global_control> limit_threads;  // lives to the end of the process
  std::lock_guard<std::mutex> lock(mutex);
  if (done) return;
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) != 0 || as.rlim_cur == RLIM_INFINITY) {
    done = true;
    return;
  }
  const uint64_t limit = uint64_t(as.rlim_cur), in_use = address_space_in_use();
  const int wanted = tbb::this_task_arena::max_concurrency();
  const ThreadBudget b = blas_threads_that_fit(limit, in_use, wanted);
  if (b.threads == 0)  // not marked done: a later backend use fails the same way, it does not spin
    throw std::runtime_error("the address-space limit (ulimit -v) of " + mib(limit) + " leaves too little room: " +
                             mib(in_use) + " are in use and each thread takes " + mib(kThreadAddressSpace) +
                             " (OpenBLAS's buffer, which it retries forever to get, and a malloc arena); raise it to at least " +
                             mib(b.needed) + " (ulimit -v " + std::to_string(b.needed >> 10) +
                             ") plus what the model needs, or remove it");
  if (b.threads < wanted) {
    limit_threads = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, size_t(b.threads));
    std::fprintf(stderr, "note: the address-space limit (ulimit -v) of %s leaves room for OpenBLAS's buffers of %d of %d threads: using %d\n",
                 mib(limit).c_str(), b.threads, wanted, b.threads);
  }
  done = true;
}

}  // namespace mvgpt::cpu
