#pragma once
// GPTConfig: the shape of a GPT, as saved in a checkpoint's config.json. Defaults are the series'
// model (6 blocks, 6 heads of 64, width 384, context 256, learned positions); `rope` swaps the
// table of positions for rotary embeddings, and norm/mlp/n_kv_head/bias make Llama-style variants;
// qk_norm and zero_init_proj come from the speedruns (off in the presets).
#include <cstdint>
#include <string>
#include <vector>

#include <mvgpt/fused/rope_layout.h>

namespace mvgpt::gpt {

enum class NormKind { layernorm, rmsnorm };
// gelu: GPT-2's MLP (4C, GELU); swiglu: Llama's; relu2: GPT-2's MLP with the squared ReLU
// (modded-nanogpt's; config.json "mlp": "relu2", which no export format holds).
enum class MlpKind { gelu, swiglu, relu2 };

// NOTE [ RoPE scaling ]
// Two ways to stretch a rotary model's context past the positions it was trained on, chosen at load
// time or for a fine-tune (config.json's "rope_scaling", Hugging Face's spelling):
//   linear (position interpolation, Chen et al. 2023): positions are divided by the factor, so a
//     stream of factor * block_size tokens spans the angles the model saw in training; it needs a
//     short fine-tune, since neighbouring tokens now sit closer than ever trained.
//   ntk (NTK-aware): the base grows to base * factor^(D / (D - 2)) (D the head size): the fastest
//     pair keeps its angle, the slowest is interpolated by the factor. No retraining needed.
// Factor 1 is the unscaled model bit for bit (scale 1, base unchanged). docs/rope.md measures both.
enum class RopeScalingType { none, linear, ntk };
struct RopeScaling {
  RopeScalingType type = RopeScalingType::none;
  double factor = 1.0;
  bool enabled() const { return type != RopeScalingType::none; }
  // "none", "linear:4", "ntk:2.5" (the apps' --rope-scaling); std::invalid_argument naming the text.
  static RopeScaling parse(const std::string& text);
  std::string to_string() const;  // the same spelling
  bool operator==(const RopeScaling&) const = default;
};

struct GPTConfig {
  int64_t vocab_size = 10000;
  int64_t block_size = 256;  // the context window
  int64_t n_layer = 6;
  int64_t n_head = 6;
  int64_t n_embd = 384;
  bool rope = false;  // rotary position embeddings instead of a learned table
  double rope_base = 10000;
  // Which channels each rotation pairs: i with i + D/2 (ours, Hugging Face's) or 2i with 2i + 1
  // (llama2.c's run.c, Meta's original Llama). config.json's "rope_layout": "split_half" or
  // "interleaved", written only when interleaved.
  RopeLayout rope_layout = RopeLayout::split_half;
  RopeScaling rope_scaling;  // none unless config.json has "rope_scaling": {"type": ..., "factor": ...}
  NormKind norm = NormKind::layernorm;
  MlpKind mlp = MlpKind::gelu;
  // The GELU MLP's activation: the tanh approximation (GPT-2's, the default) or, when set, the exact
  // x Phi(x) (nanoGPT's nn.GELU()). config.json's "gelu_approximate": "tanh" or "none" (PyTorch's
  // spelling), written only when exact.
  bool exact_gelu = false;
  int64_t n_kv_head = 0;   // 0: n_head (plain multi-head attention)
  int64_t mlp_hidden = 0;  // 0: 4 * n_embd for GELU, the Llama rule (8/3 * n_embd, to a multiple of 64) for SwiGLU
  bool bias = true;
  bool tie_embeddings = true;
  double norm_eps = 1e-5;
  // QK-norm: each head's queries and keys RMS-normalised (with a learned gain) before the rotation
  // (nn::AttentionConfig::qk_norm). config.json's "qk_norm": true, written only when set; no export
  // format holds it.
  bool qk_norm = false;
  // The residual projections (attention's c_proj, the MLP's output matrix) start at zero, so each
  // block starts as the identity (modded-nanogpt). Only the initial weights differ: a trained model
  // computes the same with or without it. config.json's "zero_init_proj": true, written only when set.
  bool zero_init_proj = false;
  double dropout = 0.0;    // in training: after the embeddings, on attention weights and on each residual branch (nanoGPT's places)

  int64_t head_dim() const { return n_embd / n_head; }
  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t hidden_size() const;
  // What the rotations use, with rope_scaling applied: the base (ntk grows it) and the factor the
  // positions are multiplied by (linear: 1 / factor).
  double rope_effective_base() const;
  double rope_position_scale() const;
  // Throws std::invalid_argument naming the field: sizes must be positive, n_embd a multiple of
  // n_head, n_head a multiple of n_kv_head, the head size even with RoPE, rope_scaling and an
  // interleaved rope_layout only with RoPE, and a finite factor >= 1.
  void validate() const;
  // Parameters the model will have (the tied head counted once).
  int64_t num_parameters() const;

  std::string to_json() const;
  // Fields missing from the JSON keep their defaults: a config without "rope" (an older
  // checkpoint) is a learned-position model. Unknown fields or wrong types are errors naming them.
  static GPTConfig from_json(const std::string& json_text, const std::string& source = "config.json");

  // The presets: "series" (learned positions), "series-rope", "llama-small".
  static GPTConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();
};

std::string to_string(NormKind k);
std::string to_string(MlpKind k);
std::string to_string(RopeLayout layout);

}  // namespace mvgpt::gpt
