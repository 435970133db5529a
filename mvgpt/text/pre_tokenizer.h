#pragma once
// INTERNAL: not part of the public API (split_chunks in tokenizer.h is the pre-tokenizer's public
// face). GPT-2's chunking rule, inline because encoding and training call it on every byte, and the
// places where text can be cut into pieces that chunk alike apart and together, which both encode
// and count in parallel.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace mvgpt::text::detail {

enum class CharClass : uint8_t { space, letter, digit, other };

struct Unit {
  CharClass cls;
  uint8_t len;  // bytes
};

constexpr bool is_ascii_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

constexpr std::array<CharClass, 128> make_ascii_classes() {
  std::array<CharClass, 128> t{};
  for (int c = 0; c < 128; ++c) {
    if (is_ascii_space(static_cast<unsigned char>(c))) t[c] = CharClass::space;
    else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) t[c] = CharClass::letter;
    else if (c >= '0' && c <= '9') t[c] = CharClass::digit;
    else t[c] = CharClass::other;
  }
  return t;
}
inline constexpr std::array<CharClass, 128> kAsciiClass = make_ascii_classes();

// One UTF-8 character starting with a byte >= 0x80; an invalid or cut sequence is one "other" byte.
Unit non_ascii_unit(const unsigned char* s, size_t i, size_t n);

inline Unit unit_at(const unsigned char* s, size_t i, size_t n) {
  return s[i] < 0x80 ? Unit{kAsciiClass[s[i]], 1} : non_ascii_unit(s, i, n);
}

// Length of an English contraction ('s 't 'm 'd 're 've 'll) starting at the apostrophe at i, or 0.
inline size_t contraction_len(const unsigned char* s, size_t i, size_t n) {
  if (i + 1 >= n) return 0;
  const unsigned char c1 = s[i + 1];
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (i + 2 >= n) return 0;
  const unsigned char c2 = s[i + 2];
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

// Calls emit(begin, end) for each chunk of `text`, in order.
template <typename Emit>
void for_each_chunk(std::string_view text, Emit&& emit) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    size_t start = i;
    Unit u = unit_at(s, i, n);
    if (u.cls == CharClass::space) {
      size_t j = i + 1;
      while (j < n && is_ascii_space(s[j])) ++j;
      if (j == n) {  // trailing whitespace: one chunk
        emit(start, j);
        return;
      }
      if (j - i >= 2) {  // all but the last whitespace character
        emit(i, j - 1);
        i = start = j - 1;
      }
      if (s[i] != ' ') {  // a newline or tab before a word stands alone
        emit(i, i + 1);
        ++i;
        continue;
      }
      ++i;  // a single space leads the chunk that follows
      u = unit_at(s, i, n);
    } else if (s[i] == '\'') {
      if (const size_t c = contraction_len(s, i, n)) {
        emit(i, i + c);
        i += c;
        continue;
      }
    }
    size_t j = i + u.len;
    while (j < n) {
      const Unit v = unit_at(s, j, n);
      if (v.cls != u.cls) break;
      j += v.len;
    }
    emit(start, j);
    i = j;
  }
}

constexpr size_t kPieceBytes = size_t(1) << 16;     // text is cut into pieces of about this size
constexpr size_t kParallelBytes = size_t(1) << 18;  // inputs smaller than this are encoded or counted serially

// A piece of text to encode or count on its own; `special` when it is "<|endoftext|>".
using TextPieces = std::vector<std::pair<std::string_view, bool>>;

// Appends text to `pieces`, cut at safe points (where the cut changes no chunk) into pieces of about
// kPieceBytes.
void add_text_pieces(std::string_view text, TextPieces& pieces);

// Splits at every "<|endoftext|>" when `recognize_special`, then into pieces.
TextPieces split_pieces(std::string_view text, bool recognize_special);

}  // namespace mvgpt::text::detail
