#include <mvgpt/text/tokenizer.h>

#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <array>
#include <limits>
#include <nlohmann/json.hpp>
#include <queue>
#include <stdexcept>
#include <unordered_set>

#include <mvgpt/util/atomic_file.h>
#include <mvgpt/util/json.h>

namespace mvgpt::text {
namespace {

// ---------------------------------------------------------------------------------------------
// Pre-tokenizer
// ---------------------------------------------------------------------------------------------

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
constexpr std::array<CharClass, 128> kAsciiClass = make_ascii_classes();

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

// One UTF-8 character starting with a byte >= 0x80; an invalid or cut sequence is one "other" byte.
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

inline Unit unit_at(const unsigned char* s, size_t i, size_t n) {
  return s[i] < 0x80 ? Unit{kAsciiClass[s[i]], 1} : non_ascii_unit(s, i, n);
}

// Length of an English contraction ('s 't 'm 'd 're 've 'll) starting at the apostrophe at i, or 0.
size_t contraction_len(const unsigned char* s, size_t i, size_t n) {
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

constexpr uint64_t pair_key(TokenId a, TokenId b) { return (uint64_t(a) << 32) | b; }

// Heterogeneous lookup: find a std::string key by std::string_view without allocating.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// Each distinct chunk's tokens, stored once in a flat arena.
struct ChunkCache {
  StringMap<std::pair<uint32_t, uint32_t>> index;  // chunk -> (offset, length) in arena
  std::vector<TokenId> arena;
  // Random text makes every chunk new; past this the cache costs more memory than it saves.
  static constexpr size_t kMaxEntries = size_t(1) << 20;
};

constexpr size_t kPieceBytes = size_t(1) << 16;      // text is cut into pieces of about this size
constexpr size_t kParallelBytes = size_t(1) << 18;   // inputs smaller than this are encoded serially

}  // namespace

std::vector<std::string_view> split_chunks(std::string_view text) {
  std::vector<std::string_view> chunks;
  for_each_chunk(text, [&](size_t b, size_t e) { chunks.push_back(text.substr(b, e - b)); });
  return chunks;
}

// ---------------------------------------------------------------------------------------------
// Vocabulary
// ---------------------------------------------------------------------------------------------

struct Tokenizer::Piece {
  std::string_view text;
  bool special = false;  // the piece is "<|endoftext|>", encoded as eot_id()
};

Tokenizer::Tokenizer() { build_tables(); }

Tokenizer Tokenizer::from_merges(std::vector<Merge> merges) {
  std::unordered_set<uint64_t> seen;
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto [a, b] = merges[i];
    const uint64_t defined = kNumByteTokens + i;  // ids below this exist when merge i is learned
    if (a >= defined || b >= defined) {
      throw std::invalid_argument("Tokenizer::from_merges: merge " + std::to_string(i) + " [" + std::to_string(a) +
                                  ", " + std::to_string(b) + "] uses a token not defined yet (ids < " +
                                  std::to_string(defined) + " are)");
    }
    if (!seen.insert(pair_key(a, b)).second) {
      throw std::invalid_argument("Tokenizer::from_merges: merge " + std::to_string(i) + " [" + std::to_string(a) +
                                  ", " + std::to_string(b) + "] repeats an earlier merge");
    }
  }
  // Each merge's token is the bytes of its two parts: 40 merges that each double the last ask for
  // 2^40 bytes. Bound the sizes before building any string.
  std::vector<uint64_t> length(kNumByteTokens + merges.size(), 1);
  uint64_t total = kNumByteTokens;
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto [a, b] = merges[i];
    const uint64_t n = length[kNumByteTokens + i] = length[a] + length[b];
    total += n;
    if (n > kMaxTokenBytes || total > kMaxVocabularyBytes) {
      throw std::invalid_argument(
          "Tokenizer::from_merges: merge " + std::to_string(i) + " [" + std::to_string(a) + ", " + std::to_string(b) +
          "] makes " +
          (n > kMaxTokenBytes ? "a token of " + std::to_string(n) + " bytes, past the limit of " +
                                    std::to_string(kMaxTokenBytes)
                              : "the vocabulary's tokens add up past the limit of " + std::to_string(kMaxVocabularyBytes) +
                                    " bytes") +
          " (not a trained tokenizer; use the tokenizer.json that prepare wrote)");
    }
  }
  Tokenizer t;
  t.merges_ = std::move(merges);
  t.build_tables();
  return t;
}

void Tokenizer::build_tables() {
  token_bytes_.clear();
  token_bytes_.reserve(kNumByteTokens + merges_.size() + 1);
  for (TokenId b = 0; b < kNumByteTokens; ++b) token_bytes_.emplace_back(1, char(b));
  merge_rank_.clear();
  merge_rank_.reserve(merges_.size());
  for (size_t i = 0; i < merges_.size(); ++i) {
    const auto [a, b] = merges_[i];
    token_bytes_.push_back(token_bytes_[a] + token_bytes_[b]);
    merge_rank_.emplace(pair_key(a, b), TokenId(i));
  }
  token_bytes_.emplace_back(kEndOfText);
}

const std::string& Tokenizer::token_bytes(TokenId id) const {
  if (id >= token_bytes_.size()) {
    throw std::invalid_argument("Tokenizer::token_bytes: id " + std::to_string(id) + " is outside the vocabulary of " +
                                std::to_string(token_bytes_.size()));
  }
  return token_bytes_[id];
}

// ---------------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------------

// Applies merges by rank, lowest first and leftmost among equals: GPT-2's order, since a merged
// token only takes part in merges learned after it.
void Tokenizer::encode_chunk(std::string_view chunk, std::vector<TokenId>& out) const {
  const size_t n = chunk.size();
  if (n == 0) return;
  if (n == 1) {
    out.push_back(static_cast<unsigned char>(chunk[0]));
    return;
  }
  constexpr TokenId kNoRank = std::numeric_limits<TokenId>::max();
  auto rank_of = [&](TokenId a, TokenId b) {
    const auto it = merge_rank_.find(pair_key(a, b));
    return it == merge_rank_.end() ? kNoRank : it->second;
  };

  if (n <= 32) {
    // Short chunks (nearly all of them): rescan the few pairs after each merge.
    std::array<TokenId, 32> ids;
    size_t len = n;
    for (size_t i = 0; i < n; ++i) ids[i] = static_cast<unsigned char>(chunk[i]);
    while (len > 1) {
      TokenId best = kNoRank;
      size_t at = 0;
      for (size_t i = 0; i + 1 < len; ++i) {
        const TokenId r = rank_of(ids[i], ids[i + 1]);
        if (r < best) {
          best = r;
          at = i;
        }
      }
      if (best == kNoRank) break;
      ids[at] = kNumByteTokens + best;
      std::copy(ids.begin() + at + 2, ids.begin() + len, ids.begin() + at + 1);
      --len;
    }
    out.insert(out.end(), ids.begin(), ids.begin() + len);
    return;
  }

  // Long chunks (long runs of spaces or symbols): a linked list and a heap of candidate merges,
  // O(n log n). Stale heap entries are skipped when their pair no longer has that rank.
  constexpr int kNone = -1;
  std::vector<TokenId> ids(n);
  std::vector<int> prev(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    ids[i] = static_cast<unsigned char>(chunk[i]);
    prev[i] = int(i) - 1;
    next[i] = i + 1 < n ? int(i + 1) : kNone;
  }
  using Candidate = std::pair<TokenId, int>;  // (rank, position of the left token)
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  for (size_t i = 0; i + 1 < n; ++i) {
    if (const TokenId r = rank_of(ids[i], ids[i + 1]); r != kNoRank) heap.emplace(r, int(i));
  }
  constexpr TokenId kDead = std::numeric_limits<TokenId>::max();
  while (!heap.empty()) {
    const auto [r, p] = heap.top();
    heap.pop();
    const int q = next[p];
    if (ids[p] == kDead || q == kNone || rank_of(ids[p], ids[q]) != r) continue;
    ids[p] = kNumByteTokens + r;
    ids[q] = kDead;
    next[p] = next[q];
    if (next[q] != kNone) prev[next[q]] = p;
    if (prev[p] != kNone) {
      if (const TokenId r2 = rank_of(ids[prev[p]], ids[p]); r2 != kNoRank) heap.emplace(r2, prev[p]);
    }
    if (next[p] != kNone) {
      if (const TokenId r3 = rank_of(ids[p], ids[next[p]]); r3 != kNoRank) heap.emplace(r3, p);
    }
  }
  for (int i = 0; i != kNone; i = next[i]) out.push_back(ids[i]);
}

namespace {

// Encodes one text piece chunk by chunk, through the cache.
template <typename EncodeChunk>
void encode_text(std::string_view text, ChunkCache& cache, std::vector<TokenId>& out, EncodeChunk&& encode_chunk) {
  for_each_chunk(text, [&](size_t b, size_t e) {
    const std::string_view chunk = text.substr(b, e - b);
    if (chunk.size() == 1) {
      out.push_back(static_cast<unsigned char>(chunk[0]));
      return;
    }
    auto it = cache.index.find(chunk);
    if (it == cache.index.end()) {
      if (cache.index.size() >= ChunkCache::kMaxEntries) {
        cache.index.clear();
        cache.arena.clear();
      }
      const size_t offset = cache.arena.size();
      encode_chunk(chunk, cache.arena);
      it = cache.index.emplace(std::string(chunk), std::pair{uint32_t(offset), uint32_t(cache.arena.size() - offset)})
               .first;
    }
    const TokenId* tokens = cache.arena.data() + it->second.first;
    out.insert(out.end(), tokens, tokens + it->second.second);
  });
}

// Appends text to `pieces`, cut at safe points into pieces of about kPieceBytes.
void add_text_pieces(std::string_view text, std::vector<std::pair<std::string_view, bool>>& pieces) {
  size_t start = 0;
  while (start < text.size()) {
    const size_t cut =
        text.size() - start <= kPieceBytes ? text.size() : next_safe_cut(text, start + kPieceBytes - 1);
    pieces.emplace_back(text.substr(start, cut - start), false);
    start = cut;
  }
}

// Splits at every "<|endoftext|>" when `recognize_special`, then into pieces.
std::vector<std::pair<std::string_view, bool>> split_pieces(std::string_view text, bool recognize_special) {
  std::vector<std::pair<std::string_view, bool>> pieces;
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

}  // namespace

std::vector<TokenId> Tokenizer::encode_pieces(const std::vector<Piece>& pieces, size_t total_bytes,
                                              const ProgressFn& progress) const {
  auto chunk_encoder = [this](std::string_view chunk, std::vector<TokenId>& out) { encode_chunk(chunk, out); };
  std::vector<TokenId> out;
  out.reserve(total_bytes / 3 + 16);  // English BPE averages 3-4 bytes a token
  if (total_bytes < kParallelBytes || pieces.size() <= 1) {
    ChunkCache cache;
    for (const Piece& piece : pieces) {
      if (piece.special) out.push_back(eot_id());
      else encode_text(piece.text, cache, out, chunk_encoder);
    }
    if (progress) progress(total_bytes, total_bytes);
    return out;
  }

  tbb::enumerable_thread_specific<ChunkCache> caches;
  std::vector<std::vector<TokenId>> results;
  size_t done = 0;
  // Progress is reported after each batch: about 16 reports, each batch big enough to keep all threads busy.
  const size_t batch_target = std::max(total_bytes / 16, kParallelBytes);
  for (size_t first = 0, count = 0; first < pieces.size(); first += count) {
    size_t batch_bytes = 0;
    for (count = 0; first + count < pieces.size() && batch_bytes < batch_target; ++count) {
      batch_bytes += pieces[first + count].text.size();
    }
    results.assign(count, {});
    tbb::parallel_for(size_t(0), count, [&](size_t k) {
      const Piece& piece = pieces[first + k];
      if (piece.special) {
        results[k].push_back(eot_id());
        return;
      }
      results[k].reserve(piece.text.size() / 3 + 16);
      encode_text(piece.text, caches.local(), results[k], chunk_encoder);
    });
    for (size_t k = 0; k < count; ++k) {
      out.insert(out.end(), results[k].begin(), results[k].end());
      done += pieces[first + k].text.size();
    }
    if (progress) progress(done, total_bytes);
  }
  return out;
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, const ProgressFn& progress) const {
  std::vector<Piece> pieces;
  for (const auto& [piece, special] : split_pieces(text, /*recognize_special=*/true)) pieces.push_back({piece, special});
  return encode_pieces(pieces, text.size(), progress);
}

std::vector<TokenId> Tokenizer::encode_ordinary(std::string_view text, const ProgressFn& progress) const {
  std::vector<Piece> pieces;
  for (const auto& [piece, special] : split_pieces(text, /*recognize_special=*/false)) pieces.push_back({piece, special});
  return encode_pieces(pieces, text.size(), progress);
}

std::string Tokenizer::decode(std::span<const TokenId> ids) const {
  size_t bytes = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= token_bytes_.size()) {
      throw std::invalid_argument("Tokenizer::decode: token " + std::to_string(i) + " is " + std::to_string(ids[i]) +
                                  ", outside the vocabulary of " + std::to_string(token_bytes_.size()));
    }
    bytes += token_bytes_[ids[i]].size();
  }
  std::string text;
  text.reserve(bytes);
  for (const TokenId id : ids) text += token_bytes_[id];
  return text;
}

std::vector<TokenId> encode_stories_file(const Tokenizer& tokenizer, const std::string& path,
                                         const ProgressFn& progress) {
  const std::string text = util::read_file(path);
  const std::string_view all = text;
  std::vector<Tokenizer::Piece> pieces;
  auto add_text = [&](std::string_view t) {
    std::vector<std::pair<std::string_view, bool>> parts;
    add_text_pieces(t, parts);
    for (const auto& part : parts) pieces.push_back({part.first, false});
  };
  // Only whole lines "<|endoftext|>" separate stories; the text around them, newlines included,
  // is kept as it is.
  size_t text_start = 0, line = 0;
  while (line < all.size()) {
    size_t end = all.find('\n', line);
    if (end == std::string_view::npos) end = all.size();
    std::string_view content = all.substr(line, end - line);
    if (!content.empty() && content.back() == '\r') content.remove_suffix(1);  // a CRLF file's separator too
    if (content == kEndOfText) {
      add_text(all.substr(text_start, line - text_start));
      pieces.push_back({all.substr(line, kEndOfText.size()), true});
      text_start = line + kEndOfText.size();  // the line ending after the separator starts the next story's text
    }
    line = end + 1;
  }
  add_text(all.substr(text_start));
  return tokenizer.encode_pieces(pieces, all.size(), progress);
}

// ---------------------------------------------------------------------------------------------
// Training
// ---------------------------------------------------------------------------------------------

namespace {

using ChunkCounts = StringMap<int64_t>;

// Adds the chunks of `text` (split at "<|endoftext|>", which is never learned) to `counts`;
// big texts are counted in parallel and the per-thread counts merged.
void count_chunks(std::string_view text, ChunkCounts& counts) {
  const auto pieces = split_pieces(text, /*recognize_special=*/true);
  auto count_piece = [](std::string_view piece, ChunkCounts& into) {
    for_each_chunk(piece, [&](size_t b, size_t e) {
      const std::string_view chunk = piece.substr(b, e - b);
      if (chunk.size() < 2) return;  // a single byte can take part in no merge
      auto it = into.find(chunk);
      if (it == into.end()) into.emplace(std::string(chunk), 1);
      else ++it->second;
    });
  };
  if (text.size() < kParallelBytes) {
    for (const auto& [piece, special] : pieces) {
      if (!special) count_piece(piece, counts);
    }
    return;
  }
  tbb::enumerable_thread_specific<ChunkCounts> local;
  tbb::parallel_for(size_t(0), pieces.size(), [&](size_t k) {
    if (!pieces[k].second) count_piece(pieces[k].first, local.local());
  });
  for (const ChunkCounts& part : local) {
    for (const auto& [chunk, n] : part) {
      auto it = counts.find(chunk);
      if (it == counts.end()) counts.emplace(chunk, n);
      else it->second += n;
    }
  }
}

// The pair-merge loop. Words are the distinct chunks (as token ids) with their counts; pair counts
// are updated incrementally for the words a merge touches, and a max-heap with lazy deletion finds
// the next pair: an entry is used only if its count is still the pair's count.
std::vector<Merge> learn_merges(const ChunkCounts& counts, size_t num_merges, const ProgressFn& progress) {
  // Sorted, so that nothing depends on hash-map order.
  std::vector<std::pair<std::string_view, int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::vector<TokenId>> words(sorted.size());
  std::vector<int64_t> freq(sorted.size());
  for (size_t w = 0; w < sorted.size(); ++w) {
    for (const char c : sorted[w].first) words[w].push_back(static_cast<unsigned char>(c));
    freq[w] = sorted[w].second;
  }

  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<uint32_t>> pair_words;  // may hold stale or repeated words
  for (size_t w = 0; w < words.size(); ++w) {
    for (size_t i = 0; i + 1 < words[w].size(); ++i) {
      const uint64_t key = pair_key(words[w][i], words[w][i + 1]);
      pair_count[key] += freq[w];
      pair_words[key].push_back(uint32_t(w));
    }
  }

  struct Entry {
    int64_t count;
    uint64_t pair;
    // Most frequent first; among equals the smaller (a, b).
    bool operator<(const Entry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
  };
  std::priority_queue<Entry> heap;
  for (const auto& [key, c] : pair_count) heap.push({c, key});

  std::vector<Merge> merges;
  merges.reserve(num_merges);
  std::unordered_map<uint64_t, int64_t> delta;
  std::vector<TokenId> merged;
  while (merges.size() < num_merges && !heap.empty()) {
    const Entry top = heap.top();
    heap.pop();
    const auto found = pair_count.find(top.pair);
    if (found == pair_count.end() || found->second != top.count || top.count <= 0) continue;  // stale

    const TokenId a = TokenId(top.pair >> 32), b = TokenId(top.pair & 0xFFFFFFFFu);
    const TokenId id = TokenId(kNumByteTokens + merges.size());
    merges.emplace_back(a, b);

    std::vector<uint32_t> touched = std::move(pair_words[top.pair]);
    pair_words.erase(top.pair);
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    delta.clear();
    for (const uint32_t w : touched) {
      std::vector<TokenId>& word = words[w];
      merged.clear();
      for (size_t i = 0; i < word.size(); ++i) {
        if (i + 1 < word.size() && word[i] == a && word[i + 1] == b) {
          merged.push_back(id);
          ++i;
        } else {
          merged.push_back(word[i]);
        }
      }
      if (merged.size() == word.size()) continue;  // stale entry: the pair is gone from this word
      for (size_t i = 0; i + 1 < word.size(); ++i) delta[pair_key(word[i], word[i + 1])] -= freq[w];
      for (size_t i = 0; i + 1 < merged.size(); ++i) {
        const uint64_t key = pair_key(merged[i], merged[i + 1]);
        delta[key] += freq[w];
        if (merged[i] == id || merged[i + 1] == id) pair_words[key].push_back(w);
      }
      word.swap(merged);
    }
    for (const auto& [key, d] : delta) {
      if (d == 0) continue;
      int64_t& c = pair_count[key];
      c += d;
      if (c > 0) heap.push({c, key});
      else pair_count.erase(key);
    }
    if (progress && (merges.size() % 256 == 0 || merges.size() == num_merges)) progress(merges.size(), num_merges);
  }
  return merges;
}

size_t merges_for_vocab(size_t vocab_size, const char* op) {
  constexpr size_t kMin = kNumByteTokens + 1;
  if (vocab_size < kMin || vocab_size > (size_t(1) << 31)) {
    throw std::invalid_argument(std::string(op) + ": vocab_size " + std::to_string(vocab_size) +
                                " must be in [257, 2^31] (256 bytes + merges + <|endoftext|>)");
  }
  return vocab_size - kMin;
}

}  // namespace

Tokenizer Tokenizer::train(std::string_view text, size_t vocab_size, const ProgressFn& progress) {
  const size_t num_merges = merges_for_vocab(vocab_size, "Tokenizer::train");
  ChunkCounts counts;
  count_chunks(text, counts);
  return from_merges(learn_merges(counts, num_merges, progress));
}

Tokenizer Tokenizer::train_files(const std::vector<std::string>& paths, size_t vocab_size,
                                 const ProgressFn& progress) {
  const size_t num_merges = merges_for_vocab(vocab_size, "Tokenizer::train_files");
  ChunkCounts counts;
  for (const std::string& path : paths) count_chunks(util::read_file(path), counts);
  return from_merges(learn_merges(counts, num_merges, progress));
}

// ---------------------------------------------------------------------------------------------
// JSON
// ---------------------------------------------------------------------------------------------

std::string Tokenizer::to_json() const {
  nlohmann::ordered_json j;
  j["type"] = "byte-bpe";
  j["version"] = 1;
  nlohmann::ordered_json merges = nlohmann::ordered_json::array();
  for (const auto& [a, b] : merges_) merges.push_back({a, b});
  j["merges"] = std::move(merges);
  j["special_tokens"] = {{std::string(kEndOfText), eot_id()}};
  j["vocab_size"] = vocab_size();
  return j.dump() + "\n";
}

void Tokenizer::save(const std::string& path) const { util::write_file_atomic(path, to_json()); }

Tokenizer Tokenizer::load(const std::string& path) {
  std::string text;
  try {
    text = util::read_file(path);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("Tokenizer::load: ") + e.what());
  }
  return from_json(text, path);
}

Tokenizer Tokenizer::from_json(std::string_view json, const std::string& source) {
  auto fail = [&](const std::string& what) -> std::runtime_error {
    return std::runtime_error("Tokenizer::load: " + source + ": " + what);
  };
  using Json = nlohmann::json;

  Json j;
  try {
    j = util::parse_json_strict(json);  // refuses a key given twice; names the key of a 1e400
  } catch (const util::JsonError& e) {
    throw fail(e.what());
  }
  if (!j.is_object()) throw fail(std::string("expected a JSON object, found ") + j.type_name());

  for (const auto& [key, value] : j.items()) {
    if (key != "type" && key != "version" && key != "merges" && key != "special_tokens" && key != "vocab_size") {
      throw fail("unexpected field \"" + key + "\"");
    }
  }
  auto field = [&](const char* name) -> const Json& {
    const auto it = j.find(name);
    if (it == j.end()) throw fail(std::string("missing field \"") + name + "\"");
    return *it;
  };
  auto as_id = [&](const Json& v, const std::string& what) -> uint64_t {
    if (!v.is_number_unsigned()) {
      throw fail(what + " must be a non-negative integer, found " + (v.is_number() ? v.dump() : v.type_name()));
    }
    return v.get<uint64_t>();
  };

  const Json& type = field("type");
  if (!type.is_string()) throw fail(std::string("\"type\" must be a string, found ") + type.type_name());
  if (type.get<std::string>() != "byte-bpe") throw fail("\"type\" is \"" + type.get<std::string>() + "\", expected \"byte-bpe\"");
  const Json& version = field("version");
  if (as_id(version, "\"version\"") != 1) throw fail("unsupported \"version\" " + version.dump() + " (expected 1)");

  const Json& merges_json = field("merges");
  if (!merges_json.is_array()) throw fail(std::string("\"merges\" must be an array, found ") + merges_json.type_name());
  std::vector<Merge> merges;
  merges.reserve(merges_json.size());
  for (size_t i = 0; i < merges_json.size(); ++i) {
    const Json& m = merges_json[i];
    const std::string name = "merge " + std::to_string(i);
    if (!m.is_array() || m.size() != 2) throw fail(name + " must be an array of two token ids, found " + m.dump());
    const uint64_t a = as_id(m[0], name + "'s first id"), b = as_id(m[1], name + "'s second id");
    const uint64_t defined = kNumByteTokens + i;
    if (a >= defined || b >= defined) {
      throw fail(name + " " + m.dump() + " references token " + std::to_string(std::max(a, b)) +
                 ", not defined yet (this merge defines token " + std::to_string(defined) + ")");
    }
    merges.emplace_back(TokenId(a), TokenId(b));
  }
  const uint64_t eot = kNumByteTokens + merges.size();

  const Json& special = field("special_tokens");
  if (!special.is_object()) throw fail(std::string("\"special_tokens\" must be an object, found ") + special.type_name());
  for (const auto& [name, id] : special.items()) {
    if (name != kEndOfText) throw fail("unknown special token \"" + name + "\" (only <|endoftext|> is supported)");
    if (as_id(id, "the id of <|endoftext|>") != eot) {
      throw fail("<|endoftext|> has id " + id.dump() + ", expected " + std::to_string(eot) + " (right after the " +
                 std::to_string(merges.size()) + " merges)");
    }
  }
  if (!special.contains(std::string(kEndOfText))) throw fail("\"special_tokens\" lacks <|endoftext|>");

  const Json& vocab = field("vocab_size");
  if (as_id(vocab, "\"vocab_size\"") != eot + 1) {
    throw fail("\"vocab_size\" is " + vocab.dump() + " but 256 bytes + " + std::to_string(merges.size()) +
               " merges + <|endoftext|> make " + std::to_string(eot + 1));
  }
  try {
    return from_merges(std::move(merges));
  } catch (const std::invalid_argument& e) {
    throw fail(e.what());
  }
}

}  // namespace mvgpt::text
