// llama2.c's tokenizer (NOTE [ llama2.c's tokenizer ] in text/tokenizer.h) against run.c's own
// output: tests/fixtures/llama2c/*_encode.jsonl hold, for 31 prompts (ASCII, whitespace, digits,
// accents, Greek, Cyrillic, CJK, Korean, emoji, literal "<s>" and "<0x41>", stray bytes), the ids
// run.c's encode(prompt, bos=1, eos=0) gave and the bytes its decode(prev, token) gave, with Llama
// 2's real tokenizer.bin (32,000 pieces) and a 512-piece one trained the way llama2.c trains them
// (README.md there says how each file was made). Also: the heap encoder against run.c's rescanning
// loop written out slowly here, the JSON form, stories as llama2.c pretokenizes them, bad files.
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <map>

#include <mvgpt/text/tokenizer.h>
#include <mvgpt/util/atomic_file.h>
#include "llama2c_fixtures.h"
#include "text/text_test_util.h"

namespace mvgpt::text {
namespace {

using mvgpt::testing::llama2c::from_hex;
using mvgpt::testing::llama2c::kFixtures;
using mvgpt::testing::llama2c::read_jsonl;

class Llama2cTokenizer : public testing_util::ScratchDir {};

// What run.c's safe_printf prints of a piece: nothing for a lone byte that is neither printable nor
// whitespace.
std::string printed(std::string_view piece) {
  if (piece.size() == 1 && !(std::isprint(static_cast<unsigned char>(piece[0])) || std::isspace(static_cast<unsigned char>(piece[0]))))
    return "";
  return std::string(piece);
}

void expect_like_run_c(const std::string& tokenizer_bin, const std::string& encodings) {
  const Tokenizer tok = Tokenizer::load(kFixtures + tokenizer_bin);
  EXPECT_EQ(tok.kind(), TokenizerKind::sentencepiece);
  const auto lines = read_jsonl(encodings);
  ASSERT_GE(lines.size(), 30u);
  for (const auto& line : lines) {
    const std::string prompt = from_hex(line["prompt_hex"]);
    const std::vector<TokenId> want = line["ids"].get<std::vector<TokenId>>();
    const std::vector<TokenId> got = tok.encode_prompt(prompt);
    EXPECT_EQ(got, want) << tokenizer_bin << ": " << prompt;
    std::string shown;
    for (size_t i = 1; i < want.size(); ++i) shown += printed(tok.decode_next(want[i - 1], want[i]));
    EXPECT_EQ(tok.decode(want), from_hex(line["decoded_hex"])) << tokenizer_bin << ": " << prompt;
    EXPECT_EQ(shown, from_hex(line["printed_hex"])) << tokenizer_bin << ": " << prompt;
  }
}

TEST_F(Llama2cTokenizer, Llama2sTokenizerBinEncodesAndDecodesLikeRunC) {
  expect_like_run_c("tokenizer.bin", "llama2_encode.jsonl");
  const Tokenizer tok = Tokenizer::load(kFixtures + "tokenizer.bin");
  EXPECT_EQ(tok.vocab_size(), 32000u);
  EXPECT_EQ(tok.eot_id(), 1u);  // BOS: llama2.c's stories each begin with it
  // A text that begins a story round-trips; the dummy prefix is the space that BOS's neighbour loses.
  const std::string story = "Zoë said: «日本語», 🦙 and\ttabs\n";
  EXPECT_EQ(tok.decode(tok.encode_prompt(story)), story);
  EXPECT_EQ(tok.decode(tok.encode(story)), " " + story);
}

TEST_F(Llama2cTokenizer, A512PieceTokenizerTrainedAsLlama2cDoesEncodesAndDecodesLikeRunC) {
  expect_like_run_c("tok512.bin", "tok512_encode.jsonl");
}

// Ids 0..258 of a llama2.c vocabulary: <unk>, BOS spelled `bos`, EOS, and the 256 byte tokens.
std::vector<std::string> control_and_byte_pieces(const std::string& bos) {
  std::vector<std::string> pieces = {"<unk>", bos, "\n</s>\n"};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    pieces.push_back(buf);
  }
  return pieces;
}

// run.c's merge loop as it is written: rescan every pair, take the best score (the first among
// equals), merge, repeat. The slow reference for the heap in sentencepiece.cpp.
std::vector<TokenId> run_c_merges(const std::vector<std::string>& pieces, const std::vector<float>& scores,
                                  std::vector<TokenId> ids) {
  std::map<std::string, TokenId> id_of;
  for (size_t i = 0; i < pieces.size(); ++i) id_of.emplace(pieces[i], TokenId(i));
  while (true) {
    float best = -1e10f;
    int at = -1;
    TokenId merged = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const auto it = id_of.find(pieces[ids[i]] + pieces[ids[i + 1]]);
      if (it != id_of.end() && scores[it->second] > best) best = scores[it->second], at = int(i), merged = it->second;
    }
    if (at < 0) return ids;
    ids[at] = merged;
    ids.erase(ids.begin() + at + 1);
  }
}

TEST_F(Llama2cTokenizer, HeapOfMergesPicksWhatRunCsRescanPicks) {
  // A vocabulary with many equal scores, so that ties (the leftmost wins) are everywhere.
  std::vector<std::string> pieces = control_and_byte_pieces("\n<s>\n");
  std::vector<std::string> base = {" ", "a", "b", "c", "é", "ab", "ba", "aa", "bc", " a", " ab", "aba", "bab", "abc",
                                   "aaa", " aa", "cab", "abab", "ca", "éa", "aé", "  "};
  for (const auto& p : base) pieces.push_back(p);
  std::vector<float> scores(pieces.size(), 0.0f);
  std::mt19937 rng(7);
  for (size_t i = 259; i < pieces.size(); ++i) scores[i] = float(rng() % 4);  // few distinct values
  const Tokenizer tok = Tokenizer::from_pieces(pieces, scores);
  const char* alphabet[] = {"a", "b", "c", " ", "é", "x", "\xff"};
  for (int trial = 0; trial < 500; ++trial) {
    std::string text;
    const int n = 1 + int(rng() % 40);
    for (int i = 0; i < n; ++i) text += alphabet[rng() % 7];
    // The unmerged tokens: the dummy prefix, then a character or its bytes each.
    std::vector<TokenId> start = {TokenId(std::find(pieces.begin(), pieces.end(), " ") - pieces.begin())};
    for (size_t i = 0; i < text.size();) {
      size_t len = 1;
      while (len < 4 && i + len < text.size() && (static_cast<unsigned char>(text[i + len]) & 0xC0) == 0x80) ++len;
      const auto it = std::find(pieces.begin(), pieces.end(), text.substr(i, len));
      if (it != pieces.end()) start.push_back(TokenId(it - pieces.begin()));
      else
        for (size_t k = 0; k < len; ++k) start.push_back(3 + static_cast<unsigned char>(text[i + k]));
      i += len;
    }
    EXPECT_EQ(tok.encode(text), run_c_merges(pieces, scores, start)) << text;
  }
}

// Text never becomes <unk>, BOS or EOS, whatever they are spelled (run.c would look them up too).
TEST_F(Llama2cTokenizer, TextNeverBecomesAControlToken) {
  std::vector<std::string> pieces = control_and_byte_pieces(",");
  pieces.push_back(" ");
  const Tokenizer tok = Tokenizer::from_pieces(pieces, std::vector<float>(pieces.size(), 0.0f));
  EXPECT_EQ(tok.encode(","), (std::vector<TokenId>{259, 3 + ','}));  // the dummy prefix, then ',' as a byte
  EXPECT_EQ(tok.decode(tok.encode_prompt("a,b")), "a,b");
}

TEST_F(Llama2cTokenizer, JsonFormIsTheSameTokenizerAndLoadTellsTheFormsApart) {
  const Tokenizer bin = Tokenizer::load(kFixtures + "tok512.bin");
  bin.save(path("tokenizer.json"));
  const Tokenizer json = Tokenizer::load(path("tokenizer.json"));
  EXPECT_TRUE(json == bin);
  EXPECT_EQ(json.to_json(), bin.to_json());
  EXPECT_NE(bin.to_json().find(R"("type":"sentencepiece-bpe")"), std::string::npos);
  const std::string text = "Once upon a time, Zoë and Ben saw a 🦙 in 2024.";
  EXPECT_EQ(json.encode_prompt(text), bin.encode_prompt(text));
  EXPECT_FALSE(json == Tokenizer::load(kFixtures + "tokenizer.bin"));
  EXPECT_FALSE(json == Tokenizer());  // another kind
  EXPECT_THROW(bin.to_hf_json(), std::invalid_argument);
}

TEST_F(Llama2cTokenizer, StoriesAreEncodedAsLlama2cPretokenizesThem) {
  const Tokenizer tok = Tokenizer::load(kFixtures + "tok512.bin");
  const std::string stories = write("stories.txt", "  Once upon a time.\n<|endoftext|>\r\nThe end.\n\n<|endoftext|>\n \n<|endoftext|>\nLast one");
  std::vector<TokenId> want = tok.encode_prompt("Once upon a time.");
  for (const char* story : {"The end.", "Last one"}) {
    const auto ids = tok.encode_prompt(story);
    want.insert(want.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(encode_stories_file(tok, stories), want);
}

TEST_F(Llama2cTokenizer, BadFilesAreRefusedNamingTheFileAndTheProblem) {
  const std::string good = util::read_file(kFixtures + "tok512.bin");
  auto refused = [&](const std::string& bytes, const std::string& needle) {
    const std::string file = write("bad.bin", bytes);
    try {
      Tokenizer::load(file);
      ADD_FAILURE() << "loaded: " << needle;
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(file + ": "), std::string::npos) << what;
      EXPECT_NE(what.find(needle), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  };
  refused(good.substr(0, good.size() - 3), "ends past the end of the file");
  std::string few(good.data(), 4);  // the header, then 10 pieces of one byte
  for (int i = 0; i < 10; ++i) {
    const float score = 0;
    const int32_t length = 1;
    few.append(reinterpret_cast<const char*>(&score), 4).append(reinterpret_cast<const char*>(&length), 4).push_back('a');
  }
  refused(few, "10 pieces; a SentencePiece vocabulary with byte fallback has from 259");
  std::string past = good;
  const int32_t one = 1;  // max_token_length 1: the pieces are longer
  std::memcpy(past.data(), &one, 4);
  refused(past, "outside 1..1 (the header's max_token_length)");
  // Piece 3 must be "<0x00>": spell it "<0x0Z>".
  std::string wrong_byte = good;
  const size_t at = wrong_byte.find("<0x00>");
  ASSERT_NE(at, std::string::npos);
  wrong_byte[at + 4] = 'Z';
  refused(wrong_byte, "expected the byte-fallback token \"<0x00>\"");
  refused("this is not a tokenizer at all\n", "not valid JSON");  // neither form: JSON's parser says why
}

}  // namespace
}  // namespace mvgpt::text
