// Encoding: merges applied to each chunk, through a cache of the chunks seen; big inputs are cut
// into pieces at safe points and encoded in parallel (oneTBB), the output kept in order.
#include <mvgpt/text/tokenizer.h>

#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <array>
#include <limits>
#include <queue>

#include <mvgpt/text/pre_tokenizer.h>
#include <mvgpt/text/tokenizer_impl.h>
#include <mvgpt/util/atomic_file.h>

namespace mvgpt::text {

using detail::add_text_pieces;
using detail::for_each_chunk;
using detail::kParallelBytes;
using detail::pair_key;
using detail::split_pieces;
using detail::StringMap;

struct Tokenizer::Piece {
  std::string_view text;
  bool special = false;  // the piece is "<|endoftext|>", encoded as eot_id()
};

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

// Each distinct chunk's tokens, stored once in a flat arena.
struct ChunkCache {
  StringMap<std::pair<uint32_t, uint32_t>> index;  // chunk -> (offset, length) in arena
  std::vector<TokenId> arena;
  // Random text makes every chunk new; past this the cache costs more memory than it saves.
  static constexpr size_t kMaxEntries = size_t(1) << 20;
};

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
  if (scored_) {
    std::vector<TokenId> ids = encode_scored(text);
    if (progress) progress(text.size(), text.size());
    return ids;
  }
  std::vector<Piece> pieces;
  for (const auto& [piece, special] : split_pieces(text, /*recognize_special=*/true)) pieces.push_back({piece, special});
  return encode_pieces(pieces, text.size(), progress);
}

std::vector<TokenId> Tokenizer::encode_ordinary(std::string_view text, const ProgressFn& progress) const {
  if (scored_) return encode(text, progress);  // no special text
  std::vector<Piece> pieces;
  for (const auto& [piece, special] : split_pieces(text, /*recognize_special=*/false)) pieces.push_back({piece, special});
  return encode_pieces(pieces, text.size(), progress);
}

namespace {

// Calls separator(begin, end) for each whole line "<|endoftext|>" of a stories file, in order: begin
// is where the line starts, end where its "\n" is (or the file ends). A CRLF file's separators count.
template <typename Separator>
void for_each_separator_line(std::string_view all, Separator&& separator) {
  for (size_t line = 0; line < all.size();) {
    size_t end = all.find('\n', line);
    if (end == std::string_view::npos) end = all.size();
    std::string_view content = all.substr(line, end - line);
    if (!content.empty() && content.back() == '\r') content.remove_suffix(1);
    if (content == kEndOfText) separator(line, end);
    line = end + 1;
  }
}

// llama2.c's pretokenization: each story is BOS and its text with the whitespace around it
// stripped; separator lines only separate.
std::vector<TokenId> encode_stories_scored(const Tokenizer& tokenizer, std::string_view all, const ProgressFn& progress) {
  std::vector<std::string_view> stories;
  auto add_story = [&](std::string_view s) {
    const size_t b = s.find_first_not_of(" \t\r\n\f\v");
    if (b == std::string_view::npos) return;
    stories.push_back(s.substr(b, s.find_last_not_of(" \t\r\n\f\v") + 1 - b));
  };
  size_t story_start = 0;
  for_each_separator_line(all, [&](size_t line, size_t end) {
    add_story(all.substr(story_start, line - story_start));
    story_start = end + 1;
  });
  if (story_start < all.size()) add_story(all.substr(story_start));
  std::vector<std::vector<TokenId>> encoded(stories.size());
  tbb::parallel_for(size_t(0), stories.size(), [&](size_t i) { encoded[i] = tokenizer.encode_prompt(stories[i]); });
  std::vector<TokenId> out;
  for (const auto& ids : encoded) out.insert(out.end(), ids.begin(), ids.end());
  if (progress) progress(all.size(), all.size());
  return out;
}

}  // namespace

std::vector<TokenId> encode_stories_file(const Tokenizer& tokenizer, const std::string& path,
                                         const ProgressFn& progress) {
  const std::string text = util::read_file(path);
  const std::string_view all = text;
  if (tokenizer.kind() == TokenizerKind::sentencepiece) return encode_stories_scored(tokenizer, all, progress);
  std::vector<Tokenizer::Piece> pieces;
  auto add_text = [&](std::string_view t) {
    detail::TextPieces parts;
    add_text_pieces(t, parts);
    for (const auto& part : parts) pieces.push_back({part.first, false});
  };
  // Only whole lines "<|endoftext|>" separate stories; the text around them, newlines included,
  // is kept as it is.
  size_t text_start = 0;
  for_each_separator_line(all, [&](size_t line, size_t) {
    add_text(all.substr(text_start, line - text_start));
    pieces.push_back({all.substr(line, kEndOfText.size()), true});
    text_start = line + kEndOfText.size();  // the line ending after the separator starts the next story's text
  });
  add_text(all.substr(text_start));
  return tokenizer.encode_pieces(pieces, all.size(), progress);
}

}  // namespace mvgpt::text
