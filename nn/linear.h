#pragma once
// Linear: y = x @ W^T + b, weight (out, in) as PyTorch and GPT-2 checkpoints store it.
#include "nn/init.h"
#include "nn/module.h"

namespace mvgpt::nn {

class Linear : public Module {
 public:
  // weight ~ N(0, init.std^2), bias zeros.
  Linear(int64_t in_features, int64_t out_features, bool bias = true, const Init& init = {});
  std::string type_name() const override { return "Linear"; }

  // x (..., in) -> (..., out).
  Tensor forward(const Tensor& x) const override;

  int64_t in_features, out_features;
  Tensor weight;  // (out, in)
  Tensor bias;    // (out), undefined without bias
};

}  // namespace mvgpt::nn
