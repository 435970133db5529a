// The pre-tokenizer: GPT-2's chunks (the rule itself is inline in pre_tokenizer.h) and the safe
// places to cut text into pieces.
#include <mvgpt/text/pre_tokenizer.h>

#include <mvgpt/text/tokenizer.h>

namespace mvgpt::text {
namespace detail {
namespace {

// Non-ASCII code points that are punctuation or symbols rather than letters (a coarse stand-in for
// Unicode's L categories, enough to keep curly quotes, dashes and emoji off the words).
bool is_symbol_code_point(uint32_t cp) {
  return cp <= 0xBF || cp == 0xD7 || cp == 0xF7 || (cp >= 0x2000 && cp <= 0x2BFF) ||
         (cp >= 0x2E00 && cp <= 0x2E7F) || (cp >= 0x3000 && cp <= 0x303F) || (cp >= 0xFE10 && cp <= 0xFE1F) ||
         (cp >= 0xFE30 && cp <= 0xFE6F) || (cp >= 0xFF00 && cp <= 0xFF0F) || (cp >= 0xFF1A && cp <= 0xFF20) ||
         (cp >= 0xFF3B && cp <= 0xFF40) || (cp >= 0xFF5B && cp <= 0xFF65) || (cp >= 0xFFF0 && cp <= 0xFFFF) ||
         (cp >= 0x1F000 && cp <= 0x1FAFF);
}

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

}  // namespace

Unit non_ascii_unit(const unsigned char* s, size_t i, size_t n) {
  const unsigned char b = s[i];
  uint32_t cp = 0;
  size_t len = 0;
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2;
    cp = b & 0x1F;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3;
    cp = b & 0x0F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4;
    cp = b & 0x07;
  } else {
    return {CharClass::other, 1};
  }
  if (i + len > n) return {CharClass::other, 1};
  for (size_t k = 1; k < len; ++k) {
    if (!is_continuation(s[i + k])) return {CharClass::other, 1};
    cp = (cp << 6) | (s[i + k] & 0x3F);
  }
  // Overlong forms, surrogates and code points past U+10FFFF are invalid.
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) {
    return {CharClass::other, 1};
  }
  return {is_symbol_code_point(cp) ? CharClass::other : CharClass::letter, uint8_t(len)};
}

namespace {

// A position where text can be cut without changing its chunks: right after a newline that stands
// between two non-spaces. Then "\n" is a chunk of its own either way; with more whitespace around it
// the run would be one trailing chunk in the first part but split in two in the whole text.
size_t next_safe_cut(std::string_view text, size_t from) {
  auto is_space = [&](size_t i) { return is_ascii_space(static_cast<unsigned char>(text[i])); };
  while (true) {
    const size_t nl = text.find('\n', from);
    if (nl == std::string_view::npos || nl + 1 >= text.size()) return text.size();
    if (nl > 0 && !is_space(nl - 1) && !is_space(nl + 1)) return nl + 1;
    from = nl + 1;
  }
}

}  // namespace

void add_text_pieces(std::string_view text, TextPieces& pieces) {
  size_t start = 0;
  while (start < text.size()) {
    const size_t cut =
        text.size() - start <= kPieceBytes ? text.size() : next_safe_cut(text, start + kPieceBytes - 1);
    pieces.emplace_back(text.substr(start, cut - start), false);
    start = cut;
  }
}

TextPieces split_pieces(std::string_view text, bool recognize_special) {
  TextPieces pieces;
  size_t start = 0;
  while (recognize_special) {
    const size_t at = text.find(kEndOfText, start);
    if (at == std::string_view::npos) break;
    add_text_pieces(text.substr(start, at - start), pieces);
    pieces.emplace_back(text.substr(at, kEndOfText.size()), true);
    start = at + kEndOfText.size();
  }
  add_text_pieces(text.substr(start), pieces);
  return pieces;
}

}  // namespace detail

std::vector<std::string_view> split_chunks(std::string_view text) {
  std::vector<std::string_view> chunks;
  detail::for_each_chunk(text, [&](size_t b, size_t e) { chunks.push_back(text.substr(b, e - b)); });
  return chunks;
}

}  // namespace mvgpt::text
