#pragma once
// Predicting a story past the context window, three ways (the seed's measurement):
//   window: each token past the first window predicted from the W tokens before it, the whole
//           window run again for each token (what a learned-position model has to do);
//   cache:  one token at a time through the KV cache, which drops its oldest token once it holds a
//           window (RoPE only: attention covers the same W tokens as `window`, at one token's work
//           each; from the second layer on, the cached keys and values of those tokens were computed
//           when older tokens were still in view, so the losses are close to the window's, not equal);
//   full:   all tokens at once, each attending as far back as the stream goes (RoPE only).
// W is the model's block_size. Each returns the loss of every token past the first window (targets
// at positions W .. L-1 of a stream of L tokens) and the milliseconds per such token, measured with
// a steady clock around the method's work (the cache's first W - 1 tokens, which only fill it, are
// not timed; `full` is one forward pass, divided by the tokens it is scored on).
#include <cstdint>
#include <string>
#include <vector>

#include <mvgpt/gpt/model.h>

namespace mvgpt::apps {

enum class ContextMethod { window, cache, full };
std::string to_string(ContextMethod m);
// "window", "cache", "full"; std::invalid_argument otherwise.
ContextMethod parse_context_method(const std::string& name);
// Whether the model can use the method: window always, cache and full need rotary positions.
bool supports(const gpt::GPTConfig& config, ContextMethod m);

struct ContextResult {
  std::vector<double> losses;  // losses[j]: the token at position block_size + j
  double seconds = 0;          // timed work
  double ms_per_token() const { return losses.empty() ? 0 : 1e3 * seconds / double(losses.size()); }
};

// `stream` must hold more than block_size tokens, each inside the vocabulary; the model should be
// in eval mode. Throws std::invalid_argument when the method does not fit the model.
ContextResult context_losses(const gpt::GPT& model, const std::vector<int32_t>& stream, ContextMethod method,
                             Device device);

}  // namespace mvgpt::apps
