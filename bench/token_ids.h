#pragma once
// The token ids the series' model is timed on, shared by mvgpt_bench and mvgpt_step_profile: seeded
// uniform ids in [0, V), (B, T) int32 on the CPU.
#include <cstdint>
#include <vector>

#include <mvgpt/autograd/ops.h>

namespace mvgpt::bench {

inline Tensor token_ids(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  Generator g(seed);
  Tensor u = rand({B, T}, DType::f64, Device::cpu(), &g);
  std::vector<int32_t> ids;
  for (double x : u.to_vector<double>()) ids.push_back(int32_t(x * double(V)));
  return Tensor::from_vector(ids, Shape{B, T});
}

}  // namespace mvgpt::bench
