#include <mvgpt/gpt/hf.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <stdexcept>

#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/gpt/export_names.h>
#include <mvgpt/nn/safetensors.h>
#include <mvgpt/util/atomic_file.h>
#include <mvgpt/util/json.h>

namespace mvgpt::gpt::hf {

using json = nlohmann::ordered_json;

namespace {

using export_names::Family;
using export_names::family_of;

// Where one of our tensors lives in the Hugging Face model.
enum class Layout {
  same,
  transposed,    // GPT-2's Conv1D: (in, out)
  qkv_per_head,  // GPT-NeoX's query_key_value: rows [q_h, k_h, v_h] per head, ours [q, k, v]
  rows,          // rows [begin, begin + length) of ours (Llama's q_proj, k_proj, v_proj)
};
struct Place {
  std::string hf;
  Layout layout = Layout::same;
  int64_t begin = 0, length = 0;
};

// The Hugging Face tensors one of ours becomes (NOTE [ One table of tensor names per architecture ]).
std::vector<Place> places(const std::string& name, const GPTConfig& c, Family f) {
  const export_names::Located at = export_names::locate(name, f);
  if (at.entry->split_qkv()) {  // Llama's q_proj, k_proj, v_proj: rows of c_attn
    const std::vector<int64_t> rows = export_names::qkv_rows(c);
    const int64_t q = rows[0], kv = rows[1];
    return {{export_names::hf_name(at, f, 0), Layout::rows, 0, q},
            {export_names::hf_name(at, f, 1), Layout::rows, q, kv},
            {export_names::hf_name(at, f, 2), Layout::rows, q + kv, kv}};
  }
  const bool qkv = export_names::is_qkv(at);
  // GPT-2's Conv1D weights: every weight inside a block but the norms'.
  const bool conv1d = at.layer >= 0 && at.rest == "weight" && !std::string_view(at.entry->ours).starts_with("ln_");
  const Layout layout = f == Family::gpt2 && conv1d ? Layout::transposed : f == Family::neox && qkv ? Layout::qkv_per_head : Layout::same;
  return {{export_names::hf_name(at, f), layout}};
}

// Swaps the two leading axes of t viewed as (a, b, rest...): ours (3, H, D, ...) <-> NeoX's (H, 3, D, ...).
Tensor swap_leading(const Tensor& t, int64_t a, int64_t b) {
  Shape viewed{a, b};
  viewed.push_back(t.shape()[0] / (a * b));
  for (int i = 1; i < t.shape().size(); ++i) viewed.push_back(t.shape()[i]);
  return reshape(contiguous(transpose(reshape(t, viewed), 0, 1)), t.shape());
}

Tensor to_hf(const Tensor& t, const Place& p, const GPTConfig& c) {
  switch (p.layout) {
    case Layout::same: return t;
    case Layout::transposed: return contiguous(transpose(t, 0, 1));
    case Layout::qkv_per_head: return swap_leading(t, 3, c.n_head);
    case Layout::rows: return contiguous(narrow(t, 0, p.begin, p.length));
  }
  return t;
}

Shape hf_shape(const Shape& ours, const Place& p) {
  Shape s = ours;
  if (p.layout == Layout::transposed) std::swap(s[0], s[1]);
  if (p.layout == Layout::rows) s[0] = p.length;
  return s;
}

const char* model_type(Family f) { return f == Family::gpt2 ? "gpt2" : f == Family::neox ? "gpt_neox" : "llama"; }

// Hugging Face's spelling of linear scaling; NTK has no static equivalent there ("dynamic" changes
// with the length).
json rope_scaling_json(const GPTConfig& c) {
  if (!c.rope_scaling.enabled()) return nullptr;
  export_names::require_linear_rope_scaling(c, "transformers");
  return {{"type", "linear"}, {"factor", c.rope_scaling.factor}};
}

}  // namespace

bool is_hf_config(const std::string& config_json) {
  try {
    const auto j = nlohmann::json::parse(config_json);
    return j.is_object() && j.contains("model_type");
  } catch (const nlohmann::json::exception&) {
    // Unparsable (a number like 1e400, a stray comma): the loader that reads it names what is wrong,
    // so send it to the right one; ours never has "model_type".
    return config_json.find("\"model_type\"") != std::string::npos;
  }
}

std::string architecture(const GPTConfig& config) {
  switch (family_of(config)) {
    case Family::gpt2: return "GPT2LMHeadModel";
    case Family::neox: return "GPTNeoXForCausalLM";
    case Family::llama: return "LlamaForCausalLM";
  }
  return "";
}

std::string config_json(const GPTConfig& c, int64_t eot_id) {
  const Family f = family_of(c);
  json j = {{"architectures", {architecture(c)}}, {"model_type", model_type(f)}, {"vocab_size", c.vocab_size}};
  if (f == Family::gpt2) {
    j.update({{"n_positions", c.block_size}, {"n_ctx", c.block_size}, {"n_embd", c.n_embd}, {"n_layer", c.n_layer},
              {"n_head", c.n_head}, {"n_inner", c.hidden_size()}, {"activation_function", c.exact_gelu ? "gelu" : "gelu_new"},
              {"layer_norm_epsilon", c.norm_eps}, {"resid_pdrop", 0.0}, {"embd_pdrop", 0.0}, {"attn_pdrop", 0.0},
              {"scale_attn_weights", true}, {"scale_attn_by_inverse_layer_idx", false}});
  } else {
    j.update({{"hidden_size", c.n_embd}, {"num_hidden_layers", c.n_layer}, {"num_attention_heads", c.n_head},
              {"intermediate_size", c.hidden_size()}, {"max_position_embeddings", c.block_size},
              {"rope_scaling", rope_scaling_json(c)}});
    if (f == Family::neox) {
      j.update({{"rotary_pct", 1.0}, {"rotary_emb_base", c.rope_base}, {"use_parallel_residual", false},
                {"hidden_act", c.exact_gelu ? "gelu" : "gelu_new"}, {"layer_norm_eps", c.norm_eps}, {"attention_bias", true},
                {"attention_dropout", 0.0}, {"hidden_dropout", 0.0}});
    } else {
      j.update({{"num_key_value_heads", c.kv_heads()}, {"head_dim", c.head_dim()}, {"hidden_act", "silu"},
                {"rms_norm_eps", c.norm_eps}, {"rope_theta", c.rope_base}, {"attention_bias", c.bias},
                {"mlp_bias", c.bias}, {"attention_dropout", 0.0}, {"pretraining_tp", 1}});
    }
  }
  j["tie_word_embeddings"] = c.tie_embeddings;
  if (eot_id >= 0) j.update({{"bos_token_id", eot_id}, {"eos_token_id", eot_id}});
  j["torch_dtype"] = "float32";
  return j.dump(2) + "\n";
}

nn::NamedTensors to_hf_tensors(const GPT& model) {
  const GPTConfig& c = model.config();
  const Family f = family_of(c);
  export_names::check_exportable(model, nullptr, "transformers");
  NoGradGuard no_grad;
  nn::NamedTensors out;
  for (const auto& [name, t] : model.state_dict()) {
    Tensor ours = detach(t);
    // transformers rotates split halves.
    if (name.find(".attn.c_attn.") != std::string::npos)
      ours = export_names::with_rope_layout(ours, c, c.rope_layout, RopeLayout::split_half);
    for (const Place& p : places(name, c, f)) out.emplace_back(p.hf, to_hf(ours, p, c));
  }
  return out;
}

namespace {

GPTConfig config_from_hf_json(const nlohmann::json& j, const std::string& source) {
  auto fail = [&](const std::string& key, const std::string& what) -> std::invalid_argument {
    return std::invalid_argument(source + ": \"" + key + "\" " + what);
  };
  auto get_int = [&](const char* key, std::optional<int64_t> fallback = {}) -> int64_t {
    if (!j.contains(key) || j[key].is_null()) {
      if (fallback) return *fallback;
      throw fail(key, "is missing");
    }
    if (!j[key].is_number_integer()) throw fail(key, "is " + j[key].dump() + ", expected an integer");
    return j[key].get<int64_t>();
  };
  auto get_double = [&](const char* key, double fallback) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_number()) throw fail(key, "is " + j[key].dump() + ", expected a number");
    return j[key].get<double>();
  };
  auto get_bool = [&](const char* key, bool fallback) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_boolean()) throw fail(key, "is " + j[key].dump() + ", expected true or false");
    return j[key].get<bool>();
  };
  auto get_string = [&](const char* key, const char* fallback) {
    if (!j.contains(key) || j[key].is_null()) return std::string(fallback);
    if (!j[key].is_string()) throw fail(key, "is " + j[key].dump() + ", expected a string");
    return j[key].get<std::string>();
  };
  // Needs `key` to hold `want` (computing another function otherwise).
  auto require = [&](const char* key, bool holds, const std::string& want) {
    if (!holds) throw fail(key, "is " + (j.contains(key) ? j[key].dump() : std::string("missing")) + "; mvgpt computes " + want);
  };
  // transformers' "gelu" is the exact x Phi(x); "gelu_new", "gelu_pytorch_tanh" and "gelu_fast" the
  // tanh approximation.
  auto gelu = [&](GPTConfig& c, const char* key, const char* fallback) {
    const std::string act = get_string(key, fallback);
    require(key, act == "gelu" || act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast",
            "the exact GELU (gelu) or its tanh approximation (gelu_new)");
    c.exact_gelu = act == "gelu";
  };
  auto rope_scaling = [&](GPTConfig& c) {
    if (!j.contains("rope_scaling") || j["rope_scaling"].is_null()) return;
    const auto& r = j["rope_scaling"];
    const std::string type = r.is_object() ? (r.contains("rope_type") ? r["rope_type"] : r.value("type", nlohmann::json(""))).get<std::string>() : "";
    require("rope_scaling", type == "linear" && r.contains("factor") && r["factor"].is_number(),
            "no scaling or linear scaling {\"type\": \"linear\", \"factor\": F}");
    c.rope_scaling = {RopeScalingType::linear, r["factor"].get<double>()};
  };

  if (!j.is_object() || !j.contains("model_type") || !j["model_type"].is_string())
    throw std::invalid_argument(source + ": not a Hugging Face config (no \"model_type\")");
  const std::string type = j["model_type"].get<std::string>();
  GPTConfig c;
  c.vocab_size = get_int("vocab_size");
  c.dropout = 0.0;
  if (type == "gpt2") {
    c.n_embd = get_int("n_embd"), c.n_layer = get_int("n_layer"), c.n_head = get_int("n_head");
    c.block_size = get_int("n_positions");
    c.mlp_hidden = get_int("n_inner", 0);
    c.norm_eps = get_double("layer_norm_epsilon", 1e-5);
    gelu(c, "activation_function", "gelu_new");
    require("scale_attn_weights", get_bool("scale_attn_weights", true), "scores scaled by 1/sqrt(D)");
    require("scale_attn_by_inverse_layer_idx", !get_bool("scale_attn_by_inverse_layer_idx", false), "scores scaled by 1/sqrt(D)");
    c.tie_embeddings = get_bool("tie_word_embeddings", true);
  } else if (type == "gpt_neox" || type == "llama") {
    c.n_embd = get_int("hidden_size"), c.n_layer = get_int("num_hidden_layers"), c.n_head = get_int("num_attention_heads");
    c.block_size = get_int("max_position_embeddings");
    c.mlp_hidden = get_int("intermediate_size");
    c.rope = true;
    rope_scaling(c);
    if (type == "gpt_neox") {
      c.rope_base = get_double("rotary_emb_base", 10000);
      c.norm_eps = get_double("layer_norm_eps", 1e-5);
      require("rotary_pct", get_double("rotary_pct", 0.25) == 1.0, "rotary positions on every channel (rotary_pct 1)");
      require("use_parallel_residual", !get_bool("use_parallel_residual", true), "sequential residuals (false)");
      require("attention_bias", get_bool("attention_bias", true), "biases in attention");
      gelu(c, "hidden_act", "gelu");
      c.tie_embeddings = get_bool("tie_word_embeddings", false);
    } else {
      c.norm = NormKind::rmsnorm, c.mlp = MlpKind::swiglu;
      c.n_kv_head = get_int("num_key_value_heads", c.n_head);
      c.rope_base = get_double("rope_theta", 10000);
      c.norm_eps = get_double("rms_norm_eps", 1e-6);
      c.bias = get_bool("attention_bias", false);
      require("mlp_bias", get_bool("mlp_bias", false) == c.bias, "the same biases in attention and the MLP");
      require("hidden_act", get_string("hidden_act", "silu") == "silu", "SwiGLU with silu");
      if (c.n_head > 0) require("head_dim", get_int("head_dim", c.n_embd / c.n_head) * c.n_head == c.n_embd, "hidden_size / num_attention_heads");
      c.tie_embeddings = get_bool("tie_word_embeddings", false);
    }
  } else {
    throw fail("model_type", "is \"" + type + "\"; mvgpt reads gpt2, gpt_neox and llama");
  }
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(source + ": " + e.what());
  }
  return c;
}

}  // namespace

GPTConfig config_from_hf(const std::string& text, const std::string& source) {
  try {
    return config_from_hf_json(util::parse_json_strict(text), source);
  } catch (const util::JsonError& e) {
    throw std::invalid_argument(source + ": " + e.what());
  } catch (const nlohmann::json::exception& e) {  // a field of an unexpected type
    throw std::invalid_argument(source + ": malformed: " + e.what());
  }
}

nn::NamedTensors tensors_from_hf(const GPTConfig& c, const nn::NamedTensors& hf_tensors, const std::string& source) {
  const Family f = family_of(c);
  std::map<std::string, Tensor> hf;
  for (const auto& [name, t] : hf_tensors) hf[name] = t;
  std::set<std::string> used;
  std::vector<std::string> missing, misshaped;
  NoGradGuard no_grad;
  nn::NamedTensors out;
  // The shapes the model expects: a model of the config on the meta of the tensors it would have.
  const GPT shapes(c);
  for (const auto& [name, ours] : shapes.state_dict()) {
    std::vector<Tensor> parts;
    for (const Place& p : places(name, c, f)) {
      std::string hf_name = p.hf;
      // The base models' files (GPT2Model) have no "transformer." prefix.
      if (!hf.count(hf_name) && f == Family::gpt2 && hf_name.starts_with("transformer.")) hf_name = hf_name.substr(12);
      const auto it = hf.find(hf_name);
      if (it == hf.end()) {
        missing.push_back(p.hf);
        continue;
      }
      used.insert(hf_name);
      const Shape want = hf_shape(ours.shape(), p);
      if (it->second.shape() != want) {
        misshaped.push_back(p.hf + " " + to_string(it->second.shape()) + " (expected " + to_string(want) + ")");
        continue;
      }
      const Tensor& t = it->second;
      parts.push_back(p.layout == Layout::transposed     ? contiguous(transpose(t, 0, 1))
                      : p.layout == Layout::qkv_per_head ? swap_leading(t, c.n_head, 3)
                                                         : t);
    }
    if (parts.size() == places(name, c, f).size()) out.emplace_back(name, parts.size() == 1 ? parts[0] : cat(parts, 0));
  }
  // A tied head may be stored too (older saves); it must be the embedding.
  if (c.tie_embeddings) {
    const std::string head = f == Family::gpt2 ? "lm_head.weight" : f == Family::neox ? "embed_out.weight" : "lm_head.weight";
    const std::string embedding = places("transformer.wte.weight", c, f)[0].hf;
    if (const auto it = hf.find(head); it != hf.end()) {
      const auto e = hf.find(embedding);
      if (e == hf.end() || !export_names::bits_equal(it->second, e->second))
        throw std::invalid_argument(source + ": " + head + " differs from " + embedding +
                                    " but config.json ties them (tie_word_embeddings); set it false to keep both");
      used.insert(head);
    }
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, t] : hf) {
    // Buffers some versions saved: causal masks and rotary frequencies, recomputed by every model.
    const bool buffer = name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") ||
                        name.ends_with(".attention.bias") || name.ends_with(".attention.masked_bias") ||
                        name.ends_with(".inv_freq");
    if (!used.count(name) && !buffer) unexpected.push_back(name);
  }
  export_names::check_tensors_fit(source, "config.json (" + architecture(c) + ")", missing, misshaped, unexpected);
  return out;
}

void save_hf(const std::string& dir, const GPT& model, const text::Tokenizer* tokenizer,
             const std::map<std::string, std::string>& metadata) {
  const int64_t eot = tokenizer ? int64_t(tokenizer->eot_id()) : -1;
  export_names::check_exportable(model, tokenizer, "transformers");
  // Everything that can refuse runs before the folder is touched.
  const std::string config = config_json(model.config(), eot);
  const nn::NamedTensors tensors = to_hf_tensors(model);
  const std::string tokenizer_json = tokenizer ? tokenizer->to_hf_json() : "";
  util::write_folder_atomic(dir, [&](const std::string& tmp) {
    namespace fs = std::filesystem;
    util::write_file_atomic((fs::path(tmp) / "config.json").string(), config);
    safetensors::Metadata meta(metadata.begin(), metadata.end());
    meta["format"] = "pt";  // transformers refuses a file without it
    safetensors::save((fs::path(tmp) / "model.safetensors").string(), tensors, meta);
    json generation = {{"do_sample", false}};
    if (tokenizer) {
      generation.update({{"bos_token_id", eot}, {"eos_token_id", eot}});
      util::write_file_atomic((fs::path(tmp) / "tokenizer.json").string(), tokenizer_json);
      const std::string eot_text(text::kEndOfText);
      const json tok_config = {{"tokenizer_class", "PreTrainedTokenizerFast"}, {"model_max_length", model.config().block_size},
                               {"bos_token", eot_text}, {"eos_token", eot_text}, {"unk_token", eot_text},
                               {"add_prefix_space", false}, {"clean_up_tokenization_spaces", false}};
      util::write_file_atomic((fs::path(tmp) / "tokenizer_config.json").string(), tok_config.dump(2) + "\n");
    }
    util::write_file_atomic((fs::path(tmp) / "generation_config.json").string(), generation.dump(2) + "\n");
  });
}

}  // namespace mvgpt::gpt::hf
