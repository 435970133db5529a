#pragma once
// The framework's one thread pool is oneTBB's. parallel_for splits [0, n) into chunks of at least
// `grain` iterations, so small tensors stay on the calling thread.
#include <cstdint>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace mvgpt::cpu {

// Work below this many elements runs serially: spawning costs more than it saves.
inline constexpr int64_t kElementwiseGrain = 32768;

template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& body) {
  if (n <= 0) return;
  if (n <= grain) {
    body(int64_t(0), n);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain),
                    [&](const tbb::blocked_range<int64_t>& r) { body(r.begin(), r.end()); });
}

}  // namespace mvgpt::cpu
