#include <mvgpt/gpt/generate.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/tensor/philox.h>

namespace mvgpt::gpt {

int32_t sample_token(const Tensor& logits, const SampleOptions& options, uint64_t draw_index) {
  if (logits.dim() != 1) throw std::invalid_argument("sample_token: expected logits (V), found " + mvgpt::to_string(logits.shape()));
  std::vector<double> p = mvgpt::to(mvgpt::to(logits, Device::cpu()), DType::f64).to_vector<double>();
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
  if (options.top_p < 1) {
    // Nucleus sampling: keep the likeliest tokens until their mass reaches top_p (ties broken by id,
    // so the draw is deterministic), drop the rest.
    std::vector<int64_t> order(size_t(V), 0);
    for (int64_t i = 0; i < V; ++i) order[size_t(i)] = i;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[size_t(a)] > p[size_t(b)]; });
    double kept = 0;
    size_t n = 0;
    while (n < order.size() && (n == 0 || kept < options.top_p * total)) kept += p[size_t(order[n++])];
    for (size_t i = n; i < order.size(); ++i) p[size_t(order[i])] = 0;
    total = kept;
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

// (1, T) token ids on `device` (the model's: its embedding gathers there).
static Tensor ids_tensor(std::vector<int32_t>::const_iterator begin, std::vector<int32_t>::const_iterator end,
                         Device device) {
  std::vector<int32_t> ids(begin, end);
  Tensor t = Tensor::from_vector(ids, Shape{1, int64_t(ids.size())});
  return device.is_cpu() ? t : mvgpt::to(t, device);
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
  // The cache and the ids live where the model's weights do.
  const Tensor& weight = model.wte->weight;
  const Device device = weight.device();
  KVCache cache(config, 1, 0, cache_dtype(weight.dtype(), device), device);
  auto last_window = [&] {
    return ids_tensor(story.end() - std::min<int64_t>(window, int64_t(story.size())), story.end(), device);
  };

  Tensor logits = cached ? model.forward(last_window(), &cache, true) : model.forward(last_window(), nullptr, true);
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    int32_t token = sample_token(mvgpt::reshape(logits, {-1}), options, uint64_t(i));
    out.push_back(token);
    story.push_back(token);
    if (on_token && !on_token(token)) break;
    if (i + 1 == max_new_tokens) break;
    // A learned-position model's cache serves until its positions run out; then it re-runs windows.
    if (cached && !config.rope && cache.position >= window) cached = false;
    if (cached) {
      if (cache.length() >= window) cache.slide(window - 1);
      logits = model.forward(ids_tensor(story.end() - 1, story.end(), device), &cache, true);
    } else {
      logits = model.forward(last_window(), nullptr, true);
    }
  }
  return out;
}

std::vector<int32_t> generate(const nn::CausalLM& model, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                              const SampleOptions& options, const std::function<bool(int32_t)>& on_token) {
  if (const auto* gpt = dynamic_cast<const GPT*>(&model)) return generate(*gpt, prompt, max_new_tokens, options, on_token);
  if (prompt.empty()) throw std::invalid_argument("generate: the prompt is empty (give at least one token)");
  const int64_t window = model.block_size();
  NoGradGuard no_grad;
  const std::vector<Tensor> weights = model.parameters();
  const Device device = weights.empty() ? Device::cpu() : weights.front().device();
  std::vector<int32_t> story(prompt.begin(), prompt.end()), out;
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    const int64_t t = std::min<int64_t>(window, int64_t(story.size()));
    Tensor logits = model.forward(ids_tensor(story.end() - t, story.end(), device));  // (1, t, V)
    int32_t token = sample_token(mvgpt::reshape(mvgpt::narrow(logits, 1, t - 1, 1), {-1}), options, uint64_t(i));
    out.push_back(token);
    story.push_back(token);
    if (on_token && !on_token(token)) break;
  }
  return out;
}

}  // namespace mvgpt::gpt
