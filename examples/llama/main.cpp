// The Llama of llama.h trained for a few steps with the nn pieces alone (AdamW, cross-entropy), built
// against the installed package: sequences that count up by a step each sequence chooses, which only
// attention to the earlier tokens can predict. (In the repository, tests/train/any_model_test.cpp
// trains the same model through the apps' training loop, with checkpoints and resume.)
#include <cstdio>
#include <random>
#include <vector>

#include <mvgpt/autograd/engine.h>
#include <mvgpt/nn/optim.h>
#include <mvgpt/tensor/generator.h>

#include "llama.h"

using namespace mvgpt;
using llama::Llama;
using llama::LlamaConfig;

// B sequences of T + 1 tokens: start s, step k (both random), token i = (s + i k) mod V.
std::pair<Tensor, Tensor> batch(std::mt19937& rng, int64_t B, int64_t T, int64_t V) {
  std::vector<int32_t> x, y;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t s = int64_t(rng() % uint32_t(V)), k = 1 + int64_t(rng() % 5u);
    for (int64_t i = 0; i < T; ++i) {
      x.push_back(int32_t((s + i * k) % V));
      y.push_back(int32_t((s + (i + 1) * k) % V));
    }
  }
  return {Tensor::from_vector(x, Shape{B, T}), Tensor::from_vector(y, Shape{B, T})};
}

int main() {
  manual_seed(3);
  const LlamaConfig c;
  Llama model(c);
  nn::AdamW opt(model.parameters(), {.lr = 3e-3, .beta2 = 0.95, .weight_decay = 0.0});
  std::mt19937 rng(11);
  double first = 0, last = 0;
  for (int step = 1; step <= 150; ++step) {
    auto [x, y] = batch(rng, 16, 24, c.vocab);
    Tensor loss = model.loss(x, y);
    backward(loss);
    opt.step();
    opt.zero_grad();
    last = loss.item<double>();
    if (step == 1) first = last;
    if (step % 50 == 0 || step == 1) std::printf("llama: step %3d, loss %.4f\n", step, last);
  }
  std::printf("llama: %lld parameters (%lld layers, %lld query heads sharing %lld key/value heads); loss %.3f -> %.3f\n",
              (long long)model.num_parameters(), (long long)c.layers, (long long)c.heads, (long long)c.kv_heads, first, last);
  return last < 0.5 * first ? 0 : 1;
}
