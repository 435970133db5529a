#include <mvgpt/gpt/gguf.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <stdexcept>

#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/gpt/export_names.h>
#include <mvgpt/nn/safetensors.h>

namespace mvgpt::gpt {

namespace {

using export_names::Family;
using export_names::is_qkv;
using gguf::TensorType;
using gguf::Value;

// llama.cpp's general.file_type (llama_ftype) for a file whose matrices are `type`.
uint32_t file_type(TensorType type) {
  switch (type) {
    case TensorType::f32: return 0;
    case TensorType::f16: return 1;
    case TensorType::q8_0: return 7;
    case TensorType::bf16: return 32;
  }
  return 0;
}

const char* arch_name(Family f) { return f == Family::gpt2 ? "gpt2" : f == Family::neox ? "gptneox" : "llama"; }

// The order of rotary channels llama.cpp's architecture uses (NOTE [ GGUF models ]).
RopeLayout native_layout(Family f) { return f == Family::llama ? RopeLayout::interleaved : RopeLayout::split_half; }

// GGUF keeps llama.cpp's float32 for epsilons, bases and factors: read back as the shortest decimal
// that is that float32 (1e-6 stays 1e-6, not 9.99999997e-07), so a config comes back as it went out.
double shortest_decimal(double stored) {
  const float f = float(stored);
  char text[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, double(f));
    if (std::strtof(text, nullptr) == f) return std::strtod(text, nullptr);
  }
  return stored;
}

// Unused tokens that pad a vocabulary to the model's rows (llama.cpp's converter spells them so).
constexpr int32_t kUnusedToken = 5;
std::string pad_token(int64_t id) { return "[PAD" + std::to_string(id) + "]"; }

void add_vocabulary(gguf::Metadata& m, const text::Tokenizer& tokenizer, int64_t model_vocab) {
  text::Tokenizer::GgufVocabulary v = tokenizer.to_gguf_vocabulary();
  for (int64_t id = int64_t(v.tokens.size()); id < model_vocab; ++id) {
    v.tokens.push_back(pad_token(id));
    v.token_types.push_back(kUnusedToken);
    if (!v.scores.empty()) v.scores.push_back(0.0f);
  }
  m.emplace_back("tokenizer.ggml.model", Value::string(v.model));
  if (!v.pre.empty()) m.emplace_back("tokenizer.ggml.pre", Value::string(v.pre));
  m.emplace_back("tokenizer.ggml.tokens", Value::strings_array(v.tokens));
  if (!v.scores.empty()) m.emplace_back("tokenizer.ggml.scores", Value::f32_array(v.scores));
  m.emplace_back("tokenizer.ggml.token_type", Value::i32_array(v.token_types));
  if (!v.merges.empty()) m.emplace_back("tokenizer.ggml.merges", Value::strings_array(v.merges));
  if (v.bos >= 0) m.emplace_back("tokenizer.ggml.bos_token_id", Value::u32(uint32_t(v.bos)));
  if (v.eos >= 0) m.emplace_back("tokenizer.ggml.eos_token_id", Value::u32(uint32_t(v.eos)));
  if (v.eot >= 0) m.emplace_back("tokenizer.ggml.eot_token_id", Value::u32(uint32_t(v.eot)));
  if (v.unk >= 0) m.emplace_back("tokenizer.ggml.unknown_token_id", Value::u32(uint32_t(v.unk)));
  m.emplace_back("tokenizer.ggml.add_bos_token", Value::boolean(v.add_bos));
  m.emplace_back("tokenizer.ggml.add_eos_token", Value::boolean(false));
  if (v.model == "llama") m.emplace_back("tokenizer.ggml.add_space_prefix", Value::boolean(v.add_space_prefix));
}

std::optional<text::Tokenizer> read_vocabulary(const gguf::File& f) {
  if (!f.find("tokenizer.ggml.model")) return std::nullopt;
  text::Tokenizer::GgufVocabulary v;
  v.model = f.get_string("tokenizer.ggml.model");
  if (f.find("tokenizer.ggml.pre")) v.pre = f.get_string("tokenizer.ggml.pre");
  v.tokens = f.get_array("tokenizer.ggml.tokens", gguf::ValueType::string).strings;
  if (f.find("tokenizer.ggml.token_type")) {
    const auto& types = f.get_array("tokenizer.ggml.token_type", gguf::ValueType::i32).ints;
    if (types.size() != v.tokens.size()) throw std::runtime_error(f.path + ": tokenizer.ggml.token_type does not have a type per token");
    // Padding rows past the tokenizer (add_vocabulary) are not tokens of it.
    while (!v.tokens.empty() && types[v.tokens.size() - 1] == kUnusedToken && v.tokens.back() == pad_token(int64_t(v.tokens.size()) - 1))
      v.tokens.pop_back();
  }
  if (f.find("tokenizer.ggml.scores")) {
    const auto& scores = f.get_array("tokenizer.ggml.scores", gguf::ValueType::f32).floats;
    v.scores.assign(scores.begin(), scores.begin() + std::min(scores.size(), v.tokens.size()));
  }
  if (f.find("tokenizer.ggml.merges")) v.merges = f.get_array("tokenizer.ggml.merges", gguf::ValueType::string).strings;
  if (f.find("tokenizer.ggml.bos_token_id")) v.bos = f.get_int("tokenizer.ggml.bos_token_id");
  if (f.find("tokenizer.ggml.eos_token_id")) v.eos = f.get_int("tokenizer.ggml.eos_token_id");
  if (f.find("tokenizer.ggml.eot_token_id")) v.eot = f.get_int("tokenizer.ggml.eot_token_id");
  return text::Tokenizer::from_gguf_vocabulary(v, f.path);
}

}  // namespace

std::string gguf_architecture(const GPTConfig& c) {
  Family f;
  try {
    f = export_names::family_of(c);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(e.what()) + "; GGUF takes the same three (llama.cpp's gpt2, gptneox, llama)");
  }
  if (c.exact_gelu && f != Family::llama)
    throw std::invalid_argument("the model uses the exact GELU; llama.cpp's gpt2 and gptneox compute its tanh approximation "
                                "(train with \"gelu_approximate\": \"tanh\", or export --format hf)");
  export_names::require_linear_rope_scaling(c, "llama.cpp");
  return arch_name(f);
}

void save_gguf(const std::string& path, const GPT& model, const text::Tokenizer& tokenizer, TensorType type,
               const std::map<std::string, std::string>& metadata) {
  const GPTConfig& c = model.config();
  const Family f = export_names::family_of(c);
  const std::string arch = gguf_architecture(c);
  export_names::check_exportable(model, &tokenizer, "llama.cpp");

  gguf::Metadata m;
  auto key = [&](const std::string& k) { return arch + "." + k; };
  m.emplace_back("general.architecture", Value::string(arch));
  m.emplace_back("general.name", Value::string(metadata.count("name") ? metadata.at("name") : "mvgpt"));
  m.emplace_back("general.file_type", Value::u32(file_type(type)));
  m.emplace_back("general.quantization_version", Value::u32(2));
  m.emplace_back(key("context_length"), Value::u32(uint32_t(c.block_size)));
  m.emplace_back(key("embedding_length"), Value::u32(uint32_t(c.n_embd)));
  m.emplace_back(key("block_count"), Value::u32(uint32_t(c.n_layer)));
  m.emplace_back(key("feed_forward_length"), Value::u32(uint32_t(c.hidden_size())));
  m.emplace_back(key("attention.head_count"), Value::u32(uint32_t(c.n_head)));
  m.emplace_back(key("attention.head_count_kv"), Value::u32(uint32_t(c.kv_heads())));
  if (f == Family::llama) {
    m.emplace_back(key("attention.layer_norm_rms_epsilon"), Value::f32(float(c.norm_eps)));
    m.emplace_back(key("vocab_size"), Value::u32(uint32_t(c.vocab_size)));
  } else {
    m.emplace_back(key("attention.layer_norm_epsilon"), Value::f32(float(c.norm_eps)));
  }
  if (c.rope) {
    m.emplace_back(key("rope.dimension_count"), Value::u32(uint32_t(c.head_dim())));
    m.emplace_back(key("rope.freq_base"), Value::f32(float(c.rope_base)));
    if (c.rope_scaling.enabled()) {
      m.emplace_back(key("rope.scaling.type"), Value::string("linear"));
      m.emplace_back(key("rope.scaling.factor"), Value::f32(float(c.rope_scaling.factor)));
    }
    m.emplace_back("mvgpt.rope_layout", Value::string(to_string(c.rope_layout)));
  }
  if (f == Family::neox) m.emplace_back(key("use_parallel_residual"), Value::boolean(false));
  add_vocabulary(m, tokenizer, c.vocab_size);
  for (const auto& [k, v] : metadata)
    if (k != "name") m.emplace_back("mvgpt." + k, Value::string(v));

  NoGradGuard no_grad;
  std::vector<gguf::TensorOut> tensors;
  auto add = [&](std::string name, Tensor t) {
    // Vectors (norms, biases) stay F32; a Q8_0 matrix needs rows of a multiple of 32.
    TensorType as = t.dim() == 1 ? TensorType::f32 : type;
    if (as == TensorType::q8_0 && t.shape().back() % 32 != 0) as = TensorType::f16;
    tensors.push_back({std::move(name), std::move(t), as});
  };
  for (const auto& [name, t] : model.state_dict()) {
    Tensor ours = detach(t);
    const export_names::Located at = export_names::locate(name, f);
    if (c.rope && is_qkv(at)) ours = export_names::with_rope_layout(ours, c, c.rope_layout, native_layout(f));
    if (!at.entry->split_qkv()) {
      add(export_names::gguf_name(at), ours);
      // llama.cpp's GPT-NeoX needs a head: a tied one goes out as output.weight too.
      if (name == "transformer.wte.weight" && c.tie_embeddings && f == Family::neox) add("output.weight", ours);
      continue;
    }
    const std::vector<Tensor> parts = split(ours, export_names::qkv_rows(c), 0);
    for (int k = 0; k < 3; ++k) add(export_names::gguf_name(at, k), contiguous(parts[k]));
  }
  gguf::save(path, m, tensors, /*replace=*/false);
}

LoadedGguf load_gguf(const std::string& path, Device device) {
  const gguf::File file = gguf::read(path);
  auto fail = [&](const std::string& what) { return std::runtime_error(path + ": " + what); };
  const std::string arch = file.get_string("general.architecture");
  Family f;
  if (arch == "gpt2") f = Family::gpt2;
  else if (arch == "gptneox") f = Family::neox;
  else if (arch == "llama") f = Family::llama;
  else throw fail("general.architecture is \"" + arch + "\"; mvgpt reads gpt2, gptneox and llama (what export --format gguf writes)");
  auto key = [&](const std::string& k) { return arch + "." + k; };

  std::map<std::string, size_t> index;
  int64_t values = 0;
  for (size_t i = 0; i < file.infos.size(); ++i) {
    index[file.infos[i].name] = i;
    values += file.tensors[i].numel();
  }
  auto tensor = [&](const std::string& name) -> const Tensor* {
    const auto it = index.find(name);
    return it == index.end() ? nullptr : &file.tensors[it->second];
  };
  const Tensor* embedding = tensor("token_embd.weight");
  if (!embedding || embedding->dim() != 2) throw fail("has no token_embd.weight matrix");

  GPTConfig c;
  c.dropout = 0.0;
  c.vocab_size = embedding->shape()[0];
  c.block_size = file.get_int(key("context_length"));
  c.n_embd = file.get_int(key("embedding_length"));
  c.n_layer = file.get_int(key("block_count"));
  c.n_head = file.get_int(key("attention.head_count"));
  c.mlp_hidden = file.get_int(key("feed_forward_length"));
  if (file.find(key("attention.head_count_kv"))) c.n_kv_head = file.get_int(key("attention.head_count_kv"));
  if (f == Family::llama) {
    c.norm = NormKind::rmsnorm, c.mlp = MlpKind::swiglu, c.bias = tensor("blk.0.attn_q.bias") != nullptr;
    c.norm_eps = shortest_decimal(file.get_float(key("attention.layer_norm_rms_epsilon")));
  } else {
    c.norm_eps = shortest_decimal(file.get_float(key("attention.layer_norm_epsilon")));
  }
  if (f != Family::gpt2) {
    c.rope = true;
    c.rope_base = file.find(key("rope.freq_base")) ? shortest_decimal(file.get_float(key("rope.freq_base"))) : 10000.0;
    // llama.cpp's default is the head size, every channel.
    const int64_t head = c.n_head > 0 ? c.n_embd / c.n_head : 0;
    const int64_t rotated = file.find(key("rope.dimension_count")) ? file.get_int(key("rope.dimension_count")) : head;
    if (c.n_head > 0 && rotated != head)
      throw fail(key("rope.dimension_count") + " is " + std::to_string(rotated) + "; mvgpt rotates every channel of a head (" +
                 std::to_string(head) + ")");
    if (file.find(key("rope.scaling.type"))) {
      const std::string type = file.get_string(key("rope.scaling.type"));
      if (type == "linear") c.rope_scaling = {RopeScalingType::linear, shortest_decimal(file.get_float(key("rope.scaling.factor")))};
      else if (type != "none") throw fail(key("rope.scaling.type") + " is \"" + type + "\"; mvgpt computes none or linear");
    }
    c.rope_layout = native_layout(f);
    if (file.find("mvgpt.rope_layout")) {
      const std::string l = file.get_string("mvgpt.rope_layout");
      if (l == to_string(RopeLayout::interleaved)) c.rope_layout = RopeLayout::interleaved;
      else if (l == to_string(RopeLayout::split_half)) c.rope_layout = RopeLayout::split_half;
      else throw fail("mvgpt.rope_layout is \"" + l + "\" (split_half or interleaved)");
    }
  }
  if (f == Family::neox && (!file.find(key("use_parallel_residual")) || file.get_bool(key("use_parallel_residual"))))
    throw fail(key("use_parallel_residual") + " is not false; mvgpt computes sequential residuals");
  const Tensor* head = tensor("output.weight");
  c.tie_embeddings = !head || export_names::bits_equal(*head, *embedding);
  try {
    c.validate();
    // The architecture fixed the norm and the MLP, so this refuses only what no family of ours
    // computes (grouped KV heads with LayerNorm), naming it.
    export_names::family_of(c);
  } catch (const std::invalid_argument& e) {
    throw fail(e.what());
  }
  // What the metadata asks for is bounded by what the file holds (as load_checkpoint does).
  if (c.num_parameters() > 2 * values + (int64_t(1) << 20))
    throw fail("its metadata describes a model of " + std::to_string(c.num_parameters()) + " parameters but it holds " +
               std::to_string(values) + " values (nothing was allocated)");

  NoGradGuard no_grad;
  std::set<std::string> used;
  std::vector<std::string> missing, misshaped, unexpected;
  nn::NamedTensors state;
  const GPT shapes(c);
  for (const auto& [name, ours] : shapes.state_dict()) {
    const export_names::Located at = export_names::locate(name, f);
    const int n_parts = at.entry->split_qkv() ? 3 : 1;
    const std::vector<int64_t> rows = n_parts == 3 ? export_names::qkv_rows(c) : std::vector<int64_t>{ours.shape()[0]};
    std::vector<Tensor> parts;
    for (int k = 0; k < n_parts; ++k) {
      const std::string g = export_names::gguf_name(at, k);
      const Tensor* t = tensor(g);
      if (!t) {
        missing.push_back(g);
        continue;
      }
      used.insert(g);
      Shape want = ours.shape();
      want[0] = rows[k];
      if (t->shape() != want) {
        misshaped.push_back(g + " " + to_string(t->shape()) + " (expected " + to_string(want) + ")");
        continue;
      }
      safetensors::require_finite_float(path, g, *t, "", "the model is unusable");
      parts.push_back(*t);
    }
    if (int(parts.size()) != n_parts) continue;
    Tensor t = n_parts == 1 ? parts[0] : cat(parts, 0);
    if (c.rope && is_qkv(at)) t = export_names::with_rope_layout(t, c, native_layout(f), c.rope_layout);
    state.emplace_back(name, t);
  }
  if (c.tie_embeddings && head) used.insert("output.weight");
  for (const auto& info : file.infos)
    if (!used.count(info.name)) unexpected.push_back(info.name);
  try {
    export_names::check_tensors_fit(path, arch + " metadata", missing, misshaped, unexpected);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }

  LoadedGguf out;
  out.checkpoint.model = std::make_shared<GPT>(c);
  out.checkpoint.model->load_state_dict(state);
  out.checkpoint.model->to(device);
  out.checkpoint.model->eval();
  for (const auto& [k, v] : file.metadata)
    if (k.rfind("mvgpt.", 0) == 0 && v.type == gguf::ValueType::string && k != "mvgpt.rope_layout")
      out.checkpoint.metadata[k.substr(6)] = v.strings[0];
  std::set<TensorType> types;
  for (const auto& info : file.infos)
    if (info.shape.size() > 1) types.insert(info.type);
  std::string type_names;
  for (TensorType t : types) type_names += (type_names.empty() ? "" : "+") + gguf::tensor_type_name(t);
  out.checkpoint.metadata["gguf_type"] = type_names;
  out.architecture = arch;
  try {
    out.tokenizer = read_vocabulary(file);
  } catch (const std::exception& e) {  // the model is still ours to read
    out.tokenizer_note = e.what();
  }
  return out;
}

}  // namespace mvgpt::gpt
