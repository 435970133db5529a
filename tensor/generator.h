#pragma once
// A random stream: a seed and how many elements have been drawn. Ops that draw n elements take the
// range [offset, offset + n) and advance; saving (seed, offset) saves the stream exactly.
#include <cstdint>

namespace mvgpt {

struct Generator {
  uint64_t seed = 0;
  uint64_t offset = 0;

  explicit Generator(uint64_t s = 0) : seed(s) {}
  // Reserves n elements of the stream and returns where they start.
  uint64_t take(uint64_t n) {
    uint64_t start = offset;
    offset += n;
    return start;
  }
};

// The process-wide stream used when an op is not given one (seeded with manual_seed).
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace mvgpt
