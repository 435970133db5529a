#pragma once
// The GPT of the series (GPT-2 structure, nanoGPT's parameter names):
//   transformer.wte (V, C) token embedding, transformer.wpe (block_size, C) only without RoPE,
//   transformer.h.{i}: x + attn(ln_1(x)), x + mlp(ln_2(x)) (pre-norm blocks),
//   transformer.ln_f, and the output head tied to wte (not stored).
// With RoPE the blocks rotate queries and keys by absolute positions that start at the cache's
// position; the same code builds the Llama-style variant (RMSNorm, SwiGLU, grouped KV heads).
// config.dropout > 0 drops, in training mode only, where nanoGPT does: the embeddings, the attention
// weights (through the unfused attention, the fused kernel has no mask) and each residual branch.
#include <memory>

#include <mvgpt/gpt/config.h>
#include <mvgpt/gpt/kv_cache.h>
#include <mvgpt/nn/attention.h>
#include <mvgpt/nn/causal_lm.h>
#include <mvgpt/nn/embedding.h>
#include <mvgpt/nn/linear.h>
#include <mvgpt/nn/module.h>

namespace mvgpt::gpt {

class Block : public nn::Module {
 public:
  Block(const GPTConfig& config, const nn::Init& init, const nn::Init& residual_init);
  std::string type_name() const override { return "Block"; }
  // x (B, T, C), positions (T) int64 for RoPE (undefined: the cache's length + 0..T-1).
  Tensor forward(const Tensor& x, const Tensor& positions, nn::KVCacheLayer* cache) const;
  // Positions 0..T-1, no cache (what a call through nn::Module gets).
  Tensor forward(const Tensor& x) const override { return forward(x, Tensor{}, nullptr); }

  std::shared_ptr<nn::Module> ln_1, ln_2, mlp;  // LayerNorm or RMSNorm; MLP or SwiGLU
  std::shared_ptr<nn::CausalSelfAttention> attn;

 private:
  GPTConfig config_;
};

class GPT : public nn::CausalLM {
 public:
  // Parameters drawn from `gen` (GPT-2 init: N(0, 0.02), residual projections scaled by
  // 1/sqrt(2 n_layer)); float32 on the CPU unless `init` says otherwise.
  explicit GPT(const GPTConfig& config, Generator* gen = nullptr);
  std::string type_name() const override { return "GPT"; }
  const GPTConfig& config() const { return config_; }
  // Changes how positions rotate (config().rope_scaling and every block's attention) without
  // touching a weight: NOTE [ RoPE scaling ] in config.h. std::invalid_argument on a learned-position
  // model or a factor below 1. A KV cache filled before the change no longer fits: reset it.
  void set_rope_scaling(const RopeScaling& scaling);
  // The context window of a rotary model (no weight depends on it): std::invalid_argument for a
  // learned table, whose size it is.
  void set_block_size(int64_t block_size);

  // idx (B, T) int -> logits (B, T, V), or (B, 1, V) for the last position only when last_only.
  // With a cache, the tokens continue it (their first position is cache->position) and the cache's
  // position moves on by T. Errors: ids outside the vocabulary; a learned-position model asked for
  // positions at or past block_size.
  Tensor forward(const Tensor& idx, KVCache* cache, bool last_only = false) const;
  // No cache, every position (nn::CausalLM's forward).
  Tensor forward(const Tensor& idx) const override { return forward(idx, nullptr, false); }
  // The mean cross-entropy of the logits (nn::CausalLM's), through linear_cross_entropy: the (B, T, V)
  // logits are never made whole (NOTE [ Linear cross-entropy ]).
  Tensor loss(const Tensor& idx, const Tensor& targets) const override;
  int64_t block_size() const override { return config_.block_size; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  std::string config_json() const override { return config_.to_json(); }
  // Per-token losses (B, T), no reduction.
  Tensor token_losses(const Tensor& idx, const Tensor& targets, KVCache* cache = nullptr) const;

  std::shared_ptr<nn::Module> transformer;
  std::shared_ptr<nn::Embedding> wte, wpe;  // wpe only without RoPE
  std::shared_ptr<nn::ModuleListOf<Block>> h;
  std::shared_ptr<nn::Module> ln_f;
  std::shared_ptr<nn::Linear> lm_head;  // only when not tied

 private:
  Tensor hidden(const Tensor& idx, KVCache* cache) const;
  Tensor head(const Tensor& x) const;
  GPTConfig config_;
};

}  // namespace mvgpt::gpt
