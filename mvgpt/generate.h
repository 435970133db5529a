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

#include "mvgpt/model.h"

namespace mvgpt::gpt {

struct SampleOptions {
  double temperature = 1.0;  // 0: always the likeliest token
  int64_t top_k = 0;         // 0: the whole vocabulary
  double top_p = 1.0;        // nucleus: the fewest likeliest tokens whose probability reaches top_p (1: all)
  uint64_t seed = 0;         // the Philox stream the draws come from
  bool use_cache = true;
};

// Picks the next token from logits (V) float32: top-k, temperature, top-p, then a draw of philox
// uniform(seed, draw_index). Deterministic for the same inputs.
int32_t sample_token(const Tensor& logits, const SampleOptions& options, uint64_t draw_index);

// Returns the new tokens; on_token (if given) sees each as it is produced and may return false to stop.
std::vector<int32_t> generate(const GPT& model, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                              const SampleOptions& options = {},
                              const std::function<bool(int32_t)>& on_token = {});

}  // namespace mvgpt::gpt
