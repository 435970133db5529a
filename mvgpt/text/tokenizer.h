#pragma once
// Byte-level BPE, like GPT-2's: ids 0..255 are the bytes (so every input round-trips and nothing is
// unknown), 256.. are the learned merges in order, and the last id is "<|endoftext|>", which merges
// never produce. Text is first split into chunks (letters with an optional leading space, digits,
// runs of other symbols, whitespace) so that merges never cross a word boundary.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mvgpt::text {

using TokenId = uint32_t;
using Merge = std::pair<TokenId, TokenId>;

inline constexpr std::string_view kEndOfText = "<|endoftext|>";
inline constexpr TokenId kNumByteTokens = 256;
// Bounds on what a list of merges may build (a trained vocabulary is words: GPT-2's 50,257 tokens
// take under 400 KB), so that a small hostile file cannot ask for terabytes.
inline constexpr uint64_t kMaxTokenBytes = uint64_t(1) << 20;
inline constexpr uint64_t kMaxVocabularyBytes = uint64_t(64) << 20;

// Reports (done, total) from the calling thread: bytes for encoding, merges for training.
using ProgressFn = std::function<void(size_t done, size_t total)>;

// The pre-tokenizer's chunks, in order; they concatenate back to `text`. GPT-2's rule, written by
// hand: contractions ('s 't 're 've 'm 'll 'd), ` ?letters+`, ` ?digits+`, ` ?other+`, and
// whitespace runs whose last space joins the next word. Non-ASCII UTF-8 characters count as letters
// except punctuation and symbols (curly quotes, dashes, currency, emoji); invalid bytes are "other".
std::vector<std::string_view> split_chunks(std::string_view text);

class Tokenizer {
 public:
  // Bytes only (no merges): vocab 257, "<|endoftext|>" = 256.
  Tokenizer();

  // Learns merges until the vocabulary (bytes + merges + "<|endoftext|>") has `vocab_size` ids, or
  // until every chunk is a single token (then it is smaller). Occurrences of "<|endoftext|>" in the
  // text are separators, never learned. Ties between equally frequent pairs go to the smaller
  // (first id, second id), so training is deterministic.
  static Tokenizer train(std::string_view text, size_t vocab_size, const ProgressFn& progress = {});
  static Tokenizer train_files(const std::vector<std::string>& paths, size_t vocab_size,
                               const ProgressFn& progress = {});
  // From a list of merges (validated: each pair uses only ids defined before it, no duplicates, no
  // token over kMaxTokenBytes and all of them within kMaxVocabularyBytes).
  static Tokenizer from_merges(std::vector<Merge> merges);

  // JSON: {"type": "byte-bpe", "version": 1, "merges": [[a, b], ...],
  //        "special_tokens": {"<|endoftext|>": id}, "vocab_size": N}. save() is atomic; load() and
  // from_json() validate everything and throw std::runtime_error naming the file and the problem.
  // load() and from_json() also read the Hugging Face form below (a JSON object with "model").
  void save(const std::string& path) const;
  static Tokenizer load(const std::string& path);
  std::string to_json() const;
  static Tokenizer from_json(std::string_view json, const std::string& source = "<string>");

  // NOTE [ Hugging Face tokenizer.json ]
  // The same tokenizer as Hugging Face's `tokenizers` writes it, so that PreTrainedTokenizerFast
  // loads it and encodes to the same ids: a "BPE" model whose vocabulary spells each token's bytes in
  // GPT-2's byte-to-unicode alphabet (byte b is id b, merge i is id 256 + i), the merges as "a b" in
  // our order (their ranks), "<|endoftext|>" an added special token (the last id), and the ByteLevel
  // pre-tokenizer (GPT-2's regex, which split_chunks follows) and decoder. Reading one back accepts
  // only that layout (a tokenizer trained elsewhere numbers its tokens otherwise), naming what
  // differs. std::invalid_argument when two tokens spell the same bytes (a BPE vocabulary maps
  // each string to one id).
  std::string to_hf_json() const;

  // Encodes text; "<|endoftext|>" anywhere in it becomes eot_id(). Big inputs are encoded in
  // parallel (oneTBB) with the output in order.
  std::vector<TokenId> encode(std::string_view text, const ProgressFn& progress = {}) const;
  // Same, but "<|endoftext|>" is ordinary text (for untrusted input).
  std::vector<TokenId> encode_ordinary(std::string_view text, const ProgressFn& progress = {}) const;
  // Bytes of the tokens, concatenated (invalid UTF-8 is passed through as bytes). Throws
  // std::invalid_argument for an id outside the vocabulary.
  std::string decode(std::span<const TokenId> ids) const;
  // The bytes one token stands for ("<|endoftext|>" for the special one).
  const std::string& token_bytes(TokenId id) const;

  size_t vocab_size() const { return token_bytes_.size(); }
  TokenId eot_id() const { return TokenId(token_bytes_.size() - 1); }
  const std::vector<Merge>& merges() const { return merges_; }

  // The tokens of one pre-tokenized chunk (no special tokens), appended to `out`.
  void encode_chunk(std::string_view chunk, std::vector<TokenId>& out) const;

 private:
  struct Piece;
  void build_tables();
  std::vector<TokenId> encode_pieces(const std::vector<Piece>& pieces, size_t total_bytes,
                                     const ProgressFn& progress) const;
  friend std::vector<TokenId> encode_stories_file(const Tokenizer&, const std::string&, const ProgressFn&);

  std::vector<Merge> merges_;
  std::vector<std::string> token_bytes_;              // id -> bytes, the last one is "<|endoftext|>"
  std::unordered_map<uint64_t, TokenId> merge_rank_;  // (a << 32 | b) -> index of the merge
};

// Reads a file of stories separated by lines that hold only "<|endoftext|>" (TinyStories' .txt
// layout; lines may end in "\n" or "\r\n") and encodes it exactly as it reads: the separator lines
// become eot_id(), all other text, line endings included, is encoded as ordinary text, so
// decode(result) == the file's bytes.
std::vector<TokenId> encode_stories_file(const Tokenizer& tokenizer, const std::string& path,
                                         const ProgressFn& progress = {});

}  // namespace mvgpt::text
