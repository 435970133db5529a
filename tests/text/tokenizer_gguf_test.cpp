// The tokenizer as GGUF's vocabulary (NOTE [ GGUF vocabulary ]): byte-level BPE as llama.cpp's gpt2
// model with the gpt-2 pre-tokenizer and <|endoftext|> a control token ending documents;
// SentencePiece as its llama model with scores, types and "▁"; both read back to the same tokenizer,
// and any other layout refused naming what differs. That llama.cpp tokenizes held-out stories to our
// ids is checked in tests/python/test_gguf.py.
#include <gtest/gtest.h>

#include <mvgpt/text/tokenizer.h>
#include "text/text_test_util.h"

namespace mvgpt::text {
namespace {

using testing_util::expect_throw_with;
using testing_util::kSampleText;

TEST(TokenizerGguf, ByteLevelBpeIsGpt2sVocabulary) {
  const Tokenizer t = Tokenizer::train(kSampleText, 300);
  const Tokenizer::GgufVocabulary v = t.to_gguf_vocabulary();
  EXPECT_EQ(v.model, "gpt2");
  EXPECT_EQ(v.pre, "gpt-2");
  ASSERT_EQ(v.tokens.size(), t.vocab_size());
  EXPECT_EQ(v.tokens[65], "A");
  EXPECT_EQ(v.tokens[32], "\u0120");  // space is "Ġ", as in tokenizer.json
  EXPECT_EQ(v.tokens.back(), "<|endoftext|>");
  EXPECT_EQ(v.token_types.back(), 3);  // control: llama.cpp parses it in text as one token
  EXPECT_EQ(v.token_types[65], 1);
  EXPECT_EQ(v.merges.size(), t.merges().size());
  EXPECT_EQ(v.eos, int64_t(t.eot_id()));
  EXPECT_EQ(v.bos, int64_t(t.eot_id()));
  EXPECT_FALSE(v.add_bos);
  EXPECT_TRUE(Tokenizer::from_gguf_vocabulary(v, "x.gguf") == t);
}

TEST(TokenizerGguf, SentencePieceIsLlamasVocabulary) {
  const Tokenizer t = Tokenizer::load(std::string(MVGPT_SOURCE_DIR) + "/tests/fixtures/llama2c/tok512.bin");
  const Tokenizer::GgufVocabulary v = t.to_gguf_vocabulary();
  EXPECT_EQ(v.model, "llama");
  ASSERT_EQ(v.tokens.size(), 512u);
  EXPECT_EQ(v.token_types[0], 2);  // unknown
  EXPECT_EQ(v.token_types[2], 3);  // EOS, control
  EXPECT_EQ(v.tokens[3 + 10], "<0x0A>");
  EXPECT_EQ(v.token_types[3 + 10], 6);  // byte
  EXPECT_TRUE(v.add_bos);
  EXPECT_TRUE(v.add_space_prefix);
  for (const auto& tok : v.tokens) EXPECT_EQ(tok.find(' '), std::string::npos) << tok;  // "▁" instead
  EXPECT_TRUE(Tokenizer::from_gguf_vocabulary(v, "x.gguf") == t);
}

TEST(TokenizerGguf, OtherLayoutsAreRefusedNamingWhatDiffers) {
  const Tokenizer t = Tokenizer::train(kSampleText, 300);
  auto with = [&](auto change) {
    Tokenizer::GgufVocabulary v = t.to_gguf_vocabulary();
    change(v);
    return v;
  };
  expect_throw_with<std::runtime_error>(
      [&] { Tokenizer::from_gguf_vocabulary(with([](auto& v) { v.pre = "llama3"; }), "x.gguf"); }, {"pre-tokenizer \"llama3\""});
  expect_throw_with<std::runtime_error>(
      [&] { Tokenizer::from_gguf_vocabulary(with([](auto& v) { v.model = "bert"; }), "x.gguf"); }, {"model \"bert\""});
  expect_throw_with<std::runtime_error>(
      [&] { Tokenizer::from_gguf_vocabulary(with([](auto& v) { v.tokens.pop_back(); }), "x.gguf"); }, {"<|endoftext|>"});
  expect_throw_with<std::runtime_error>(
      [&] { Tokenizer::from_gguf_vocabulary(with([](auto& v) { std::swap(v.merges[0], v.merges[1]); }), "x.gguf"); }, {"merge"});
  expect_throw_with<std::runtime_error>(
      [&] { Tokenizer::from_gguf_vocabulary(with([](auto& v) { v.eos = 5; }), "x.gguf"); }, {"ends documents with id 5"});
  expect_throw_with<std::runtime_error>(
      [&] { Tokenizer::from_gguf_vocabulary(with([](auto& v) { v.tokens[70] = v.tokens[71]; }), "x.gguf"); }, {"twice"});
}

}  // namespace
}  // namespace mvgpt::text
