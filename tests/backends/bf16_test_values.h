#pragma once
// bf16 test values shared by the AMX tests: uniform in [-2, 2), rounded to bf16, from a seed.
#include <cstdint>
#include <random>
#include <vector>

#include <mvgpt/tensor/dtype.h>

namespace mvgpt::testing {

inline std::vector<bfloat16> random_bf16(int64_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<bfloat16> v(static_cast<size_t>(n));
  for (auto& x : v) x = bfloat16(u(g));
  return v;
}

}  // namespace mvgpt::testing
