#pragma once
// Losses over the differentiable cross-entropy op (autograd/ops.h), shaped for language models.
// Named *_loss / *_per_token rather than plain cross_entropy: an unqualified call with Tensor
// arguments also finds mvgpt::cross_entropy by argument-dependent lookup and would be ambiguous.
#include <mvgpt/autograd/ops.h>
#include <mvgpt/fused/cross_entropy.h>

namespace mvgpt::nn {

// logits (..., V), targets (...) int: the mean negative log-likelihood over the targets that are not
// ignore_index (NaN when every target is ignored, as PyTorch).
inline Tensor cross_entropy_loss(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100) {
  return mvgpt::cross_entropy(logits, targets, ignore_index, Reduction::mean);
}

// The per-token losses, shaped as targets (0 where ignored): for evaluation and masking.
inline Tensor cross_entropy_per_token(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100) {
  return mvgpt::cross_entropy(logits, targets, ignore_index, Reduction::none);
}

}  // namespace mvgpt::nn
