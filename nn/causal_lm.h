#pragma once
// A causal language model, whatever is inside: what the training loop, the held-out evaluation,
// generation and checkpoints need of a model, and nothing else. The GPT of mvgpt/gpt implements it,
// and so does examples/llama/llama.h; any nn::Module that maps token ids to next-token logits can.
#include <cstdint>
#include <string>

#include <mvgpt/nn/loss.h>
#include <mvgpt/nn/module.h>

namespace mvgpt::nn {

class CausalLM : public Module {
 public:
  // ids (B, T) int32 or int64, T <= block_size() -> logits (B, T, vocab_size()): position t predicts
  // token t + 1 from tokens 0..t alone.
  Tensor forward(const Tensor& ids) const override = 0;
  // The mean cross-entropy of predicting targets (B, T) from ids (B, T) (targets of -100 are
  // ignored): the training loss. The default is forward()'s logits through cross_entropy_loss; a
  // model may fuse the two.
  virtual Tensor loss(const Tensor& ids, const Tensor& targets) const {
    return cross_entropy_loss(reshape(forward(ids), {-1, vocab_size()}), reshape(targets, {-1}));
  }
  // The longest sequence forward() takes (the context window) and the number of tokens it predicts.
  virtual int64_t block_size() const = 0;
  virtual int64_t vocab_size() const = 0;
  // The model's configuration as a JSON object: saved as a checkpoint's config.json, from which the
  // model's own loader builds it again (nn/checkpoint.h).
  virtual std::string config_json() const = 0;
};

}  // namespace mvgpt::nn
