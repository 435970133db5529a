#include <mvgpt/gpt/llama2c.h>

#include <cstring>
#include <stdexcept>

#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/nn/safetensors.h>
#include <mvgpt/util/atomic_file.h>

namespace mvgpt::gpt {

namespace {

constexpr uint32_t kMagic = 0x616b3432;  // "ak42"
constexpr size_t kHeaderV1 = 256;

// The file's float32 data, handed out tensor by tensor in order.
class Weights {
 public:
  Weights(const std::string& bytes, size_t offset) : bytes_(bytes), pos_(offset) {}
  // The next `layers` tensors of `shape`, stored one after another.
  std::vector<Tensor> take(int64_t layers, const Shape& shape) {
    std::vector<Tensor> out;
    for (int64_t i = 0; i < layers; ++i) out.push_back(take(shape));
    return out;
  }
  Tensor take(const Shape& shape) {
    Tensor t = empty(shape, DType::f32);
    std::memcpy(t.raw_data(), bytes_.data() + pos_, t.nbytes());
    pos_ += t.nbytes();
    return t;
  }
  void skip(size_t n_floats) { pos_ += n_floats * sizeof(float); }

 private:
  const std::string& bytes_;
  size_t pos_;
};

}  // namespace

LoadedCheckpoint load_llama2c(const std::string& path) {
  const std::string bytes = util::read_file(path);
  auto fail = [&](const std::string& what) { return std::runtime_error(path + ": " + what); };
  if (bytes.size() < 7 * sizeof(int32_t)) throw fail("too short for llama2.c's header (" + std::to_string(bytes.size()) + " bytes)");
  uint32_t magic = 0;
  std::memcpy(&magic, bytes.data(), 4);
  const bool v1 = magic == kMagic;
  int32_t h[7];
  if (v1) {
    int32_t version = 0;
    if (bytes.size() < kHeaderV1) throw fail("too short for export.py's 256-byte header");
    std::memcpy(&version, bytes.data() + 4, 4);
    if (version != 1)
      throw fail("export.py version " + std::to_string(version) + "; mvgpt reads version 1 (float32) and the legacy format: "
                 "export again with --version 1");
    std::memcpy(h, bytes.data() + 8, sizeof h);
  } else {
    std::memcpy(h, bytes.data(), sizeof h);
  }
  const int64_t C = h[0], F = h[1], L = h[2], H = h[3], K = h[4], S = h[6];
  const bool shared = v1 ? bytes[8 + sizeof h] != 0 : h[5] > 0;
  const int64_t V = h[5] < 0 ? -int64_t(h[5]) : h[5];
  GPTConfig c;
  c.vocab_size = V, c.block_size = S, c.n_layer = L, c.n_head = H, c.n_kv_head = K, c.n_embd = C, c.mlp_hidden = F;
  c.rope = true, c.rope_base = 10000, c.rope_layout = RopeLayout::interleaved, c.norm = NormKind::rmsnorm, c.mlp = MlpKind::swiglu, c.bias = false;
  c.tie_embeddings = shared, c.norm_eps = 1e-5;
  try {
    if (C <= 0 || F <= 0 || L <= 0 || H <= 0 || K <= 0 || V <= 0 || S <= 0) throw std::invalid_argument("a size is not positive");
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw fail("header (dim " + std::to_string(C) + ", hidden_dim " + std::to_string(F) + ", n_layers " + std::to_string(L) +
               ", n_heads " + std::to_string(H) + ", n_kv_heads " + std::to_string(K) + ", vocab_size " + std::to_string(h[5]) +
               ", seq_len " + std::to_string(S) + ") is not a model: " + e.what() + "; is it a llama2.c .bin?");
  }
  const int64_t D = C / H, KD = K * D;
  const int64_t floats = V * C + L * (2 * C + 2 * C * C + 2 * KD * C + 3 * F * C) + C + (shared ? 0 : V * C) +
                         (v1 ? 0 : S * D);  // the legacy file's RoPE tables
  const size_t expected = (v1 ? kHeaderV1 : sizeof h) + size_t(floats) * sizeof(float);
  if (bytes.size() != expected)
    throw fail(std::to_string(bytes.size()) + " bytes, but its header describes " + std::to_string(expected) +
               " (a truncated download, or another format such as export.py --version 2)");

  Weights w(bytes, v1 ? kHeaderV1 : sizeof h);
  std::vector<Tensor> att_norm, ffn_norm, wq, wk, wv, wo, w1, w2, w3;
  Tensor embedding, final_norm, classifier;
  if (v1) {
    att_norm = w.take(L, {C}), ffn_norm = w.take(L, {C}), final_norm = w.take({C}), embedding = w.take({V, C});
  } else {
    embedding = w.take({V, C}), att_norm = w.take(L, {C});
  }
  wq = w.take(L, {C, C}), wk = w.take(L, {KD, C}), wv = w.take(L, {KD, C}), wo = w.take(L, {C, C});
  if (!v1) ffn_norm = w.take(L, {C});
  w1 = w.take(L, {F, C}), w2 = w.take(L, {C, F}), w3 = w.take(L, {F, C});
  if (!v1) {
    final_norm = w.take({C});
    w.skip(size_t(S * D));  // cos and sin tables, recomputed by every model
  }
  if (!shared) classifier = w.take({V, C});

  nn::NamedTensors state;
  state.emplace_back("transformer.wte.weight", embedding);
  NoGradGuard no_grad;
  for (int64_t i = 0; i < L; ++i) {
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    state.emplace_back(p + "ln_1.weight", att_norm[i]);
    state.emplace_back(p + "attn.c_attn.weight", cat({wq[i], wk[i], wv[i]}, 0));
    state.emplace_back(p + "attn.c_proj.weight", wo[i]);
    state.emplace_back(p + "ln_2.weight", ffn_norm[i]);
    state.emplace_back(p + "mlp.w1.weight", w1[i]);
    state.emplace_back(p + "mlp.w3.weight", w3[i]);
    state.emplace_back(p + "mlp.w2.weight", w2[i]);
  }
  state.emplace_back("transformer.ln_f.weight", final_norm);
  if (!shared) state.emplace_back("lm_head.weight", classifier);
  // As a checkpoint's weights are (checkpoint.cpp): a NaN would only show later, as a nan loss.
  for (const auto& [name, t] : state)
    if (const int64_t i = safetensors::first_non_finite(t); i >= 0)
      throw fail("the weights of " + name + " hold a non-finite value (NaN or infinity) at element " + std::to_string(i) +
                 "; the model is unusable");
  LoadedCheckpoint out;
  out.model = std::make_shared<GPT>(c);
  out.model->load_state_dict(state);
  out.model->eval();
  out.metadata = {{"format", "pt"}, {"llama2c_format", v1 ? "version 1" : "legacy"}};
  return out;
}

}  // namespace mvgpt::gpt
