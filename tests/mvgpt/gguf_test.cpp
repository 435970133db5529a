// GGUF models (gpt/gguf.h): each variant as the llama.cpp architecture that computes it, with the
// tensor names, shapes and metadata keys llama.cpp's loader asks for; the round trip bit for bit
// through save_gguf and load_gguf (tokenizer included) and to the same logits; Llama's rotary rows in
// llama.cpp's order; and the refusals, each naming what does not map. llama.cpp itself loads these
// files in tests/python/test_gguf.py where it is installed.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <set>

#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/gpt/export_names.h>
#include <mvgpt/gpt/gguf.h>
#include <mvgpt/gpt/hf.h>
#include <mvgpt/nn/lora.h>
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

// The bytes-only tokenizer (257 ids, <|endoftext|> the last); the models take its vocabulary.
text::Tokenizer bytes_tokenizer() { return text::Tokenizer(); }

GPTConfig with_vocab(GPTConfig c, int64_t vocab) {
  c.vocab_size = vocab;
  return c;
}

std::set<std::string> names_in(const gguf::File& f) {
  std::set<std::string> out;
  for (const auto& info : f.infos) out.insert(info.name);
  return out;
}

Tensor logits_of(const GPT& m) {
  NoGradGuard no_grad;
  const Tensor ids = Tensor::from_vector(std::vector<int32_t>{1, 200, 3, 97, 256, 5}, Shape{1, 6});
  return m.forward(ids);
}

TEST(Gguf, EachVariantGoesToTheArchitectureThatComputesIt) {
  EXPECT_EQ(gguf_architecture(tiny(false)), "gpt2");
  EXPECT_EQ(gguf_architecture(tiny(true)), "gptneox");
  EXPECT_EQ(gguf_architecture(tiny_llama(false)), "llama");
}

TEST(Gguf, EachVariantRoundTripsBitForBitWithItsTokenizer) {
  GPTConfig interleaved = tiny_llama(true);
  interleaved.rope_layout = RopeLayout::interleaved;  // llama2.c's
  GPTConfig biased = tiny_llama(false);
  biased.bias = true;
  for (const GPTConfig& base : {tiny(false), tiny(true), tiny_llama(false), tiny_llama(true), interleaved, biased}) {
    TempDir dir;
    const GPTConfig c = with_vocab(base, 260);  // room past the tokenizer's 257: padding tokens
    const auto model = random_model(c, 3);
    const std::string path = dir.file("m.gguf");
    save_gguf(path, *model, bytes_tokenizer(), gguf::TensorType::f32, {{"step", "42"}});
    const LoadedGguf back = load_gguf(path);
    EXPECT_EQ(back.checkpoint.model->config().to_json(), c.to_json()) << gguf_architecture(c);
    expect_same_weights(*model, *back.checkpoint.model);
    EXPECT_TRUE(bitwise_equal(logits_of(*model), logits_of(*back.checkpoint.model)));
    EXPECT_EQ(back.checkpoint.metadata.at("step"), "42");
    EXPECT_EQ(back.checkpoint.metadata.at("gguf_type"), "F32");
    ASSERT_TRUE(back.tokenizer.has_value());
    EXPECT_TRUE(*back.tokenizer == bytes_tokenizer());
  }
}

TEST(Gguf, TheNamesShapesAndKeysLlamaCppAsksFor) {
  TempDir dir;
  // GPT-NeoX with a tied head: llama.cpp's gptneox needs output.weight, so it is written.
  const auto neox = random_model(with_vocab(tiny(true), 257), 1);
  save_gguf(dir.file("neox.gguf"), *neox, bytes_tokenizer(), gguf::TensorType::f16);
  const gguf::File f = gguf::read(dir.file("neox.gguf"));
  const std::set<std::string> want = {
      "token_embd.weight", "output_norm.weight", "output_norm.bias", "output.weight",
      "blk.0.attn_norm.weight", "blk.0.attn_norm.bias", "blk.0.attn_qkv.weight", "blk.0.attn_qkv.bias",
      "blk.0.attn_output.weight", "blk.0.attn_output.bias", "blk.0.ffn_norm.weight", "blk.0.ffn_norm.bias",
      "blk.0.ffn_up.weight", "blk.0.ffn_up.bias", "blk.0.ffn_down.weight", "blk.0.ffn_down.bias"};
  std::set<std::string> layer0;
  for (const std::string& n : names_in(f))
    if (n.rfind("blk.1.", 0) != 0) layer0.insert(n);
  EXPECT_EQ(layer0, want);
  EXPECT_EQ(f.get_string("general.architecture"), "gptneox");
  EXPECT_EQ(f.get_int("general.file_type"), 1);  // mostly F16
  EXPECT_EQ(f.get_int("gptneox.context_length"), 8);
  EXPECT_EQ(f.get_int("gptneox.embedding_length"), 8);
  EXPECT_EQ(f.get_int("gptneox.block_count"), 2);
  EXPECT_EQ(f.get_int("gptneox.feed_forward_length"), 32);
  EXPECT_EQ(f.get_int("gptneox.attention.head_count"), 2);
  EXPECT_EQ(f.get_int("gptneox.rope.dimension_count"), 4);
  EXPECT_FALSE(f.get_bool("gptneox.use_parallel_residual"));
  EXPECT_FLOAT_EQ(float(f.get_float("gptneox.attention.layer_norm_epsilon")), 1e-5f);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "gpt-2");
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 256);
  for (size_t i = 0; i < f.infos.size(); ++i) {
    // Vectors stay F32, matrices take the asked type; (out, in) as ours.
    EXPECT_EQ(f.infos[i].type, f.infos[i].shape.size() == 1 ? gguf::TensorType::f32 : gguf::TensorType::f16) << f.infos[i].name;
    if (f.infos[i].name == "blk.0.attn_qkv.weight") {
      EXPECT_EQ(f.infos[i].shape, (Shape{24, 8}));
    }
  }

  // GPT-2 and Llama with tied heads: llama.cpp reuses token_embd, so no output.weight.
  const auto gpt2 = random_model(with_vocab(tiny(false), 257), 1);
  save_gguf(dir.file("gpt2.gguf"), *gpt2, bytes_tokenizer(), gguf::TensorType::bf16);
  EXPECT_EQ(names_in(gguf::read(dir.file("gpt2.gguf"))).count("output.weight"), 0u);
  EXPECT_EQ(names_in(gguf::read(dir.file("gpt2.gguf"))).count("position_embd.weight"), 1u);
  const auto llama = random_model(with_vocab(tiny_llama(false), 257), 1);
  save_gguf(dir.file("llama.gguf"), *llama, bytes_tokenizer(), gguf::TensorType::f32);
  const gguf::File l = gguf::read(dir.file("llama.gguf"));
  for (const char* n : {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight", "blk.0.ffn_gate.weight",
                        "blk.0.ffn_up.weight", "blk.0.ffn_down.weight", "output.weight"})
    EXPECT_EQ(names_in(l).count(n), 1u) << n;
  EXPECT_EQ(l.get_int("llama.attention.head_count_kv"), 2);
  EXPECT_FLOAT_EQ(float(l.get_float("llama.attention.layer_norm_rms_epsilon")), 1e-6f);
  EXPECT_FLOAT_EQ(float(l.get_float("llama.rope.freq_base")), 500.0f);

  // llama.cpp's Llama rotates neighbouring pairs: a split-half model's q rows of head h go out as
  // (h, D/2, 2) from ours (h, 2, D/2), k likewise, v unchanged.
  const GPTConfig& c = llama->config();
  const int64_t D = c.head_dim();
  Tensor qkv;
  for (const auto& [name, t] : llama->state_dict())
    if (name == "transformer.h.0.attn.c_attn.weight") qkv = t.detach();
  for (size_t i = 0; i < l.infos.size(); ++i) {
    if (l.infos[i].name != "blk.0.attn_q.weight") continue;
    for (int64_t h = 0; h < c.n_head; ++h)
      for (int64_t j = 0; j < D / 2; ++j)
        for (int64_t half = 0; half < 2; ++half) {
          const Tensor theirs = ops::select(l.tensors[i], 0, h * D + 2 * j + half);
          const Tensor ours = ops::select(qkv, 0, h * D + half * (D / 2) + j);
          EXPECT_TRUE(bitwise_equal(theirs, ours)) << h << " " << j << " " << half;
        }
  }
}

TEST(Gguf, SmallerTypesLoadAsTheirRoundedValues) {
  TempDir dir;
  const auto model = random_model(with_vocab(tiny(true), 257), 5);
  save_gguf(dir.file("bf16.gguf"), *model, bytes_tokenizer(), gguf::TensorType::bf16);
  const LoadedGguf back = load_gguf(dir.file("bf16.gguf"));
  EXPECT_EQ(back.checkpoint.metadata.at("gguf_type"), "BF16");
  const auto a = model->state_dict(), b = back.checkpoint.model->state_dict();
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<float> x = a[i].second.detach().to_vector<float>(), y = b[i].second.detach().to_vector<float>();
    for (size_t j = 0; j < x.size(); ++j)
      EXPECT_EQ(y[j], a[i].second.dim() == 1 ? x[j] : float(bfloat16(x[j]))) << a[i].first;
  }
  // Written again, the same values.
  save_gguf(dir.file("again.gguf"), *back.checkpoint.model, bytes_tokenizer(), gguf::TensorType::bf16);
  expect_same_weights(*back.checkpoint.model, *load_gguf(dir.file("again.gguf")).checkpoint.model);
  // Q8_0 needs rows of a multiple of 32: the 8-wide ones fall back to F16 (ffn_down's are 32).
  save_gguf(dir.file("q8.gguf"), *model, bytes_tokenizer(), gguf::TensorType::q8_0);
  for (const auto& info : gguf::read(dir.file("q8.gguf")).infos) {
    const auto want = info.shape.size() == 1 ? gguf::TensorType::f32 : info.shape.back() % 32 == 0 ? gguf::TensorType::q8_0 : gguf::TensorType::f16;
    EXPECT_EQ(info.type, want) << info.name;
  }
}

TEST(Gguf, SentencePieceGoesOutAsLlamasVocabulary) {
  TempDir dir;
  const text::Tokenizer sp = text::Tokenizer::load(std::string(MVGPT_SOURCE_DIR) + "/tests/fixtures/llama2c/tok512.bin");
  GPTConfig c = with_vocab(tiny_llama(true), 512);
  c.rope_layout = RopeLayout::interleaved;
  const auto model = random_model(c, 9);
  save_gguf(dir.file("sp.gguf"), *model, sp, gguf::TensorType::f32);
  const gguf::File f = gguf::read(dir.file("sp.gguf"));
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 1);
  const auto& tokens = f.get_array("tokenizer.ggml.tokens", gguf::ValueType::string).strings;
  const auto& types = f.get_array("tokenizer.ggml.token_type", gguf::ValueType::i32).ints;
  EXPECT_EQ(tokens[3], "<0x00>");
  EXPECT_EQ(types[3], 6);  // byte
  EXPECT_EQ(types[1], 3);  // control
  bool spaced = false;
  for (const auto& t : tokens) spaced |= t.rfind("\xe2\x96\x81", 0) == 0;  // "▁" for a space
  EXPECT_TRUE(spaced);
  const LoadedGguf back = load_gguf(dir.file("sp.gguf"));
  ASSERT_TRUE(back.tokenizer.has_value());
  EXPECT_TRUE(*back.tokenizer == sp);
  expect_same_weights(*model, *back.checkpoint.model);
}

TEST(Gguf, WhatLlamaCppCannotComputeIsRefusedBeforeTheFileIsTouched) {
  TempDir dir;
  const std::string path = dir.file("x.gguf");
  auto refused = [&](const GPTConfig& c, const std::string& what) {
    const auto model = random_model(with_vocab(c, 257), 1);
    try {
      save_gguf(path, *model, bytes_tokenizer(), gguf::TensorType::f32);
      ADD_FAILURE() << "wrote " << what;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(path)) << what;
  };
  GPTConfig exact = tiny(true);
  exact.exact_gelu = true;
  refused(exact, "exact GELU");
  GPTConfig relu2 = tiny(false);
  relu2.mlp = MlpKind::relu2;
  refused(relu2, "relu2");
  GPTConfig gqa = tiny(true);
  gqa.n_head = 4, gqa.n_kv_head = 2;
  refused(gqa, "grouped KV heads");
  GPTConfig ntk = tiny(true);
  ntk.rope_scaling = {RopeScalingType::ntk, 4.0};
  refused(ntk, "ntk");
  // A tokenizer larger than the model.
  const auto small = random_model(tiny(true), 1);
  EXPECT_THROW(save_gguf(path, *small, bytes_tokenizer(), gguf::TensorType::f32), std::invalid_argument);
  // LoRA adapters: merge first.
  const auto adapted = random_model(with_vocab(tiny(true), 257), 1);
  nn::add_lora(*adapted, {.rank = 2});
  EXPECT_THROW(save_gguf(path, *adapted, bytes_tokenizer(), gguf::TensorType::f32), std::invalid_argument);
  EXPECT_FALSE(std::filesystem::exists(path));
}

// The file at `from` written again to `to` after `change` (its metadata and tensors, as read).
void rewritten(const std::string& from, const std::string& to, const std::function<void(gguf::Metadata&, std::vector<gguf::TensorOut>&)>& change) {
  const gguf::File f = gguf::read(from);
  gguf::Metadata m = f.metadata;
  std::vector<gguf::TensorOut> t;
  for (size_t i = 0; i < f.infos.size(); ++i) t.push_back({f.infos[i].name, f.tensors[i], f.infos[i].type});
  change(m, t);
  gguf::save(to, m, t, /*replace=*/true);
}

void set(gguf::Metadata& m, const std::string& key, const gguf::Value& v) {
  for (auto& [k, old] : m)
    if (k == key) old = v;
}

TEST(Gguf, FilesThatDoNotDescribeOurModelAreRefusedNamingWhatDiffers) {
  TempDir dir;
  const std::string good = dir.file("good.gguf"), bad = dir.file("bad.gguf");
  save_gguf(good, *random_model(with_vocab(tiny_llama(false), 257), 2), bytes_tokenizer(), gguf::TensorType::f32);
  auto refused = [&](const std::string& what) {
    try {
      load_gguf(bad);
      ADD_FAILURE() << "loaded: " << what;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  // q and k each off by a head's rows (the total still fits): each part's shape is checked.
  rewritten(good, bad, [](auto&, auto& t) {
    for (auto& x : t) {
      if (x.name == "blk.0.attn_q.weight") x.tensor = ops::narrow(x.tensor, 0, 0, 6);
      if (x.name == "blk.0.attn_k.weight") x.tensor = ops::cat({x.tensor, ops::narrow(x.tensor, 0, 0, 2)}, 0);
    }
  });
  refused("mis-shaped blk.0.attn_q.weight");
  rewritten(good, bad, [](auto&, auto& t) { std::erase_if(t, [](const auto& x) { return x.name == "blk.1.ffn_down.weight"; }); });
  refused("missing blk.1.ffn_down.weight");
  rewritten(good, bad, [](auto&, auto& t) { t.push_back({"blk.9.extra.weight", ops::zeros({2}, DType::f32), gguf::TensorType::f32}); });
  refused("unexpected blk.9.extra.weight");
  rewritten(good, bad, [](auto& m, auto&) { set(m, "llama.rope.dimension_count", gguf::Value::u32(1)); });
  refused("rotates every channel");
  // Without rope.dimension_count, llama.cpp's default (the head size) is ours.
  rewritten(good, bad, [](auto& m, auto&) { std::erase_if(m, [](const auto& kv) { return kv.first == "llama.rope.dimension_count"; }); });
  EXPECT_NO_THROW(load_gguf(bad));
  // A gptneox file with grouped KV heads: llama.cpp's GPT-NeoX takes them, our LayerNorm model has none.
  const std::string neox = dir.file("neox.gguf");
  save_gguf(neox, *random_model(with_vocab(tiny(true), 257), 2), bytes_tokenizer(), gguf::TensorType::f32);
  rewritten(neox, bad, [](auto& m, auto&) { set(m, "gptneox.attention.head_count_kv", gguf::Value::u32(1)); });
  refused("grouped KV heads");
}

TEST(Gguf, AVocabularyInAnotherLayoutIsLeftOutSayingWhy) {
  TempDir dir;
  const std::string good = dir.file("good.gguf"), other = dir.file("other.gguf");
  const auto model = random_model(with_vocab(tiny(true), 257), 2);
  save_gguf(good, *model, bytes_tokenizer(), gguf::TensorType::f32);
  rewritten(good, other, [](auto& m, auto&) { set(m, "tokenizer.ggml.pre", gguf::Value::string("llama-bpe")); });
  const LoadedGguf back = load_gguf(other);
  EXPECT_FALSE(back.tokenizer.has_value());
  EXPECT_NE(back.tokenizer_note.find("llama-bpe"), std::string::npos) << back.tokenizer_note;
  EXPECT_EQ(back.architecture, "gptneox");
  expect_same_weights(*model, *back.checkpoint.model);
}

TEST(Gguf, OneTableOfNamesServesBothFormats) {
  // Every tensor of every variant has a Hugging Face and a GGUF name, and no two share one.
  for (const GPTConfig& c : {tiny(false), tiny(true), tiny_llama(false)}) {
    const auto f = export_names::family_of(c);
    std::set<std::string> hf, gguf;
    for (const auto& [name, t] : GPT(c).state_dict()) {
      const auto at = export_names::locate(name, f);
      for (int k = 0; k < (at.entry->split_qkv() ? 3 : 1); ++k) {
        EXPECT_TRUE(hf.insert(export_names::hf_name(at, f, k)).second) << name;
        EXPECT_TRUE(gguf.insert(export_names::gguf_name(at, k)).second) << name;
      }
    }
    const nn::NamedTensors exported = hf::to_hf_tensors(GPT(c));
    std::set<std::string> written;
    for (const auto& [name, t] : exported) written.insert(name);
    EXPECT_EQ(written, hf);
  }
}

}  // namespace
}  // namespace mvgpt::gpt
