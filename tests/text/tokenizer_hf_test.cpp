// The tokenizer as Hugging Face's tokenizer.json (NOTE [ Hugging Face tokenizer.json ]): GPT-2's
// byte alphabet, merges as "a b" in rank order, <|endoftext|> an added special token; read back to
// the same merges, and anything in another layout refused naming what differs. That `tokenizers`
// encodes held-out stories to the same ids is checked in tests/python/test_hf.py.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <mvgpt/text/tokenizer.h>
#include "text/text_test_util.h"

namespace mvgpt::text {
namespace {

using testing_util::expect_throw_with;
using testing_util::kSampleText;

TEST(TokenizerHf, VocabularySpellsBytesInGpt2sAlphabet) {
  const Tokenizer t = Tokenizer::train(kSampleText, 300);
  const auto j = nlohmann::json::parse(t.to_hf_json());
  const auto& vocab = j["model"]["vocab"];
  EXPECT_EQ(vocab["A"], 65);
  EXPECT_EQ(vocab["\u0120"], 32);   // space is "Ġ"
  EXPECT_EQ(vocab["\u010a"], 10);   // newline is "Ċ"
  EXPECT_EQ(vocab["\u0100"], 0);    // the first unprintable byte
  EXPECT_EQ(vocab["\u00ff"], 255);  // printable Latin-1 stands for itself
  EXPECT_EQ(vocab["<|endoftext|>"], t.eot_id());
  EXPECT_EQ(vocab.size(), t.vocab_size());
  ASSERT_EQ(j["model"]["merges"].size(), t.merges().size());
  // The first merge, spelled: the two tokens' strings with a space between.
  const auto [a, b] = t.merges()[0];
  std::string spelled_a, spelled_b;
  for (const auto& [s, id] : vocab.items()) {
    if (id == a) spelled_a = s;
    if (id == b) spelled_b = s;
  }
  EXPECT_EQ(j["model"]["merges"][0], spelled_a + " " + spelled_b);
  EXPECT_EQ(j["added_tokens"][0]["content"], "<|endoftext|>");
  EXPECT_EQ(j["added_tokens"][0]["id"], t.eot_id());
  EXPECT_EQ(j["pre_tokenizer"]["type"], "ByteLevel");
}

TEST(TokenizerHf, ReadsBackToTheSameTokenizer) {
  const Tokenizer t = Tokenizer::train(kSampleText, 320);
  const Tokenizer back = Tokenizer::from_json(t.to_hf_json(), "tokenizer.json");
  EXPECT_EQ(back.merges(), t.merges());
  EXPECT_EQ(back.encode(kSampleText), t.encode(kSampleText));
  // tokenizers 0.20 may write a merge as ["a", "b"]: the same merge.
  auto j = nlohmann::json::parse(t.to_hf_json());
  const std::string first = j["model"]["merges"][0];
  j["model"]["merges"][0] = {first.substr(0, first.find(' ')), first.substr(first.find(' ') + 1)};
  EXPECT_EQ(Tokenizer::from_json(j.dump()).merges(), t.merges());
}

TEST(TokenizerHf, AnotherLayoutIsRefusedNamingWhatDiffers) {
  const Tokenizer t = Tokenizer::train(kSampleText, 300);
  const auto good = nlohmann::json::parse(t.to_hf_json());
  auto refused = [&](auto edit, std::string_view needle) {
    auto j = good;
    edit(j);
    expect_throw_with<std::runtime_error>([&] { Tokenizer::from_json(j.dump(), "hf/tokenizer.json"); },
                                          {"hf/tokenizer.json", needle});
  };
  refused([](auto& j) { j["model"]["type"] = "WordPiece"; }, "BPE");
  refused([](auto& j) { j["pre_tokenizer"]["add_prefix_space"] = true; }, "add_prefix_space false");
  refused([](auto& j) { j["normalizer"] = {{"type", "NFC"}}; }, "normalizer");
  // GPT-2's own numbering puts "!" at 0: not ours.
  refused([](auto& j) { std::swap(j["model"]["vocab"]["!"], j["model"]["vocab"]["\u0100"]); }, "byte 0");
  refused([](auto& j) { j["model"]["merges"].erase(0); }, "merge 0");
  refused([&](auto& j) { j["added_tokens"][0]["id"] = 5; }, "<|endoftext|> alone");
  refused([](auto& j) { j["pre_tokenizer"]["type"] = 5; }, "malformed");  // a field of another type
}

TEST(TokenizerHf, TwoTokensWithTheSameBytesCannotBeWritten) {
  // "ab" + "c" and "a" + "bc" both spell "abc".
  const Tokenizer t = Tokenizer::from_merges({{'a', 'b'}, {'b', 'c'}, {256, 'c'}, {'a', 257}});
  expect_throw_with<std::invalid_argument>([&] { (void)t.to_hf_json(); }, {"tokens 258 and 259", "abc"});
}

}  // namespace
}  // namespace mvgpt::text
