// llama2.c's .bin in (gpt/llama2c.h): where each weight of the file lands (in the file's order, the
// config saying the rotations pair neighbours: NOTE [ llama2.c's rotary pairs ]), both formats, the
// refusals, and two small models that llama2.c's export.py wrote, against run.c's own logits and
// greedy tokens for them (tests/fixtures/llama2c/README.md says how each file was made). That the result
// computes run.c's function is checked against PyTorch in tests/python/test_llama2c.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/gpt/generate.h>
#include <mvgpt/gpt/llama2c.h>
#include <mvgpt/text/tokenizer.h>
#include "llama2c_fixtures.h"
#include "nn/temp_dir.h"

namespace mvgpt::gpt {
namespace {

using mvgpt::testing::TempDir;

constexpr int32_t C = 8, F = 12, L = 1, H = 2, K = 1, V = 5, S = 4, D = C / H;

// A legacy file whose every float is its own index in the weights, so each can be traced.
std::vector<char> legacy_file(bool shared) {
  const int64_t n = int64_t(V) * C + L * (2 * C + 2 * C * C + 2 * K * D * C + 3 * F * C) + C + S * D + (shared ? 0 : V * C);
  std::vector<char> bytes(7 * 4 + n * 4);
  const int32_t header[7] = {C, F, L, H, K, shared ? V : -V, S};
  std::memcpy(bytes.data(), header, sizeof header);
  for (int64_t i = 0; i < n; ++i) {
    const float v = float(i);
    std::memcpy(bytes.data() + 28 + 4 * i, &v, 4);
  }
  return bytes;
}

std::string write(const TempDir& dir, const std::string& name, const std::vector<char>& bytes) {
  std::ofstream(dir.file(name), std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  return dir.file(name);
}

std::vector<float> row(const Tensor& t, int64_t r) { return ops::contiguous(ops::select(t.detach(), 0, r)).to_vector<float>(); }

TEST(Llama2c, LegacyWeightsLandWhereRunCReadsThemAndRotateInterleavedPairs) {
  TempDir dir;
  const LoadedCheckpoint m = load_llama2c(write(dir, "m.bin", legacy_file(false)));
  const GPTConfig& c = m.model->config();
  EXPECT_EQ(c.n_embd, C);
  EXPECT_EQ(c.hidden_size(), F);
  EXPECT_EQ(c.kv_heads(), K);
  EXPECT_EQ(c.block_size, S);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_EQ(c.norm_eps, 1e-5);
  EXPECT_EQ(c.rope_layout, RopeLayout::interleaved);
  EXPECT_EQ(GPTConfig::from_json(c.to_json()).rope_layout, RopeLayout::interleaved);
  std::map<std::string, Tensor> sd;
  for (const auto& [name, t] : m.model->state_dict()) sd[name] = t;
  EXPECT_EQ(row(sd.at("transformer.wte.weight"), 1)[0], float(C));  // the embedding comes first
  const float wq = float(V * C + L * C);                              // then the attention norms, then wq
  const Tensor qkv = sd.at("transformer.h.0.attn.c_attn.weight");
  for (int64_t r = 0; r < C; ++r) EXPECT_EQ(row(qkv, r)[0], wq + float(r * C)) << "row " << r;  // as the file has them
  const float wk = wq + float(C * C), wv = wk + float(K * D * C);
  EXPECT_EQ(row(qkv, C + 1)[0], wk + float(C));
  EXPECT_EQ(row(qkv, C + K * D + 1)[0], wv + float(C));
  EXPECT_EQ(m.metadata.at("llama2c_format"), "legacy");
}

TEST(Llama2c, VersionOneHasTheSameModel) {
  TempDir dir;
  // The version-1 file of the same weights: the legacy file's blocks in version 1's order.
  const std::vector<char> legacy = legacy_file(true);
  const LoadedCheckpoint a = load_llama2c(write(dir, "legacy.bin", legacy));
  const float* f = reinterpret_cast<const float*>(legacy.data() + 28);
  const int64_t emb = int64_t(V) * C, norms = L * C, wq = L * C * C, wkv = L * K * D * C, mlp = L * F * C;
  std::vector<float> v1;
  auto put = [&](int64_t offset, int64_t n) {
    for (int64_t i = 0; i < n; ++i) v1.push_back(f[offset + i]);
  };
  const int64_t att = emb, q = att + norms, k = q + wq, v = k + wkv, o = v + wkv, ffn = o + wq, w1 = ffn + norms;
  const int64_t fin = w1 + 3 * mlp;
  put(att, norms), put(ffn, norms), put(fin, C), put(0, emb), put(q, wq), put(k, wkv), put(v, wkv), put(o, wq), put(w1, 3 * mlp);
  std::vector<char> bytes(256 + v1.size() * 4, 0);
  const uint32_t magic = 0x616b3432;
  const int32_t version = 1, header[7] = {C, F, L, H, K, V, S};
  std::memcpy(bytes.data(), &magic, 4);
  std::memcpy(bytes.data() + 4, &version, 4);
  std::memcpy(bytes.data() + 8, header, sizeof header);
  bytes[36] = 1;  // shared classifier
  std::memcpy(bytes.data() + 256, v1.data(), v1.size() * 4);
  const LoadedCheckpoint b = load_llama2c(write(dir, "v1.bin", bytes));
  const auto sa = a.model->state_dict(), sb = b.model->state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i)
    EXPECT_EQ(ops::contiguous(sa[i].second.detach()).to_vector<float>(), ops::contiguous(sb[i].second.detach()).to_vector<float>())
        << sa[i].first;
  EXPECT_TRUE(b.model->config().tie_embeddings);
}

TEST(Llama2c, BadFilesAreRefusedNamingTheFile) {
  TempDir dir;
  auto refused = [&](const std::vector<char>& bytes, const std::string& needle) {
    const std::string path = write(dir, "bad.bin", bytes);
    try {
      load_llama2c(path);
      ADD_FAILURE() << "loaded";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(path + ": ", 0), 0u) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
    }
  };
  std::vector<char> truncated = legacy_file(true);
  truncated.resize(truncated.size() - 4);
  refused(truncated, "but its header describes");
  std::vector<char> v2(300, 0);
  const uint32_t magic = 0x616b3432;
  const int32_t version = 2;
  std::memcpy(v2.data(), &magic, 4);
  std::memcpy(v2.data() + 4, &version, 4);
  refused(v2, "export.py version 2");
  refused(std::vector<char>(10, 'x'), "too short");
  std::vector<char> odd = legacy_file(true);
  const int32_t heads = 3;  // 8 channels do not split into 3 heads
  std::memcpy(odd.data() + 12, &heads, 4);
  refused(odd, "is not a model");
}

using mvgpt::testing::llama2c::from_hex;
using mvgpt::testing::llama2c::kFixtures;
using mvgpt::testing::llama2c::read_jsonl;

// generate.jsonl: for each model and prompt, run.c's generate loop at temperature 0 (the prompt's
// ids, BOS first, then every token it chose, a final BOS left out) and its forward's logits at
// positions 0, 1, 2 and the last.
TEST(Llama2c, ModelsLlama2cExportedGiveRunCsLogitsAndGreedyTokens) {
  const text::Tokenizer tok = text::Tokenizer::load(kFixtures + "tok512.bin");
  std::map<std::string, LoadedCheckpoint> models;
  int cases = 0;
  double worst = 0;
  for (const auto& j : read_jsonl("generate.jsonl")) {
    const std::string file = j["model"], prompt = from_hex(j["prompt_hex"]);
    SCOPED_TRACE(file + ": \"" + prompt + "\"");
    if (!models.count(file)) models[file] = load_llama2c(kFixtures + file);
    const GPT& model = *models[file].model;
    const std::vector<int32_t> ids = j["ids"].get<std::vector<int32_t>>();
    const int64_t n_forward = j["n_forward"];

    const std::vector<text::TokenId> prompt_ids = tok.encode_prompt(prompt);
    ASSERT_LE(prompt_ids.size(), ids.size());
    ASSERT_TRUE(std::equal(prompt_ids.begin(), prompt_ids.end(), ids.begin()));

    // The logits: one pass over the first n_forward tokens.
    NoGradGuard no_grad;
    const std::vector<int32_t> fed(ids.begin(), ids.begin() + n_forward);
    const Tensor logits = model.forward(Tensor::from_vector(fed, Shape{1, n_forward}));  // (1, T, V)
    for (const auto& [pos, want] : j["logits"].items()) {
      const std::vector<float> ours = ops::contiguous(ops::select(ops::select(logits.detach(), 0, 0), 0, std::stoll(pos))).to_vector<float>();
      const std::vector<float> theirs = want.get<std::vector<float>>();
      ASSERT_EQ(ours.size(), theirs.size());
      double err = 0;
      for (size_t v = 0; v < ours.size(); ++v) err = std::max(err, std::abs(double(ours[v]) - double(theirs[v])));
      EXPECT_LT(err, 1e-4) << "position " << pos;
      worst = std::max(worst, err);
    }

    // The greedy tokens, through the KV cache, stopping where run.c stops (at BOS).
    const std::vector<int32_t> prompt_tokens(prompt_ids.begin(), prompt_ids.end());
    const int64_t budget = n_forward - int64_t(prompt_tokens.size()) + 1;
    std::vector<int32_t> chosen = prompt_tokens;
    generate(model, prompt_tokens, budget, {.temperature = 0}, [&](int32_t id) {
      if (id == int32_t(tok.eot_id())) return false;
      chosen.push_back(id);
      return true;
    });
    EXPECT_EQ(chosen, ids);
    ++cases;
  }
  EXPECT_EQ(cases, 14);
  std::printf("%d runs of run.c matched; largest |logit difference| %.3g\n", cases, worst);
}

}  // namespace
}  // namespace mvgpt::gpt
