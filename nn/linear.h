#pragma once
// Linear: y = x @ W^T + b, weight (out, in) as PyTorch and GPT-2 checkpoints store it. With a LoRA
// adapter (nn/lora.h) it adds scale * lora_B(lora_A(dropout(x))), the two small layers registered
// as its children "lora_A" and "lora_B" (PEFT's names).
#include <memory>

#include <mvgpt/nn/init.h>
#include <mvgpt/nn/module.h>

namespace mvgpt::nn {

class Linear : public Module {
 public:
  // weight ~ N(0, init.std^2), bias zeros.
  Linear(int64_t in_features, int64_t out_features, bool bias = true, const Init& init = {});
  std::string type_name() const override { return "Linear"; }

  // x (..., in) -> (..., out).
  Tensor forward(const Tensor& x) const override;
  // Throws forward's std::invalid_argument when x is not (..., in): for callers that fuse the
  // product with what follows (nn::MLP's linear_gelu).
  void check_input(const Tensor& x) const;

  int64_t in_features, out_features;
  Tensor weight;  // (out, in)
  Tensor bias;    // (out), undefined without bias

  // The low-rank update, when nn::add_lora gave it one: A (r, in) drawn at random, B (out, r) zeros.
  std::shared_ptr<Linear> lora_A, lora_B;
  double lora_scale = 0;    // alpha / r
  double lora_dropout = 0;  // on the adapter's input, in training
};

}  // namespace mvgpt::nn
