#pragma once
// Dropout: in training, zeroes each element with probability p and scales the rest by 1 / (1 - p);
// in eval mode (or p == 0) the input passes through untouched.
#include <mvgpt/nn/module.h>
#include <mvgpt/tensor/generator.h>

namespace mvgpt::nn {

class Dropout : public Module {
 public:
  // Masks come from `gen` (shared with the caller, e.g. the model's stream, so saving its
  // (seed, offset) makes training resumable); default_generator() when null.
  explicit Dropout(double p, Generator* gen = nullptr);
  std::string type_name() const override { return "Dropout"; }

  Tensor forward(const Tensor& x) const override;

  double p;
  Generator* gen;
};

}  // namespace mvgpt::nn
