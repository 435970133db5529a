// Hugging Face folders (gpt/hf.h): each variant's names and layouts (GPT-2's transposed Conv1D,
// GPT-NeoX's per-head query_key_value, Llama's split q/k/v), the round trip bit for bit through
// save_hf and load_checkpoint, and the refusals, each naming what does not map. The same folders are
// loaded by transformers itself in tests/python/test_hf.py where it is installed.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>

#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/gpt/checkpoint.h>
#include <mvgpt/gpt/hf.h>
#include <mvgpt/nn/safetensors.h>
#include <mvgpt/util/atomic_file.h>
#include "mvgpt/tiny_models.h"
#include "nn/temp_dir.h"

namespace mvgpt::gpt {
namespace {

using mvgpt::testing::TempDir;

using testing::bitwise_equal;
using testing::expect_same_weights;
using testing::random_model;
using testing::tiny;
using testing::tiny_llama;

std::map<std::string, Tensor> by_name(const nn::NamedTensors& t) { return {t.begin(), t.end()}; }


std::vector<float> row(const Tensor& t, int64_t r) { return ops::contiguous(ops::select(t.detach(), 0, r)).to_vector<float>(); }

TEST(HuggingFace, EachVariantMapsToTheClassThatComputesIt) {
  EXPECT_EQ(hf::architecture(tiny(false)), "GPT2LMHeadModel");
  EXPECT_EQ(hf::architecture(tiny(true)), "GPTNeoXForCausalLM");
  EXPECT_EQ(hf::architecture(tiny_llama(false)), "LlamaForCausalLM");
  GPTConfig gqa = tiny(true);
  gqa.n_head = 4;
  gqa.n_kv_head = 2;
  try {
    hf::architecture(gqa);
    FAIL() << "GQA with LayerNorm has no transformers class";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("grouped KV heads"), std::string::npos) << e.what();
  }
  GPTConfig no_bias = tiny(false);
  no_bias.bias = false;
  EXPECT_THROW(hf::architecture(no_bias), std::invalid_argument);
  GPTConfig ntk = tiny(true);
  ntk.rope_scaling = RopeScaling::parse("ntk:2");
  EXPECT_THROW(hf::to_hf_tensors(GPT(ntk)), std::invalid_argument);
}

TEST(HuggingFace, Gpt2StoresConv1DWeightsTransposed) {
  auto model = random_model(tiny(false), 1);
  const auto hf = by_name(hf::to_hf_tensors(*model));
  const auto ours = by_name(model->state_dict());
  EXPECT_EQ(hf.count("lm_head.weight"), 0u);  // tied
  for (const char* name : {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"}) {
    const std::string w = std::string("transformer.h.1.") + name + ".weight";
    EXPECT_TRUE(bitwise_equal(hf.at(w), ops::transpose(ours.at(w).detach(), 0, 1))) << w;
  }
  EXPECT_TRUE(bitwise_equal(hf.at("transformer.wpe.weight"), ours.at("transformer.wpe.weight")));
  EXPECT_TRUE(bitwise_equal(hf.at("transformer.h.0.attn.c_attn.bias"), ours.at("transformer.h.0.attn.c_attn.bias")));
}

TEST(HuggingFace, NeoxQueryKeyValueIsPerHead) {
  const GPTConfig c = tiny(true);  // 2 heads of 4
  auto model = random_model(c, 2);
  const auto hf = by_name(hf::to_hf_tensors(*model));
  const Tensor ours = by_name(model->state_dict()).at("transformer.h.0.attn.c_attn.weight");  // rows [q0 q1 k0 k1 v0 v1]
  const Tensor qkv = hf.at("gpt_neox.layers.0.attention.query_key_value.weight");            // rows [q0 k0 v0 q1 k1 v1]
  const int64_t D = c.head_dim(), H = c.n_head;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t part = 0; part < 3; ++part)
      for (int64_t d = 0; d < D; ++d) EXPECT_EQ(row(qkv, (h * 3 + part) * D + d), row(ours, (part * H + h) * D + d));
  EXPECT_EQ(hf.count("gpt_neox.embed_in.weight"), 1u);
  EXPECT_EQ(hf.count("embed_out.weight"), 0u);  // tied
}

TEST(HuggingFace, LlamaSplitsQkvByRows) {
  const GPTConfig c = tiny_llama(false);  // 4 query heads, 2 KV heads of 2
  auto model = random_model(c, 3);
  const auto hf = by_name(hf::to_hf_tensors(*model));
  const Tensor ours = by_name(model->state_dict()).at("transformer.h.1.attn.c_attn.weight");
  EXPECT_EQ(hf.at("model.layers.1.self_attn.q_proj.weight").shape(), (Shape{8, 8}));
  EXPECT_EQ(hf.at("model.layers.1.self_attn.k_proj.weight").shape(), (Shape{4, 8}));
  EXPECT_EQ(row(hf.at("model.layers.1.self_attn.v_proj.weight"), 3), row(ours, 8 + 4 + 3));
  EXPECT_EQ(hf.count("lm_head.weight"), 1u);
  EXPECT_EQ(hf.count("model.layers.0.mlp.gate_proj.weight"), 1u);
}

TEST(HuggingFace, SavedFolderLoadsBackBitForBitWithTheSameConfig) {
  GPTConfig scaled = tiny(true);
  scaled.rope_scaling = RopeScaling::parse("linear:2");
  GPTConfig exact_learned = tiny(false), exact_rope = tiny(true);  // transformers' "gelu"
  exact_learned.exact_gelu = exact_rope.exact_gelu = true;
  for (GPTConfig c : {tiny(false), tiny(true), scaled, exact_learned, exact_rope, tiny_llama(false), tiny_llama(true)}) {
    c.vocab_size = 257;  // the bytes and <|endoftext|>
    TempDir dir;
    auto model = random_model(c, 4);
    const text::Tokenizer tok;
    hf::save_hf(dir.file("hf"), *model, &tok);
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"})
      EXPECT_TRUE(std::filesystem::exists(dir.file(std::string("hf/") + f))) << f;
    const LoadedCheckpoint back = load_checkpoint(dir.file("hf"));
    EXPECT_EQ(back.model->config().to_json(), c.to_json()) << hf::architecture(c);
    expect_same_weights(*model, *back.model);
    EXPECT_EQ(back.metadata.at("format"), "pt");
    EXPECT_EQ(text::Tokenizer::load(dir.file("hf/tokenizer.json")).vocab_size(), tok.vocab_size());
  }
}

TEST(HuggingFace, ConfigsThatComputeAnotherFunctionAreRefusedNamingTheField) {
  const std::string gpt2 = hf::config_json(tiny(false));
  auto refused = [](std::string json, const std::string& from, const std::string& to, const std::string& needle) {
    json.replace(json.find(from), from.size(), to);
    try {
      hf::config_from_hf(json, "x/config.json");
      ADD_FAILURE() << "accepted " << to;
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("x/config.json: ", 0), 0u) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
    }
  };
  refused(gpt2, "\"gelu_new\"", "\"relu\"", "\"activation_function\" is \"relu\"");
  refused(gpt2, "\"model_type\": \"gpt2\"", "\"model_type\": \"bert\"", "gpt2, gpt_neox and llama");
  refused(gpt2, "\"n_head\": 2", "\"n_head\": 3", "n_head");
  const std::string neox = hf::config_json(tiny(true));
  refused(neox, "\"use_parallel_residual\": false", "\"use_parallel_residual\": true", "sequential residuals");
  refused(neox, "\"rotary_pct\": 1.0", "\"rotary_pct\": 0.25", "rotary_pct");
  refused(neox, "\"rope_scaling\": null", "\"rope_scaling\": {\"type\": 5}", "malformed");
  refused(neox, "\"rope_scaling\": null", "\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2}", "linear scaling");
  refused(hf::config_json(tiny_llama(false)), "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "silu");
  // Defaults of transformers where a field is absent: GPT-NeoX runs parallel residuals by default.
  std::string no_field = neox;
  no_field.replace(no_field.find("\"use_parallel_residual\": false,"), 31, "");
  EXPECT_THROW(hf::config_from_hf(no_field, "x"), std::invalid_argument);
}

TEST(HuggingFace, TensorsThatDoNotFitAreListed) {
  TempDir dir;
  auto model = random_model(tiny(true), 5);
  hf::save_hf(dir.file("hf"), *model, nullptr);
  const std::string weights = dir.file("hf/model.safetensors");
  auto tensors = safetensors::load(weights).tensors;
  tensors.erase(tensors.begin());                                               // gpt_neox.embed_in.weight
  tensors.emplace_back("embed_out.weight", ops::zeros({29, 8}, DType::f32));  // a tied head that is not wte
  safetensors::save(weights, tensors, {{"format", "pt"}});
  auto refused = [&](std::initializer_list<std::string> needles) {
    try {
      load_checkpoint(dir.file("hf"));
      ADD_FAILURE() << "loaded";
    } catch (const std::runtime_error& e) {
      for (const std::string& needle : needles) EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused({weights, "embed_out.weight differs from gpt_neox.embed_in.weight"});
  tensors.pop_back();
  tensors.emplace_back("gpt_neox.layers.0.attention.query_key_value.extra", ops::zeros({2}, DType::f32));
  safetensors::save(weights, tensors, {{"format", "pt"}});
  refused({"missing gpt_neox.embed_in.weight", "unexpected gpt_neox.layers.0.attention.query_key_value.extra"});
}

TEST(HuggingFace, AFailedExportLeavesNothing) {
  TempDir dir;
  GPTConfig gqa = tiny(true);
  gqa.n_head = 4;
  gqa.n_kv_head = 2;
  EXPECT_THROW(hf::save_hf(dir.file("hf"), GPT(gqa), nullptr), std::invalid_argument);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

}  // namespace
}  // namespace mvgpt::gpt
