#include <mvgpt/gpt/config.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include <mvgpt/util/json.h>

namespace mvgpt::gpt {

using nlohmann::json;

std::string to_string(NormKind k) { return k == NormKind::layernorm ? "layernorm" : "rmsnorm"; }
std::string to_string(MlpKind k) { return k == MlpKind::gelu ? "gelu" : k == MlpKind::relu2 ? "relu2" : "swiglu"; }
std::string to_string(RopeLayout layout) { return layout == RopeLayout::split_half ? "split_half" : "interleaved"; }

namespace {
const char* type_name(RopeScalingType t) {
  return t == RopeScalingType::linear ? "linear" : t == RopeScalingType::ntk ? "ntk" : "none";
}
}  // namespace

RopeScaling RopeScaling::parse(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return std::invalid_argument("rope scaling '" + text + "': " + why);
  };
  if (text == "none") return {};
  const size_t colon = text.find(':');
  if (colon == std::string::npos) throw bad("expected none, linear:FACTOR or ntk:FACTOR");
  RopeScaling r;
  const std::string type = text.substr(0, colon), factor = text.substr(colon + 1);
  if (type == "linear") r.type = RopeScalingType::linear;
  else if (type == "ntk") r.type = RopeScalingType::ntk;
  else throw bad("unknown type '" + type + "' (known: linear, ntk)");
  size_t used = 0;
  try {
    r.factor = std::stod(factor, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != factor.size()) throw bad("the factor '" + factor + "' is not a number");
  if (!std::isfinite(r.factor) || r.factor < 1) throw bad("the factor must be finite and at least 1");
  return r;
}

std::string RopeScaling::to_string() const {
  if (!enabled()) return "none";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s:%g", type_name(type), factor);
  return buf;
}

double GPTConfig::rope_effective_base() const {
  if (rope_scaling.type != RopeScalingType::ntk) return rope_base;
  const double d = double(head_dim());
  return rope_base * std::pow(rope_scaling.factor, d / (d - 2));
}

double GPTConfig::rope_position_scale() const {
  return rope_scaling.type == RopeScalingType::linear ? 1.0 / rope_scaling.factor : 1.0;
}

int64_t GPTConfig::hidden_size() const {
  if (mlp_hidden > 0) return mlp_hidden;
  if (mlp != MlpKind::swiglu) return 4 * n_embd;
  // Llama: two thirds of 4C, so SwiGLU's three matrices cost what GELU's two do; rounded up to 64.
  int64_t h = 8 * n_embd / 3;
  return (h + 63) / 64 * 64;
}

void GPTConfig::validate() const {
  auto positive = [](int64_t v, const char* name) {
    if (v <= 0) throw std::invalid_argument("GPTConfig: " + std::string(name) + " must be positive, found " + std::to_string(v));
  };
  positive(vocab_size, "vocab_size");
  positive(block_size, "block_size");
  positive(n_layer, "n_layer");
  positive(n_head, "n_head");
  positive(n_embd, "n_embd");
  if (n_kv_head < 0) throw std::invalid_argument("GPTConfig: n_kv_head must not be negative");
  if (n_embd % n_head != 0)
    throw std::invalid_argument("GPTConfig: n_embd " + std::to_string(n_embd) + " is not a multiple of n_head " +
                                std::to_string(n_head));
  if (n_head % kv_heads() != 0)
    throw std::invalid_argument("GPTConfig: n_head " + std::to_string(n_head) + " is not a multiple of n_kv_head " +
                                std::to_string(kv_heads()));
  if (rope && head_dim() % 2 != 0)
    throw std::invalid_argument("GPTConfig: rotary embeddings need an even head size, found " + std::to_string(head_dim()));
  if (rope && rope_base <= 1) throw std::invalid_argument("GPTConfig: rope_base must be above 1");
  if (exact_gelu && mlp != MlpKind::gelu)
    throw std::invalid_argument("GPTConfig: gelu_approximate \"none\" (the exact GELU) needs the GELU MLP, this model has " +
                                to_string(mlp));
  if (rope_layout != RopeLayout::split_half && !rope)
    throw std::invalid_argument("GPTConfig: rope_layout " + to_string(rope_layout) +
                                " needs rotary positions (rope), this model has a learned table");
  if (rope_scaling.enabled() && !rope)
    throw std::invalid_argument("GPTConfig: rope_scaling needs rotary positions (rope), this model has a learned table");
  if (rope_scaling.enabled() && (!std::isfinite(rope_scaling.factor) || rope_scaling.factor < 1))
    throw std::invalid_argument("GPTConfig: rope_scaling factor must be finite and at least 1, found " +
                                std::to_string(rope_scaling.factor));
  if (rope_scaling.type == RopeScalingType::ntk && head_dim() < 4)
    throw std::invalid_argument("GPTConfig: ntk rope_scaling needs a head size of at least 4, found " +
                                std::to_string(head_dim()));
  if (!(norm_eps > 0)) throw std::invalid_argument("GPTConfig: norm_eps must be positive");
  if (dropout < 0 || dropout >= 1) throw std::invalid_argument("GPTConfig: dropout must be in [0, 1)");
  if (vocab_size > 65536)
    throw std::invalid_argument("GPTConfig: vocab_size " + std::to_string(vocab_size) +
                                " does not fit the uint16 token files (at most 65536)");
  if (mlp_hidden < 0) throw std::invalid_argument("GPTConfig: mlp_hidden must not be negative (0: the default size)");
  // Bounds far past any model that fits a machine, so that sizes and the parameter count stay
  // exact in int64 (a fuzzed config with n_embd near 2^63 overflowed 4 * n_embd).
  auto at_most = [](int64_t v, int64_t limit, const char* name) {
    if (v > limit)
      throw std::invalid_argument("GPTConfig: " + std::string(name) + " " + std::to_string(v) + " is past the limit of " +
                                  std::to_string(limit));
  };
  at_most(n_embd, int64_t(1) << 20, "n_embd");
  at_most(mlp_hidden, int64_t(1) << 22, "mlp_hidden");
  at_most(n_layer, int64_t(1) << 12, "n_layer");
  at_most(block_size, int64_t(1) << 24, "block_size");
}

int64_t GPTConfig::num_parameters() const {
  const int64_t C = n_embd, D = head_dim(), H = n_head, K = kv_heads(), F = hidden_size();
  const int64_t b = bias ? 1 : 0;
  const int64_t norm_params = norm == NormKind::layernorm ? C * (1 + b) : C;
  int64_t attn = C * (H + 2 * K) * D + b * (H + 2 * K) * D + C * C + b * C;
  int64_t mlp_params = mlp != MlpKind::swiglu ? (C * F + b * F + F * C + b * C) : (3 * C * F + b * (2 * F + C));
  int64_t per_block = 2 * norm_params + attn + mlp_params;
  int64_t total = vocab_size * C + n_layer * per_block + norm_params;
  if (!rope) total += block_size * C;
  if (!tie_embeddings) total += vocab_size * C;
  if (qk_norm) total += n_layer * 2 * D;  // the gains of q_norm and k_norm
  return total;
}

std::string GPTConfig::to_json() const {
  json j = {
      {"vocab_size", vocab_size}, {"block_size", block_size}, {"n_layer", n_layer},
      {"n_head", n_head},         {"n_embd", n_embd},         {"rope", rope},
      {"rope_base", rope_base},   {"norm", to_string(norm)},  {"mlp", to_string(mlp)},
      {"n_kv_head", kv_heads()},  {"mlp_hidden", hidden_size()}, {"bias", bias},
      {"tie_embeddings", tie_embeddings}, {"norm_eps", norm_eps}, {"dropout", dropout},
  };
  // Written only when set: a model without them keeps the config.json it always had.
  if (rope_layout != RopeLayout::split_half) j["rope_layout"] = to_string(rope_layout);
  if (exact_gelu) j["gelu_approximate"] = "none";
  if (qk_norm) j["qk_norm"] = true;
  if (zero_init_proj) j["zero_init_proj"] = true;
  if (rope_scaling.enabled()) j["rope_scaling"] = {{"type", type_name(rope_scaling.type)}, {"factor", rope_scaling.factor}};
  return j.dump(2) + "\n";
}

GPTConfig GPTConfig::from_json(const std::string& text, const std::string& source) {
  json j;
  try {
    j = util::parse_json_strict(text);  // a key given twice, or 1e400, is an error naming the key
  } catch (const util::JsonError& e) {
    throw std::invalid_argument(source + ": " + e.what());
  }
  if (!j.is_object()) throw std::invalid_argument(source + ": expected a JSON object");
  GPTConfig c;
  auto fail = [&](const std::string& key, const std::string& what) {
    throw std::invalid_argument(source + ": field \"" + key + "\" " + what);
  };
  for (auto& item : j.items()) {
    // Named references, not a structured binding: clang before 16 cannot capture bindings in lambdas.
    const std::string& key = item.key();
    const json& value = item.value();
    auto get_int = [&](int64_t& out) {
      if (!value.is_number_integer()) fail(key, "must be an integer");
      out = value.get<int64_t>();
    };
    auto get_bool = [&](bool& out) {
      if (!value.is_boolean()) fail(key, "must be true or false");
      out = value.get<bool>();
    };
    auto get_double = [&](double& out) {
      if (!value.is_number()) fail(key, "must be a number");
      out = value.get<double>();
    };
    if (key == "vocab_size") get_int(c.vocab_size);
    else if (key == "block_size") get_int(c.block_size);
    else if (key == "n_layer") get_int(c.n_layer);
    else if (key == "n_head") get_int(c.n_head);
    else if (key == "n_embd") get_int(c.n_embd);
    else if (key == "n_kv_head") get_int(c.n_kv_head);
    else if (key == "mlp_hidden") get_int(c.mlp_hidden);
    else if (key == "rope") get_bool(c.rope);
    else if (key == "bias") get_bool(c.bias);
    else if (key == "tie_embeddings") get_bool(c.tie_embeddings);
    else if (key == "qk_norm") get_bool(c.qk_norm);
    else if (key == "zero_init_proj") get_bool(c.zero_init_proj);
    else if (key == "rope_base") get_double(c.rope_base);
    else if (key == "norm_eps") get_double(c.norm_eps);
    else if (key == "dropout") get_double(c.dropout);
    else if (key == "rope_scaling") {
      // {"type": "linear" | "ntk", "factor": F >= 1}; null or {"type": "none"} mean none.
      if (value.is_null()) continue;
      if (!value.is_object()) fail(key, "must be an object {\"type\": \"linear\" or \"ntk\", \"factor\": F}");
      RopeScaling r;
      bool has_factor = false;
      for (auto& field : value.items()) {
        const std::string& k = field.key();
        const json& v = field.value();
        if (k == "type") {
          if (v == "linear") r.type = RopeScalingType::linear;
          else if (v == "ntk") r.type = RopeScalingType::ntk;
          else if (v == "none") r.type = RopeScalingType::none;
          else fail(key, "has type " + v.dump() + "; expected \"linear\" or \"ntk\"");
        } else if (k == "factor") {
          if (!v.is_number()) fail(key, "has factor " + v.dump() + "; expected a number");
          r.factor = v.get<double>();
          has_factor = true;
          if (!std::isfinite(r.factor) || r.factor < 1) fail(key, "has factor " + v.dump() + "; expected a number >= 1");
        } else {
          fail(key, "has an unknown field \"" + k + "\" (known: type, factor)");
        }
      }
      if (!value.contains("type")) fail(key, "has no \"type\"");
      if (r.enabled() && !has_factor) fail(key, "has no \"factor\"");
      c.rope_scaling = r.enabled() ? r : RopeScaling{};
    } else if (key == "gelu_approximate") {
      if (value == "tanh") c.exact_gelu = false;
      else if (value == "none") c.exact_gelu = true;
      else fail(key, "must be \"tanh\" or \"none\" (the exact GELU)");
    } else if (key == "rope_layout") {
      if (value == "split_half") c.rope_layout = RopeLayout::split_half;
      else if (value == "interleaved") c.rope_layout = RopeLayout::interleaved;
      else fail(key, "must be \"split_half\" or \"interleaved\"");
    } else if (key == "norm") {
      if (value == "layernorm") c.norm = NormKind::layernorm;
      else if (value == "rmsnorm") c.norm = NormKind::rmsnorm;
      else fail(key, "must be \"layernorm\" or \"rmsnorm\"");
    } else if (key == "mlp") {
      if (value == "gelu") c.mlp = MlpKind::gelu;
      else if (value == "swiglu") c.mlp = MlpKind::swiglu;
      else if (value == "relu2") c.mlp = MlpKind::relu2;
      else fail(key, "must be \"gelu\", \"swiglu\" or \"relu2\"");
    } else {
      fail(key, "is not a GPTConfig field");
    }
  }
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(source + ": " + e.what());
  }
  return c;
}

GPTConfig GPTConfig::preset(const std::string& name) {
  GPTConfig c;  // the series' model
  if (name == "series") return c;
  if (name == "series-rope") {
    c.rope = true;
    return c;
  }
  if (name == "llama-small") {
    c.rope = true;
    c.norm = NormKind::rmsnorm;
    c.mlp = MlpKind::swiglu;
    c.n_kv_head = 2;
    c.bias = false;
    c.norm_eps = 1e-6;
    return c;
  }
  std::string names;
  for (auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
  throw std::invalid_argument("GPTConfig::preset: unknown preset '" + name + "' (known: " + names + ")");
}

std::vector<std::string> GPTConfig::preset_names() { return {"series", "series-rope", "llama-small"}; }

}  // namespace mvgpt::gpt
