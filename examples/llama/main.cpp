// A Llama-style language model written from the nn pieces: RMSNorm before each sublayer, attention
// with rotary positions and grouped KV heads (2 key/value heads shared by 4 query heads), a SwiGLU
// feed-forward, an untied output layer. Trained for a few steps on sequences that count up by a step
// each sequence chooses, which only attention to the earlier tokens can predict.
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include <mvgpt/autograd/engine.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/fused/cross_entropy.h>
#include <mvgpt/nn/attention.h>
#include <mvgpt/nn/embedding.h>
#include <mvgpt/nn/linear.h>
#include <mvgpt/nn/mlp.h>
#include <mvgpt/nn/module.h>
#include <mvgpt/nn/optim.h>
#include <mvgpt/nn/rms_norm.h>
#include <mvgpt/tensor/generator.h>

using namespace mvgpt;

struct LlamaConfig {
  int64_t vocab = 32, dim = 64, layers = 2, heads = 4, kv_heads = 2, hidden = 172;  // hidden ~ 8/3 dim
};

class LlamaBlock : public nn::Module {
 public:
  explicit LlamaBlock(const LlamaConfig& c) {
    attn_norm = register_module("attention_norm", std::make_shared<nn::RMSNorm>(c.dim, 1e-5));
    attn = register_module("attention", std::make_shared<nn::CausalSelfAttention>(nn::AttentionConfig{
                                            .n_embd = c.dim, .n_head = c.heads, .n_kv_head = c.kv_heads, .rope = true, .bias = false}));
    ffn_norm = register_module("ffn_norm", std::make_shared<nn::RMSNorm>(c.dim, 1e-5));
    ffn = register_module("feed_forward", std::make_shared<nn::SwiGLU>(c.dim, c.hidden));
  }
  std::string type_name() const override { return "LlamaBlock"; }
  Tensor forward(const Tensor& x) const override {  // (B, T, C)
    Tensor h = x + (*attn)((*attn_norm)(x));
    return h + (*ffn)((*ffn_norm)(h));
  }
  std::shared_ptr<nn::Module> attn_norm, attn, ffn_norm, ffn;
};

class Llama : public nn::Module {
 public:
  explicit Llama(const LlamaConfig& c) {
    tok_embeddings = register_module("tok_embeddings", std::make_shared<nn::Embedding>(c.vocab, c.dim));
    layers = register_module("layers", std::make_shared<nn::Sequential>());
    for (int64_t i = 0; i < c.layers; ++i) layers->push_back(std::make_shared<LlamaBlock>(c));
    norm = register_module("norm", std::make_shared<nn::RMSNorm>(c.dim, 1e-5));
    output = register_module("output", std::make_shared<nn::Linear>(c.dim, c.vocab, false));
  }
  std::string type_name() const override { return "Llama"; }
  Tensor forward(const Tensor& ids) const override {  // (B, T) -> logits (B, T, V)
    return (*output)((*norm)((*layers)((*tok_embeddings)(ids))));
  }
  std::shared_ptr<nn::Module> tok_embeddings, norm, output;
  std::shared_ptr<nn::Sequential> layers;
};

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
    Tensor loss = cross_entropy(reshape(model(x), {-1, c.vocab}), reshape(y, {-1}));
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
