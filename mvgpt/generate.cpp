#include "mvgpt/generate.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "autograd/grad_mode.h"
#include "backends/ops.h"
#include "tensor/philox.h"

namespace mvgpt::gpt {

int32_t sample_token(const Tensor& logits, const SampleOptions& options, uint64_t draw_index) {
  if (logits.dim() != 1) throw std::invalid_argument("sample_token: expected logits (V), found " + mvgpt::to_string(logits.shape()));
  std::vector<double> p = ops::to(ops::to(logits, Device::cpu()), DType::f64).to_vector<double>();
  if (options.vocab_limit < 0)
    throw std::invalid_argument("sample_token: vocab_limit must be >= 0, found " + std::to_string(options.vocab_limit));
  if (options.vocab_limit > 0 && options.vocab_limit < int64_t(p.size())) p.resize(size_t(options.vocab_limit));
  const int64_t V = int64_t(p.size());
  for (int64_t i = 0; i < V; ++i)
    if (std::isnan(p[size_t(i)]) || p[size_t(i)] == INFINITY)
      throw std::runtime_error("sample_token: the logit of token " + std::to_string(i) + " is " +
                               (std::isnan(p[size_t(i)]) ? "NaN" : "infinite") +
                               ": the model's weights or activations are not finite; use another checkpoint");
  if (V == 0 || *std::max_element(p.begin(), p.end()) == -INFINITY)
    throw std::runtime_error("sample_token: every logit is -infinity: no token can be drawn");
  if (options.temperature <= 0) return int32_t(std::max_element(p.begin(), p.end()) - p.begin());
  if (options.top_k > 0 && options.top_k < V) {
    std::vector<double> sorted = p;
    std::nth_element(sorted.begin(), sorted.begin() + (options.top_k - 1), sorted.end(), std::greater<>());
    const double kth = sorted[size_t(options.top_k - 1)];
    for (double& x : p)
      if (x < kth) x = -INFINITY;
  }
  const double top = *std::max_element(p.begin(), p.end());
  double total = 0;
  for (double& x : p) {
    x = std::exp((x - top) / options.temperature);
    total += x;
  }
  double u = philox::uniform(options.seed, draw_index) * total;
  for (int64_t i = 0; i < V; ++i) {
    u -= p[size_t(i)];
    if (u < 0) return int32_t(i);
  }
  // Rounding left u just above zero: the last token with any probability.
  for (int64_t i = V - 1; i >= 0; --i)
    if (p[size_t(i)] > 0) return int32_t(i);
  return 0;
}

static Tensor ids_tensor(std::vector<int32_t>::const_iterator begin, std::vector<int32_t>::const_iterator end) {
  std::vector<int32_t> ids(begin, end);
  return Tensor::from_vector(ids, Shape{1, int64_t(ids.size())});
}

std::vector<int32_t> generate(const GPT& model, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                              const SampleOptions& options, const std::function<bool(int32_t)>& on_token) {
  if (prompt.empty()) throw std::invalid_argument("generate: the prompt is empty (give at least one token)");
  const GPTConfig& config = model.config();
  const int64_t window = config.block_size;
  NoGradGuard no_grad;

  // The story so far; only its last window is ever read.
  std::vector<int32_t> story(prompt.size() > size_t(window) ? prompt.end() - window : prompt.begin(), prompt.end());
  std::vector<int32_t> out;
  bool cached = options.use_cache;
  KVCache cache(config);
  auto last_window = [&] { return ids_tensor(story.end() - std::min<int64_t>(window, int64_t(story.size())), story.end()); };

  Tensor logits = cached ? model.forward(last_window(), &cache, true) : model.forward(last_window(), nullptr, true);
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    int32_t token = sample_token(ops::reshape(logits, {-1}), options, uint64_t(i));
    out.push_back(token);
    story.push_back(token);
    if (on_token && !on_token(token)) break;
    if (i + 1 == max_new_tokens) break;
    // A learned-position model's cache serves until its positions run out; then it re-runs windows.
    if (cached && !config.rope && cache.position >= window) cached = false;
    if (cached) {
      if (cache.length() >= window) cache.slide(window - 1);
      logits = model.forward(ids_tensor(story.end() - 1, story.end()), &cache, true);
    } else {
      logits = model.forward(last_window(), nullptr, true);
    }
  }
  return out;
}

}  // namespace mvgpt::gpt
