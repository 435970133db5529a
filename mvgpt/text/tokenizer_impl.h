#pragma once
// INTERNAL: not part of the public API. The keys the tokenizer's files share: a merge's pair as one
// integer (the vocabulary's table, encoding and training look merges up by it) and string maps that
// find a chunk by its string_view (encoding's cache, training's counts).
//
// They have internal linkage (an unnamed namespace, a copy per file), as they had when the tokenizer
// was one file: with external linkage GCC inlines the cache's lookups less, and encoding measured 6%
// slower (40.0 against 37.7 ms for the 4 MB of stories on one thread); with it, within 2%.
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <mvgpt/text/tokenizer.h>

namespace mvgpt::text {

// A SentencePiece vocabulary (NOTE [ llama2.c's tokenizer ]), shared by the copies of a Tokenizer.
struct Tokenizer::Scored {
  std::vector<std::string> pieces;  // as tokenizer.bin spells them: a space for "▁", "<0x0A>" for a byte
  std::vector<float> scores;
  std::unordered_map<std::string, TokenId> id_of;  // piece -> its lowest id
  TokenId space = 0;                               // the piece " ", the dummy prefix
  size_t longest_piece = 0;
};

}  // namespace mvgpt::text

namespace mvgpt::text::detail {
namespace {

constexpr uint64_t pair_key(TokenId a, TokenId b) { return (uint64_t(a) << 32) | b; }

// Heterogeneous lookup: find a std::string key by std::string_view without allocating.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

}  // namespace

// GPT-2's byte-to-unicode alphabet: printable Latin-1 bytes stand for themselves, the other 68
// bytes for U+0100 onwards in byte order (so a space is "Ġ", U+0120), each as UTF-8.
inline const std::array<std::string, 256>& byte_chars() {
  static const std::array<std::string, 256> chars = [] {
    std::array<std::string, 256> out;
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const int cp = printable ? b : next++;
      out[b] = cp < 0x80 ? std::string(1, char(cp))
                         : std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};  // all below U+0800
    }
    return out;
  }();
  return chars;
}

inline std::string spelled(const std::string& bytes) {
  std::string out;
  for (unsigned char b : bytes) out += byte_chars()[b];
  return out;
}

// Hugging Face's tokenizer.json (NOTE [ Hugging Face tokenizer.json ] in tokenizer.h), parsed from
// `j`; Tokenizer::from_json hands it over when the JSON object has "model". tokenizer_hf.cpp.
Tokenizer tokenizer_from_hf_json(std::string_view json_text, const std::string& source);

}  // namespace mvgpt::text::detail
