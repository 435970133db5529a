#include "apps/common/context_methods.h"

#include <stdexcept>

#include "apps/common/app.h"
#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/fused/cross_entropy.h>
#include <mvgpt/gpt/kv_cache.h>

namespace mvgpt::apps {

std::string to_string(ContextMethod m) {
  switch (m) {
    case ContextMethod::window: return "window";
    case ContextMethod::cache: return "cache";
    case ContextMethod::full: return "full";
  }
  return "?";
}

ContextMethod parse_context_method(const std::string& name) {
  if (name == "window") return ContextMethod::window;
  if (name == "cache") return ContextMethod::cache;
  if (name == "full") return ContextMethod::full;
  throw std::invalid_argument("unknown context method '" + name + "' (known: window, cache, full)");
}

bool supports(const gpt::GPTConfig& config, ContextMethod m) { return m == ContextMethod::window || config.rope; }

namespace {

// tokens[start, start + n) as a (1, n) int32 tensor on the device.
Tensor slice(const std::vector<int32_t>& tokens, size_t start, size_t n, Device device) {
  std::vector<int32_t> part(tokens.begin() + std::ptrdiff_t(start), tokens.begin() + std::ptrdiff_t(start + n));
  return mvgpt::to(Tensor::from_vector(part, {1, int64_t(n)}), device);
}

// Per-position losses of logits (1, T, V) against targets[first, first + T), on the host.
std::vector<double> losses_of(const Tensor& logits, const std::vector<int32_t>& targets, size_t first, Device device) {
  const int64_t T = logits.size(1), V = logits.size(2);
  Tensor y = slice(targets, first, size_t(T), device);
  Tensor l = cross_entropy(reshape(logits, {T, V}), reshape(y, {T}), -100, Reduction::none);
  std::vector<float> host = mvgpt::to(l, Device::cpu()).to_vector<float>();
  return {host.begin(), host.end()};
}

}  // namespace

ContextResult context_losses(const gpt::GPT& model, const std::vector<int32_t>& stream, ContextMethod method,
                             Device device) {
  NoGradGuard no_grad;
  const auto& config = model.config();
  const size_t W = size_t(config.block_size), L = stream.size();
  if (L <= W)
    throw std::invalid_argument("context: a stream of " + std::to_string(L) + " tokens has none past the window of " +
                                std::to_string(W));
  if (!supports(config, method))
    throw std::invalid_argument("context: the '" + to_string(method) +
                                "' method needs rotary positions; this model has a learned table of " +
                                std::to_string(W) + " positions");
  ContextResult r;
  r.losses.reserve(L - W);
  switch (method) {
    case ContextMethod::window: {
      synchronize(device);
      auto t0 = Clock::now();
      for (size_t t = W; t < L; ++t) {
        Tensor logits = model.forward(slice(stream, t - W, W, device), nullptr, /*last_only=*/true);  // (1, 1, V)
        r.losses.push_back(losses_of(logits, stream, t, device)[0]);
      }
      synchronize(device);
      r.seconds = seconds_since(t0);
      break;
    }
    case ContextMethod::cache: {
      gpt::KVCache cache(config, 1, 0, gpt::cache_dtype(DType::f32, device), device);
      for (size_t i = 0; i + 1 < L; ++i) {
        const bool timed = i + 1 >= W;  // this token's logits predict a token past the first window
        if (timed) synchronize(device);
        auto t0 = Clock::now();
        if (cache.length() == int64_t(W)) cache.slide(int64_t(W) - 1);  // room for the newest token
        Tensor logits = model.forward(slice(stream, i, 1, device), &cache);  // (1, 1, V)
        if (timed) {
          r.losses.push_back(losses_of(logits, stream, i + 1, device)[0]);
          synchronize(device);
          r.seconds += seconds_since(t0);
        }
      }
      break;
    }
    case ContextMethod::full: {
      synchronize(device);
      auto t0 = Clock::now();
      Tensor logits = model.forward(slice(stream, 0, L - 1, device));  // (1, L - 1, V): all positions
      Tensor past = narrow(logits, 1, int64_t(W) - 1, int64_t(L - W));  // predictions of W .. L-1
      r.losses = losses_of(contiguous(past), stream, W, device);
      synchronize(device);
      r.seconds = seconds_since(t0);
      break;
    }
  }
  return r;
}

}  // namespace mvgpt::apps
