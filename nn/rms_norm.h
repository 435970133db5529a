#pragma once
// RMSNorm over the last axis: x / sqrt(mean(x^2) + eps) * weight (Llama).
#include <mvgpt/nn/init.h>
#include <mvgpt/nn/module.h>

namespace mvgpt::nn {

class RMSNorm : public Module {
 public:
  // affine: learn weight (ones). init.std is unused.
  explicit RMSNorm(int64_t dim, double eps = 1e-6, bool affine = true, const Init& init = {});
  std::string type_name() const override { return "RMSNorm"; }

  // x (..., dim) -> same shape (the fused kernel).
  Tensor forward(const Tensor& x) const override;

  int64_t dim;
  double eps;
  Tensor weight;  // (dim), undefined when not learned
};

}  // namespace mvgpt::nn
