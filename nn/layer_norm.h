#pragma once
// LayerNorm over the last axis: (x - mean) / sqrt(var + eps) * weight + bias (biased variance).
#include <mvgpt/nn/init.h>
#include <mvgpt/nn/module.h>

namespace mvgpt::nn {

class LayerNorm : public Module {
 public:
  // affine: learn weight (ones) and, when bias, bias (zeros). init.std is unused.
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool affine = true, bool bias = true, const Init& init = {});
  std::string type_name() const override { return "LayerNorm"; }

  // x (..., dim) -> same shape (the fused kernel).
  Tensor forward(const Tensor& x) const override;
  // Rounded to bfloat16 under the bf16 policy (layer_norm_for_product).
  Tensor forward_for_product(const Tensor& x) const override;

  int64_t dim;
  double eps;
  Tensor weight, bias;  // (dim) each, undefined when not learned
};

}  // namespace mvgpt::nn
