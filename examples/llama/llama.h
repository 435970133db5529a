#pragma once
// A Llama-style language model written from the nn pieces: RMSNorm before each sublayer, attention
// with rotary positions and grouped KV heads (2 key/value heads shared by 4 query heads), a SwiGLU
// feed-forward, an untied output layer. An nn::CausalLM, so the shared training loop, held-out
// evaluation, generation and checkpoints take it as they take the GPT (tests/train/any_model_test.cpp).
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include <mvgpt/autograd/ops.h>
#include <mvgpt/nn/attention.h>
#include <mvgpt/nn/causal_lm.h>
#include <mvgpt/nn/embedding.h>
#include <mvgpt/nn/linear.h>
#include <mvgpt/nn/mlp.h>
#include <mvgpt/nn/module.h>
#include <mvgpt/nn/rms_norm.h>

namespace llama {

using namespace mvgpt;

struct LlamaConfig {
  int64_t vocab = 32, dim = 64, layers = 2, heads = 4, kv_heads = 2, hidden = 172;  // hidden ~ 8/3 dim
  int64_t block_size = 64;  // the longest sequence (rotary positions have no table: any would do)

  std::string to_json() const {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "{\"architecture\": \"llama-example\", \"vocab\": %lld, \"dim\": %lld, \"layers\": %lld, "
                  "\"heads\": %lld, \"kv_heads\": %lld, \"hidden\": %lld, \"block_size\": %lld}\n",
                  (long long)vocab, (long long)dim, (long long)layers, (long long)heads, (long long)kv_heads,
                  (long long)hidden, (long long)block_size);
    return buf;
  }
  // Reads what to_json wrote; std::invalid_argument naming `path` and the field that is missing or
  // not a positive integer.
  static LlamaConfig from_json(const std::string& text, const std::string& path) {
    if (text.find("\"architecture\": \"llama-example\"") == std::string::npos)
      throw std::invalid_argument(path + ": not the config of examples/llama (\"architecture\": \"llama-example\")");
    auto field = [&](const char* key) {
      const std::string quoted = std::string("\"") + key + "\":";
      const size_t at = text.find(quoted);
      long long v = 0;
      if (at == std::string::npos || std::sscanf(text.c_str() + at + quoted.size(), "%lld", &v) != 1 || v <= 0)
        throw std::invalid_argument(path + ": \"" + key + "\" is missing or not a positive integer");
      return int64_t(v);
    };
    return {field("vocab"), field("dim"), field("layers"), field("heads"), field("kv_heads"), field("hidden"),
            field("block_size")};
  }
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

class Llama : public nn::CausalLM {
 public:
  explicit Llama(const LlamaConfig& c) : config(c) {
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
  int64_t block_size() const override { return config.block_size; }
  int64_t vocab_size() const override { return config.vocab; }
  std::string config_json() const override { return config.to_json(); }

  LlamaConfig config;
  std::shared_ptr<nn::Module> tok_embeddings, norm, output;
  std::shared_ptr<nn::Sequential> layers;
};

}  // namespace llama

