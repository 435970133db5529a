#include <mvgpt/gpt/export_names.h>

#include <cstring>
#include <stdexcept>

#include <mvgpt/autograd/ops.h>
#include <mvgpt/nn/lora.h>

namespace mvgpt::gpt::export_names {

namespace {

// {ours, {Hugging Face}, {GGUF}}: NOTE [ One table of tensor names per architecture ].
constexpr TensorName kGpt2Top[] = {
    {"transformer.wte.", {"transformer.wte."}, {"token_embd."}},
    {"transformer.wpe.", {"transformer.wpe."}, {"position_embd."}},
    {"transformer.ln_f.", {"transformer.ln_f."}, {"output_norm."}},
    {"lm_head.", {"lm_head."}, {"output."}},
};
constexpr TensorName kGpt2Layer[] = {
    {"ln_1.", {"ln_1."}, {"attn_norm."}},
    {"attn.c_attn.", {"attn.c_attn."}, {"attn_qkv."}},
    {"attn.c_proj.", {"attn.c_proj."}, {"attn_output."}},
    {"ln_2.", {"ln_2."}, {"ffn_norm."}},
    {"mlp.c_fc.", {"mlp.c_fc."}, {"ffn_up."}},
    {"mlp.c_proj.", {"mlp.c_proj."}, {"ffn_down."}},
};
constexpr TensorName kNeoxTop[] = {
    {"transformer.wte.", {"gpt_neox.embed_in."}, {"token_embd."}},
    {"transformer.ln_f.", {"gpt_neox.final_layer_norm."}, {"output_norm."}},
    {"lm_head.", {"embed_out."}, {"output."}},
};
constexpr TensorName kNeoxLayer[] = {
    {"ln_1.", {"input_layernorm."}, {"attn_norm."}},
    {"attn.c_attn.", {"attention.query_key_value."}, {"attn_qkv."}},
    {"attn.c_proj.", {"attention.dense."}, {"attn_output."}},
    {"ln_2.", {"post_attention_layernorm."}, {"ffn_norm."}},
    {"mlp.c_fc.", {"mlp.dense_h_to_4h."}, {"ffn_up."}},
    {"mlp.c_proj.", {"mlp.dense_4h_to_h."}, {"ffn_down."}},
};
constexpr TensorName kLlamaTop[] = {
    {"transformer.wte.", {"model.embed_tokens."}, {"token_embd."}},
    {"transformer.ln_f.", {"model.norm."}, {"output_norm."}},
    {"lm_head.", {"lm_head."}, {"output."}},
};
constexpr TensorName kLlamaLayer[] = {
    {"ln_1.", {"input_layernorm."}, {"attn_norm."}},
    {"attn.c_attn.", {"self_attn.q_proj.", "self_attn.k_proj.", "self_attn.v_proj."}, {"attn_q.", "attn_k.", "attn_v."}},
    {"attn.c_proj.", {"self_attn.o_proj."}, {"attn_output."}},
    {"ln_2.", {"post_attention_layernorm."}, {"ffn_norm."}},
    {"mlp.w1.", {"mlp.gate_proj."}, {"ffn_gate."}},
    {"mlp.w3.", {"mlp.up_proj."}, {"ffn_up."}},
    {"mlp.w2.", {"mlp.down_proj."}, {"ffn_down."}},
};

std::span<const TensorName> top_level(Family f) {
  switch (f) {
    case Family::gpt2: return kGpt2Top;
    case Family::neox: return kNeoxTop;
    case Family::llama: return kLlamaTop;
  }
  return {};
}
std::span<const TensorName> per_layer(Family f) {
  switch (f) {
    case Family::gpt2: return kGpt2Layer;
    case Family::neox: return kNeoxLayer;
    case Family::llama: return kLlamaLayer;
  }
  return {};
}

// Reorders the rows of each head of the q and k parts: viewed (heads, a, b, rest...) -> (heads, b, a, rest...).
Tensor reorder_rotary_rows(const Tensor& qkv, const GPTConfig& c, int64_t a, int64_t b) {
  const int64_t H = c.n_head, K = c.kv_heads();
  auto reorder = [&](const Tensor& rows, int64_t heads) {
    Shape viewed{heads, a, b};
    for (int i = 1; i < rows.shape().size(); ++i) viewed.push_back(rows.shape()[i]);
    return reshape(contiguous(transpose(reshape(rows, viewed), 1, 2)), rows.shape());
  };
  const std::vector<Tensor> parts = split(qkv, qkv_rows(c), 0);
  return cat({reorder(parts[0], H), reorder(parts[1], K), parts[2]}, 0);
}

}  // namespace

Family family_of(const GPTConfig& c) {
  const bool mha = c.kv_heads() == c.n_head;
  if (c.qk_norm)
    throw std::invalid_argument(
        "no transformers class or llama.cpp architecture that mvgpt exports computes a model with qk_norm (GPT-2, "
        "GPT-NeoX and Llama have no norm on queries and keys): train without it to export");
  if (c.norm == NormKind::layernorm && c.mlp == MlpKind::gelu && c.bias && mha) return c.rope ? Family::neox : Family::gpt2;
  if (c.rope && c.norm == NormKind::rmsnorm && c.mlp == MlpKind::swiglu) return Family::llama;
  throw std::invalid_argument(
      "no transformers class or llama.cpp architecture computes this model (" + std::string(c.rope ? "RoPE" : "learned positions") + ", " +
      to_string(c.norm) + ", " + to_string(c.mlp) + (c.bias ? ", biases" : ", no biases") +
      (mha ? "" : ", grouped KV heads") +
      "): learned positions and RoPE map with layernorm, gelu, biases and n_kv_head = n_head (GPT-2, GPT-NeoX), "
      "RoPE with rmsnorm and swiglu (Llama)");
}

Located locate(const std::string& ours, Family f) {
  Located at;
  std::string rest = ours;
  std::span<const TensorName> table = top_level(f);
  const std::string layers = "transformer.h.";
  if (ours.starts_with(layers)) {
    const size_t dot = ours.find('.', layers.size());
    if (dot == std::string::npos) throw std::logic_error("export_names: no layer in " + ours);
    at.layer = std::stoll(ours.substr(layers.size(), dot - layers.size()));
    rest = ours.substr(dot + 1);
    table = per_layer(f);
  }
  for (const TensorName& e : table)
    if (rest.starts_with(e.ours)) {
      at.entry = &e;
      at.rest = rest.substr(std::strlen(e.ours));
      return at;
    }
  throw std::logic_error("export_names: no name for " + ours);
}

bool is_qkv(const Located& at) { return std::string_view(at.entry->ours) == "attn.c_attn."; }

std::vector<int64_t> qkv_rows(const GPTConfig& c) {
  const int64_t q = c.n_head * c.head_dim(), kv = c.kv_heads() * c.head_dim();
  return {q, kv, kv};
}

std::string hf_name(const Located& at, Family f, int part) {
  std::string prefix;
  if (at.layer >= 0) {
    const std::string i = std::to_string(at.layer);
    prefix = f == Family::gpt2 ? "transformer.h." + i + "." : f == Family::neox ? "gpt_neox.layers." + i + "." : "model.layers." + i + ".";
  }
  return prefix + at.entry->hf[part] + at.rest;
}

std::string gguf_name(const Located& at, int part) {
  return (at.layer >= 0 ? "blk." + std::to_string(at.layer) + "." : std::string()) + at.entry->gguf[part] + at.rest;
}

Tensor with_rope_layout(const Tensor& qkv, const GPTConfig& c, RopeLayout from, RopeLayout to) {
  if (from == to) return qkv;
  const int64_t half = c.head_dim() / 2;
  return from == RopeLayout::interleaved ? reorder_rotary_rows(qkv, c, half, 2) : reorder_rotary_rows(qkv, c, 2, half);
}

void check_exportable(const GPT& model, const text::Tokenizer* tokenizer, const std::string& target) {
  const GPTConfig& c = model.config();
  if (nn::lora_options(model).rank > 0)
    throw std::invalid_argument("the model has LoRA adapters; fold them in first (merge), then export");
  if (tokenizer && int64_t(tokenizer->vocab_size()) > c.vocab_size)
    throw std::invalid_argument("the tokenizer has " + std::to_string(tokenizer->vocab_size()) + " tokens, the model " +
                                std::to_string(c.vocab_size));
  require_linear_rope_scaling(c, target);
}

void require_linear_rope_scaling(const GPTConfig& c, const std::string& target) {
  if (c.rope_scaling.enabled() && c.rope_scaling.type != RopeScalingType::linear)
    throw std::invalid_argument("rope_scaling " + c.rope_scaling.to_string() + " has no " + target +
                                " equivalent (only linear does); export the model without it");
}

bool bits_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = contiguous(a), y = contiguous(b);
  return std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

void check_tensors_fit(const std::string& source, const std::string& what, const std::vector<std::string>& missing,
                       const std::vector<std::string>& misshaped, const std::vector<std::string>& unexpected) {
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < 4; ++i) s += (i ? ", " : "") + v[i];
    return v.size() > 4 ? s + " and " + std::to_string(v.size() - 4) + " more" : s;
  };
  std::string problems;
  if (!missing.empty()) problems += "missing " + list(missing);
  if (!misshaped.empty()) problems += std::string(problems.empty() ? "" : "; ") + "mis-shaped " + list(misshaped);
  if (!unexpected.empty()) problems += std::string(problems.empty() ? "" : "; ") + "unexpected " + list(unexpected);
  if (!problems.empty()) throw std::invalid_argument(source + " does not fit its " + what + ": " + problems);
}

}  // namespace mvgpt::gpt::export_names
