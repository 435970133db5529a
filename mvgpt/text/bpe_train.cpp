// Training: the chunks of the text counted (in parallel for big inputs), then merges learned from
// the counts, most frequent pair first.
#include <mvgpt/text/tokenizer.h>

#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <queue>
#include <stdexcept>

#include <mvgpt/text/pre_tokenizer.h>
#include <mvgpt/text/tokenizer_impl.h>
#include <mvgpt/util/atomic_file.h>

namespace mvgpt::text {

using detail::for_each_chunk;
using detail::kParallelBytes;
using detail::pair_key;
using detail::split_pieces;
using detail::StringMap;

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

}  // namespace mvgpt::text
