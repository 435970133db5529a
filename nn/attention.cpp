#include <mvgpt/nn/attention.h>

#include <cmath>
#include <limits>

#include <mvgpt/autograd/ops.h>
#include <mvgpt/fused/attention.h>
#include <mvgpt/fused/rope.h>

namespace mvgpt::nn {

namespace {
void check_heads(const Tensor& q, const Tensor& k, const Tensor& v, const char* op) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4)
    throw std::invalid_argument(std::string(op) + ": expected q (B, H, Tq, D), k and v (B, Hkv, Tk, D), found " +
                                q.describe() + ", " + k.describe() + ", " + v.describe());
  if (!(k.shape() == v.shape()) || q.size(0) != k.size(0) || q.size(3) != k.size(3) || k.size(1) == 0 ||
      q.size(1) % k.size(1) != 0 || k.size(2) < q.size(2))
    throw std::invalid_argument(std::string(op) + ": q " + q.describe() + " does not fit k " + k.describe() +
                                " and v " + v.describe() + " (need equal B and D, H a multiple of Hkv, Tk >= Tq)");
}
}  // namespace

SelfAttention::SelfAttention(const AttentionConfig& c, const Init& init) : config(c) {
  const std::string name = config.causal ? "CausalSelfAttention" : "SelfAttention";
  if (config.n_kv_head == 0) config.n_kv_head = config.n_head;
  if (config.n_embd <= 0 || config.n_head <= 0 || config.n_kv_head <= 0 || config.n_embd % config.n_head != 0 ||
      config.n_head % config.n_kv_head != 0)
    throw std::invalid_argument(name + ": n_embd " + std::to_string(config.n_embd) + ", n_head " +
                                std::to_string(config.n_head) + ", n_kv_head " + std::to_string(config.n_kv_head) +
                                ": need n_head | n_embd and n_kv_head | n_head");
  head_dim = config.n_embd / config.n_head;
  if (config.rope && head_dim % 2 != 0)
    throw std::invalid_argument(name + ": rope needs an even head_dim, found " + std::to_string(head_dim));
  const int64_t qkv = (config.n_head + 2 * config.n_kv_head) * head_dim;
  c_attn = register_module("c_attn", std::make_shared<Linear>(config.n_embd, qkv, config.bias, init));
  c_proj = register_module("c_proj", std::make_shared<Linear>(config.n_embd, config.n_embd, config.bias, init));
  if (config.qk_norm) {
    q_norm = register_module("q_norm", std::make_shared<RMSNorm>(head_dim, config.qk_norm_eps, /*affine=*/true, init));
    k_norm = register_module("k_norm", std::make_shared<RMSNorm>(head_dim, config.qk_norm_eps, /*affine=*/true, init));
  }
}

Tensor SelfAttention::attend_fused(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  check_heads(q, k, v, "CausalSelfAttention::attend_fused");
  return attention(q, k, v, 1.0 / std::sqrt(double(q.size(3))), causal);
}

Tensor SelfAttention::attend_reference(const Tensor& q, const Tensor& k, const Tensor& v, double attn_dropout,
                                       bool causal) {
  check_heads(q, k, v, "CausalSelfAttention::attend_reference");
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), Tk = k.size(2), rep = H / Hkv;
  Tensor kr = k, vr = v;
  if (rep > 1) {
    // Query head h reads kv head h / rep: (B, Hkv, Tk, D) -> (B, Hkv, rep, Tk, D) -> (B, H, Tk, D).
    kr = reshape(expand(unsqueeze(k, 2), {B, Hkv, rep, Tk, D}), {B, H, Tk, D});
    vr = reshape(expand(unsqueeze(v, 2), {B, Hkv, rep, Tk, D}), {B, H, Tk, D});
  }
  Tensor scores = mul(matmul(q, transpose(kr, 2, 3)), 1.0 / std::sqrt(double(D)));  // (B, H, Tq, Tk)
  if (causal) {
    // Key j is hidden from query i when j > (Tk - Tq) + i.
    Tensor key_pos = reshape(arange(0, double(Tk), 1, DType::i64, q.device()), {1, Tk});
    Tensor query_pos = reshape(arange(double(Tk - Tq), double(Tk), 1, DType::i64, q.device()), {Tq, 1});
    Tensor hidden = gt(key_pos, query_pos);  // (Tq, Tk) bool
    scores = masked_fill(scores, hidden, -std::numeric_limits<double>::infinity());
  }
  Tensor weights = softmax(scores, -1);
  if (attn_dropout > 0) weights = dropout(weights, attn_dropout);
  return matmul(weights, vr);  // (B, H, Tq, D)
}

Tensor SelfAttention::forward(const Tensor& x, const Tensor& positions, KVCacheLayer* cache) const {
  const int64_t C = config.n_embd, H = config.n_head, Hkv = config.n_kv_head, D = head_dim;
  if (x.dim() != 3 || x.size(2) != C)
    throw std::invalid_argument("CausalSelfAttention::forward: expected x (B, T, " + std::to_string(C) + "), found " +
                                x.describe());
  const int64_t B = x.size(0), T = x.size(1);
  if (cache && (cache->n_kv_head() != Hkv || cache->head_dim() != D || cache->batch() != B))
    throw std::invalid_argument("CausalSelfAttention::forward: the cache holds (" + std::to_string(cache->batch()) +
                                ", " + std::to_string(cache->n_kv_head()) + ", *, " + std::to_string(cache->head_dim()) +
                                "), the layer needs (" + std::to_string(B) + ", " + std::to_string(Hkv) + ", *, " +
                                std::to_string(D) + ")");

  Tensor qkv = c_attn->forward(x);  // (B, T, (H + 2 Hkv) D)
  // Heads first, then the pieces: split after the reshape, each piece's gradient (a transposed
  // view) is written straight into its block of qkv's (NOTE [ Gradient blocks ] in
  // autograd/engine.cpp); split before it, reshaping that view back would copy it once more.
  const Tensor packed = reshape(qkv, {B, T, H + 2 * Hkv, D});
  // The fused kernel has no dropout mask: training with dropout takes the reference path.
  const double p = is_training() ? config.dropout : 0.0;
  Tensor pos = positions;
  if (config.rope && !pos.defined()) {
    const double first = cache ? double(cache->length()) : 0.0;
    pos = arange(first, first + double(T), 1, DType::i64, x.device());
  }
  const double scale = 1.0 / std::sqrt(double(D));
  if (config.rope && !cache && use_fused && p == 0 && !q_norm) {
    // The split goes inside the attention too: where the rotary kernels run, they write dq, dk and dv
    // into their blocks of qkv's gradient (rotary_attention_packed).
    const Tensor y = rotary_attention_packed(packed, H, Hkv, pos, config.rope_base, config.rope_layout,
                                             config.rope_position_scale, scale, config.causal);  // (B, H, T, D)
    return dropout(c_proj->forward(reshape(transpose(y, 1, 2), {B, T, C})), p);
  }
  std::vector<Tensor> parts = split(packed, {H, Hkv, Hkv}, 2);
  // (B, T, n, D) -> (B, n, T, D)
  Tensor q = transpose(parts[0], 1, 2), k = transpose(parts[1], 1, 2), v = transpose(parts[2], 1, 2);
  if (q_norm) {  // before the rotation, which keeps each head's norm: cached keys are normalised ones
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }

  Tensor y;  // (B, H, T, D)
  if (config.rope && !cache && use_fused && p == 0) {
    // Without a cache the rotation goes inside the attention (rotary_attention: the CPU's kernels
    // rotate q and k as they read them).
    check_heads(q, k, v, "CausalSelfAttention::forward");
    y = rotary_attention(q, k, v, pos, config.rope_base, config.rope_layout, config.rope_position_scale, scale,
                         config.causal);
  } else {
    if (config.rope && !q_norm) {
      // q's and k's heads lie side by side in the projection: one rotation (one table of angles, one
      // op) for both, where decoding took two a layer and token.
      const Tensor qk = rope(transpose(narrow(packed, 2, 0, H + Hkv), 1, 2), pos, config.rope_base,
                             config.rope_layout, config.rope_position_scale);  // (B, H + Hkv, T, D)
      q = narrow(qk, 1, 0, H);
      k = narrow(qk, 1, H, Hkv);
    } else if (config.rope) {
      q = rope(q, pos, config.rope_base, config.rope_layout, config.rope_position_scale);
      k = rope(k, pos, config.rope_base, config.rope_layout, config.rope_position_scale);
    }
    if (cache) {
      cache->append(k, v);
      k = cache->keys();  // (B, Hkv, L, D)
      v = cache->values();
    }
    y = use_fused && p == 0 ? attend_fused(q, k, v, config.causal) : attend_reference(q, k, v, p, config.causal);
  }
  y = reshape(transpose(y, 1, 2), {B, T, C});
  return dropout(c_proj->forward(y), p);
}

AttentionConfig CausalSelfAttention::causal(AttentionConfig config) {
  config.causal = true;
  return config;
}

}  // namespace mvgpt::nn
