#pragma once
// Self-attention, causal (a decoder's: CausalSelfAttention) or over every position (SelfAttention
// with causal = false: an encoder's, a ViT's), with a fused QKV projection, optional rotary embeddings (either layout),
// grouped-query attention (n_kv_head dividing n_head), optional QK-norm and an optional KV cache.
//
//   c_attn: Linear(C, (H + 2 Hkv) * D): q, k, v stacked in that order (for Hkv == H this is
//           nanoGPT's [3C, C]); c_proj: Linear(C, C).
//
// The fused attention kernel is the default; the unfused path (matmul, masked_fill, softmax,
// matmul, kv heads repeated for GQA) is kept as the reference the fused one is tested against.
#include <memory>

#include <mvgpt/fused/rope_layout.h>
#include <mvgpt/nn/init.h>
#include <mvgpt/nn/kv_cache.h>
#include <mvgpt/nn/linear.h>
#include <mvgpt/nn/module.h>
#include <mvgpt/nn/rms_norm.h>

namespace mvgpt::nn {

struct AttentionConfig {
  int64_t n_embd = 0;
  int64_t n_head = 1;
  int64_t n_kv_head = 0;  // 0 means n_head (plain multi-head attention)
  bool rope = false;
  double rope_base = 10000;
  RopeLayout rope_layout = RopeLayout::split_half;  // which channels each rotation pairs
  double rope_position_scale = 1.0;  // positions are multiplied by it (1/f: position interpolation)
  bool bias = true;
  // Query i sees keys 0..i only (a decoder). false: every key (an encoder, a ViT); a KV cache then
  // serves only to attend over earlier chunks as well.
  bool causal = true;
  // In training, the probability of zeroing an attention weight and an output channel (nanoGPT's
  // attn_dropout and resid_dropout). Masks come from default_generator().
  double dropout = 0.0;
  // QK-norm (Qwen3's, OLMo 2's; modded-nanogpt's has no gain): each head's query and key
  // RMS-normalised over its D channels, times a learned (D) gain, before the rotation. Bounds the logits, so the attention
  // trains stably at higher rates.
  bool qk_norm = false;
  double qk_norm_eps = 1e-6;
};

class SelfAttention : public Module {
 public:
  explicit SelfAttention(const AttentionConfig& config, const Init& init = {});
  std::string type_name() const override { return config.causal ? "CausalSelfAttention" : "SelfAttention"; }

  // x (B, T, C) -> (B, T, C). positions (T) or (B, T) int64: the rotary positions of the T new
  // tokens; undefined means cached length + 0..T-1. With a cache, the new keys and values are
  // appended to it and the queries attend over everything cached (query i sits at key position
  // length_before + i).
  Tensor forward(const Tensor& x, const Tensor& positions, KVCacheLayer* cache = nullptr) const;
  // x goes to c_attn alone, unless an adapter on c_attn reads it too.
  bool input_feeds_one_product() const override { return !c_attn->lora_A; }
  // Positions 0..T-1, no cache.
  Tensor forward(const Tensor& x) const override { return forward(x, Tensor{}, nullptr); }
  using Module::operator();
  Tensor operator()(const Tensor& x, const Tensor& positions, KVCacheLayer* cache = nullptr) const {
    return forward(x, positions, cache);
  }

  // The attention itself on split heads: q (B, H, Tq, D), k and v (B, Hkv, Tk, D), Tk >= Tq; when
  // causal, query i sits at key position Tk - Tq + i. Exposed for tests and for the GPT's own loop.
  static Tensor attend_fused(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = true);
  // attn_dropout > 0 drops attention weights after the softmax (training only).
  static Tensor attend_reference(const Tensor& q, const Tensor& k, const Tensor& v, double attn_dropout = 0.0,
                                 bool causal = true);

  AttentionConfig config;
  int64_t head_dim;
  bool use_fused = true;  // false: the unfused reference path (also taken in training with dropout)
  std::shared_ptr<Linear> c_attn, c_proj;
  std::shared_ptr<RMSNorm> q_norm, k_norm;  // with qk_norm only: RMSNorm(D)
};

// A decoder's attention: SelfAttention with causal set whatever the config says.
class CausalSelfAttention : public SelfAttention {
 public:
  explicit CausalSelfAttention(const AttentionConfig& config, const Init& init = {})
      : SelfAttention(causal(config), init) {}

 private:
  static AttentionConfig causal(AttentionConfig config);
};

}  // namespace mvgpt::nn
