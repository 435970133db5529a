#pragma once
// Text generation, token by token, with the KV cache:
//  - the prompt is cut to its last block_size tokens;
//  - with RoPE, once the cache holds a whole window, the oldest token is dropped before the newest
//    goes in (the cache slides), so each token costs one token's work however long the story;
//  - with learned positions, the cache serves until the window is full; past it (or with
//    use_cache false) the whole last window is run again for each token.
#include <cstdint>
#include <functional>
#include <vector>

#include <mvgpt/gpt/model.h>
#include <mvgpt/nn/causal_lm.h>

namespace mvgpt::gpt {

struct SampleOptions {
  double temperature = 1.0;  // 0: always the likeliest token
  int64_t top_k = 0;         // 0: the whole vocabulary
  double top_p = 1.0;        // nucleus: the fewest likeliest tokens whose probability reaches top_p (1: all)
  uint64_t seed = 0;         // the Philox stream the draws come from
  bool use_cache = true;
  // 0: any id of the model. Else only ids below it are drawn: a model whose vocabulary was padded past
  // its tokenizer's (a --config vocab_size above it) must not produce ids the tokenizer lacks.
  int64_t vocab_limit = 0;
};

// Picks the next token from logits (V) float32: top-k, temperature, top-p, then a draw of philox
// uniform(seed, draw_index). Deterministic for the same inputs. Throws std::runtime_error when a
// logit is NaN or +infinity (a model with broken weights; the draw would be meaningless).
int32_t sample_token(const Tensor& logits, const SampleOptions& options, uint64_t draw_index);

// Returns the new tokens; on_token (if given) sees each as it is produced and may return false to stop.
std::vector<int32_t> generate(const GPT& model, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                              const SampleOptions& options = {},
                              const std::function<bool(int32_t)>& on_token = {});
// Any causal LM: a GPT goes the way above; another model has no cache here, so the whole last
// window is run again for each token (the same tokens as with a cache, at a window's cost each).
std::vector<int32_t> generate(const nn::CausalLM& model, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                              const SampleOptions& options = {},
                              const std::function<bool(int32_t)>& on_token = {});

}  // namespace mvgpt::gpt
