// SentencePiece BPE as llama2.c's run.c runs it (NOTE [ llama2.c's tokenizer ] in tokenizer.h): the
// vocabulary, reading tokenizer.bin, and encoding. Decoding shares tokenizer.cpp's tables.
#include <mvgpt/text/tokenizer.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <queue>
#include <stdexcept>

#include <mvgpt/text/pre_tokenizer.h>
#include <mvgpt/text/tokenizer_impl.h>

namespace mvgpt::text {

namespace {

constexpr size_t kMaxPieces = size_t(1) << 16;  // token files hold uint16 ids

// The pre-tokenizer's reading of UTF-8, which takes a non-ASCII byte that starts no valid character
// (a cut, overlong or surrogate sequence) as one byte alone; JSON can hold only valid UTF-8.
bool valid_utf8(std::string_view s) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const size_t len = detail::unit_at(b, i, s.size()).len;
    if (b[i] >= 0x80 && len == 1) return false;
    i += len;
  }
  return true;
}

std::string byte_piece(unsigned b) {
  static const char* hex = "0123456789ABCDEF";
  return std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
}

}  // namespace

Tokenizer Tokenizer::from_pieces(std::vector<std::string> pieces, std::vector<float> scores) {
  auto fail = [](const std::string& what) { return std::invalid_argument("Tokenizer::from_pieces: " + what); };
  if (pieces.size() != scores.size())
    throw fail(std::to_string(pieces.size()) + " pieces but " + std::to_string(scores.size()) + " scores");
  if (pieces.size() < kFirstByte + 256 || pieces.size() > kMaxPieces)
    throw fail(std::to_string(pieces.size()) + " pieces; a SentencePiece vocabulary with byte fallback has from " +
               std::to_string(kFirstByte + 256) + " (<unk>, BOS, EOS and the 256 bytes) to " + std::to_string(kMaxPieces));
  auto scored = std::make_shared<Scored>();
  uint64_t total = 0;
  for (size_t id = 0; id < pieces.size(); ++id) {
    const std::string& p = pieces[id];
    const std::string name = "piece " + std::to_string(id);
    if (p.empty()) throw fail(name + " is empty");
    if (p.find('\0') != std::string::npos) throw fail(name + " holds a NUL byte");
    if (!valid_utf8(p)) throw fail(name + " is not UTF-8");
    if (p.size() > kMaxTokenBytes || (total += p.size()) > kMaxVocabularyBytes)
      throw fail(name + " takes the vocabulary past " + std::to_string(kMaxVocabularyBytes) + " bytes");
    if (!std::isfinite(scores[id])) throw fail(name + " (\"" + p + "\") has the score " + std::to_string(scores[id]));
    if (is_byte_token(TokenId(id))) {
      const std::string want = byte_piece(unsigned(id - kFirstByte));
      if (p != want)
        throw fail(name + " is \"" + p + "\", expected the byte-fallback token \"" + want +
                   "\" (ids 3..258 are the bytes, after <unk>, BOS and EOS)");
    }
    // <unk>, BOS and EOS are never looked up: text cannot turn into them. A piece spelled twice
    // keeps its first id.
    if (id >= kFirstByte) scored->id_of.emplace(p, TokenId(id));
    scored->longest_piece = std::max(scored->longest_piece, p.size());
  }
  const auto space = scored->id_of.find(" ");
  if (space == scored->id_of.end()) throw fail("no piece is \" \" (\"▁\"), which encoding starts every text with");
  scored->space = space->second;

  Tokenizer t;
  t.token_bytes_.clear();
  t.token_bytes_.reserve(pieces.size());
  for (size_t id = 0; id < pieces.size(); ++id) {
    if (id == kBos || id == kEos) t.token_bytes_.emplace_back();
    else if (is_byte_token(TokenId(id))) t.token_bytes_.emplace_back(1, char(id - kFirstByte));
    else t.token_bytes_.push_back(pieces[id]);
  }
  t.merges_.clear();
  t.merge_rank_.clear();
  scored->pieces = std::move(pieces);
  scored->scores = std::move(scores);
  t.scored_ = std::move(scored);
  return t;
}

Tokenizer Tokenizer::from_llama2c_bin(const std::string& bytes, const std::string& path) {
  auto fail = [&](const std::string& what) {
    return std::runtime_error("Tokenizer::load: " + path + ": " + what + " (expected llama2.c's tokenizer.bin)");
  };
  size_t at = 0;
  auto read_int = [&](const std::string& what) {
    int32_t v = 0;
    if (at + 4 > bytes.size()) throw fail("ends inside " + what + " at byte " + std::to_string(at));
    std::memcpy(&v, bytes.data() + at, 4);
    at += 4;
    return v;
  };
  const int32_t max_length = read_int("the header");
  if (max_length <= 0 || size_t(max_length) > kMaxTokenBytes)
    throw fail("max_token_length is " + std::to_string(max_length));
  std::vector<std::string> pieces;
  std::vector<float> scores;
  while (at < bytes.size()) {
    const std::string record = "piece " + std::to_string(pieces.size());
    if (pieces.size() == kMaxPieces) throw fail("more than " + std::to_string(kMaxPieces) + " pieces");
    float score = 0;
    const int32_t score_bits = read_int(record + "'s score");
    std::memcpy(&score, &score_bits, 4);
    const int32_t length = read_int(record + "'s length");
    // run.c's buffer for a pair holds 2 * max_token_length bytes: a longer piece would overrun it.
    if (length <= 0 || length > max_length)
      throw fail(record + " has length " + std::to_string(length) + ", outside 1.." + std::to_string(max_length) +
                 " (the header's max_token_length)");
    if (at + size_t(length) > bytes.size()) throw fail(record + " ends past the end of the file");
    pieces.emplace_back(bytes.data() + at, size_t(length));
    scores.push_back(score);
    at += size_t(length);
  }
  try {
    return from_pieces(std::move(pieces), std::move(scores));
  } catch (const std::invalid_argument& e) {
    throw fail(std::string(e.what()).substr(std::strlen("Tokenizer::from_pieces: ")));
  }
}

// run.c's encode(text, bos=0, eos=0), step for step, with its O(n^2) rescans replaced by a heap of
// candidate merges (highest score first, then the leftmost), which picks the same pair each time.
std::vector<TokenId> Tokenizer::encode_scored(std::string_view text) const {
  const Scored& v = *scored_;
  std::vector<TokenId> ids;
  if (text.empty()) return ids;
  if (text.size() >= size_t(std::numeric_limits<int32_t>::max()))
    throw std::invalid_argument("Tokenizer::encode: " + std::to_string(text.size()) +
                                " bytes in one SentencePiece text, past 2^31; encode it in parts (a story at a time)");
  ids.reserve(text.size() + 1);
  ids.push_back(v.space);  // the dummy prefix
  // One token per UTF-8 character: a byte and the continuation bytes after it, four bytes at most
  // (run.c's grouping, which groups stray continuation bytes the same way).
  std::string character;
  for (size_t i = 0; i < text.size();) {
    size_t n = 1;
    while (n < 4 && i + n < text.size() && (static_cast<unsigned char>(text[i + n]) & 0xC0) == 0x80) ++n;
    character.assign(text.substr(i, n));
    if (const auto it = v.id_of.find(character); it != v.id_of.end()) {
      ids.push_back(it->second);
    } else {
      for (const char b : character) ids.push_back(kFirstByte + static_cast<unsigned char>(b));
    }
    i += n;
  }

  // Merges. run.c only takes a pair whose score beats -1e10, its starting best.
  const size_t n = ids.size();
  std::vector<int> next(n), prev(n);
  for (size_t i = 0; i < n; ++i) next[i] = i + 1 < n ? int(i + 1) : -1, prev[i] = int(i) - 1;
  struct Candidate {
    float score;
    int left, right;
    TokenId left_id, right_id, merged;
    bool operator<(const Candidate& o) const { return score != o.score ? score < o.score : left > o.left; }
  };
  std::priority_queue<Candidate> heap;
  std::string pair;
  auto consider = [&](int left) {
    const int right = next[left];
    if (right < 0) return;
    const std::string &a = v.pieces[ids[left]], &b = v.pieces[ids[right]];
    if (a.size() + b.size() > v.longest_piece) return;  // no piece is that long
    pair.assign(a).append(b);
    const auto it = v.id_of.find(pair);
    if (it == v.id_of.end() || !(v.scores[it->second] > -1e10f)) return;
    heap.push({v.scores[it->second], left, right, ids[left], ids[right], it->second});
  };
  for (int i = 0; i + 1 < int(n); ++i) consider(i);
  std::vector<bool> gone(n, false);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (gone[c.left] || next[c.left] != c.right || ids[c.left] != c.left_id || ids[c.right] != c.right_id) continue;
    ids[c.left] = c.merged;
    gone[c.right] = true;
    next[c.left] = next[c.right];
    if (next[c.left] >= 0) prev[next[c.left]] = c.left;
    if (prev[c.left] >= 0) consider(prev[c.left]);
    consider(c.left);
  }
  std::vector<TokenId> out;
  for (int i = 0; i >= 0; i = next[i]) out.push_back(ids[i]);
  return out;
}

}  // namespace mvgpt::text
