#pragma once
// A tokenizer runs one of two algorithms (TokenizerKind):
//
// Byte-level BPE, like GPT-2's (ours; prepare trains it): ids 0..255 are the bytes (so every input
// round-trips and nothing is unknown), 256.. are the learned merges in order, and the last id is
// "<|endoftext|>", which merges never produce. Text is first split into chunks (letters with an
// optional leading space, digits, runs of other symbols, whitespace) so that merges never cross a
// word boundary.
//
// NOTE [ llama2.c's tokenizer ]
// SentencePiece BPE as Llama's tokenizer and llama2.c's run.c run it, read from llama2.c's
// tokenizer.bin (or our JSON of it): a vocabulary of pieces with scores, "▁" written as a space; id 0
// is <unk>, 1 BOS, 2 EOS, 3..258 the byte-fallback tokens "<0x00>".."<0xFF>". encode() is run.c's
// encode(text, bos=0, eos=0), exactly: a dummy-prefix " " token first (unless the text is empty),
// then one token per UTF-8 character (a character that is no piece becomes its bytes' fallback
// tokens), then, as long as some neighbouring pair concatenates to a piece, the pair whose piece
// scores highest is merged (the leftmost among equals). decode() gives each piece's text and each
// byte token's byte; a piece right after BOS loses its leading space (the dummy prefix), and BOS
// and EOS decode to nothing. Stories are documents that each begin with BOS (llama2.c's
// pretokenization; run.c stops generating at one), so BOS plays the part of <|endoftext|>.
// Where run.c's behaviour is undefined or not the text's, mvgpt differs: a NUL byte is encoded
// (as <0x00>) where run.c's C string ends; text never becomes <unk>, BOS or EOS (run.c looks them up
// too, which only a hostile vocabulary can reach); a piece spelled twice is always its first id
// (run.c's binary search takes either); only ids 3..258 are bytes (run.c's sscanf would take any
// piece that starts "<0x" and a hex digit); and run.c's printf drops a lone unprintable byte, which
// decode() keeps.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
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

enum class TokenizerKind { byte_bpe, sentencepiece };

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
  // A SentencePiece vocabulary (NOTE [ llama2.c's tokenizer ]): pieces with a space for "▁" and their
  // scores. Ids 0..2 are <unk>, BOS and EOS whatever their text. std::invalid_argument unless ids
  // 3..258 are the 256 byte tokens "<0xXX>" in order, " " is a piece (the dummy prefix), no piece is
  // empty, holds a NUL or is not UTF-8, every score is finite, and there are 259 to 65536 pieces
  // (the token files are uint16).
  static Tokenizer from_pieces(std::vector<std::string> pieces, std::vector<float> scores);

  // JSON: {"type": "byte-bpe", "version": 1, "merges": [[a, b], ...],
  //        "special_tokens": {"<|endoftext|>": id}, "vocab_size": N}. save() is atomic; load() and
  // from_json() validate everything and throw std::runtime_error naming the file and the problem.
  // load() and from_json() also read the Hugging Face form below (a JSON object with "model").
  // A SentencePiece tokenizer's JSON: {"type": "sentencepiece-bpe", "version": 1, "pieces": [...],
  // "scores": [...], "unk_id": 0, "bos_id": 1, "eos_id": 2, "byte_fallback": true,
  // "add_dummy_prefix": true}. load() also reads llama2.c's tokenizer.bin: int32 max_token_length,
  // then per piece a float32 score, an int32 length and the bytes (the vocabulary size is the number
  // of records; run.c takes it from the model). It is told from JSON by its first int32, a length
  // (1..2^20), which the first four characters of a JSON text never spell.
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

  // NOTE [ GGUF vocabulary ]
  // The tokenizer as llama.cpp reads it from a GGUF file's tokenizer.ggml.* keys. Byte-level BPE is
  // model "gpt2": the tokens spelled as in tokenizer.json (GPT-2's byte alphabet), the merges as
  // "a b" in rank order, the pre-tokenizer "gpt-2" (llama.cpp's GPT-2 regex, which split_chunks
  // follows), and <|endoftext|> a control token that is BOS, EOS and EOT (llama.cpp's generation then
  // stops where `generate --stop-at-end` does). SentencePiece (llama2.c's) is model "llama": the
  // pieces with "▁" for a space, their scores and types (<unk> unknown, BOS and EOS control, <0xXX>
  // byte, the rest normal), BOS added before a prompt and the dummy prefix on, as run.c encodes.
  struct GgufVocabulary {
    std::string model;  // "gpt2" or "llama"
    std::string pre;    // gpt2's pre-tokenizer
    std::vector<std::string> tokens;
    std::vector<float> scores;         // llama
    std::vector<int32_t> token_types;  // llama.cpp's: 1 normal, 2 unknown, 3 control, 6 byte
    std::vector<std::string> merges;   // gpt2
    int64_t bos = -1, eos = -1, eot = -1, unk = -1;
    bool add_bos = false, add_space_prefix = false;
  };
  // std::invalid_argument when two tokens spell the same bytes (as to_hf_json).
  GgufVocabulary to_gguf_vocabulary() const;
  // Reads only the layouts to_gguf_vocabulary writes (a vocabulary trained elsewhere numbers its
  // tokens otherwise); std::runtime_error naming `source` and what differs.
  static Tokenizer from_gguf_vocabulary(const GgufVocabulary& vocabulary, const std::string& source);

  // Encodes text; "<|endoftext|>" anywhere in it becomes eot_id() (byte-level BPE; SentencePiece
  // has no special text). Big byte-level inputs are encoded in parallel (oneTBB) with the output in
  // order; a SentencePiece text is one sequence (encode_stories_file runs stories in parallel), and
  // reports its progress once, at the end.
  std::vector<TokenId> encode(std::string_view text, const ProgressFn& progress = {}) const;
  // Same, but "<|endoftext|>" is ordinary text (for untrusted input).
  std::vector<TokenId> encode_ordinary(std::string_view text, const ProgressFn& progress = {}) const;
  // What a story that begins with `text` starts from: byte-level BPE, encode(text), or
  // <|endoftext|> alone when the text is empty (a new story starts after one); SentencePiece, BOS
  // and then encode(text) (run.c's encode(text, bos=1, eos=0)).
  std::vector<TokenId> encode_prompt(std::string_view text) const;
  // Bytes of the tokens, concatenated (invalid UTF-8 is passed through as bytes). Throws
  // std::invalid_argument for an id outside the vocabulary.
  std::string decode(std::span<const TokenId> ids) const;
  // The bytes one token stands for ("<|endoftext|>" for the special one; a byte token's byte).
  const std::string& token_bytes(TokenId id) const;
  // The bytes `id` adds to a text whose last token is `prev` (run.c's decode(prev, token)): its
  // token_bytes, less a SentencePiece piece's leading space right after BOS.
  std::string_view decode_next(TokenId prev, TokenId id) const;

  TokenizerKind kind() const { return scored_ ? TokenizerKind::sentencepiece : TokenizerKind::byte_bpe; }
  size_t vocab_size() const { return token_bytes_.size(); }
  // The token between documents: <|endoftext|> (the last id), or BOS for SentencePiece.
  TokenId eot_id() const { return scored_ ? kBos : TokenId(token_bytes_.size() - 1); }
  // Byte-level BPE's merges (empty for SentencePiece).
  const std::vector<Merge>& merges() const { return merges_; }
  // Whether two tokenizers encode and decode alike: the same kind and the same merges, or the same
  // pieces and scores.
  bool operator==(const Tokenizer& other) const;

 private:
  // Byte-level BPE: the tokens of one pre-tokenized chunk (no special tokens), appended to `out`.
  void encode_chunk(std::string_view chunk, std::vector<TokenId>& out) const;
  struct Piece;
  void build_tables();
  std::vector<TokenId> encode_pieces(const std::vector<Piece>& pieces, size_t total_bytes,
                                     const ProgressFn& progress) const;
  friend std::vector<TokenId> encode_stories_file(const Tokenizer&, const std::string&, const ProgressFn&);

  // SentencePiece (sentencepiece.cpp).
  static constexpr TokenId kBos = 1, kEos = 2, kFirstByte = 3;
  static constexpr bool is_byte_token(TokenId id) { return id >= kFirstByte && id < kFirstByte + 256; }
  struct Scored;
  std::vector<TokenId> encode_scored(std::string_view text) const;
  static Tokenizer from_llama2c_bin(const std::string& bytes, const std::string& path);

  std::vector<Merge> merges_;
  std::vector<std::string> token_bytes_;              // id -> bytes, the last one is "<|endoftext|>"
  std::unordered_map<uint64_t, TokenId> merge_rank_;  // (a << 32 | b) -> index of the merge
  std::shared_ptr<const Scored> scored_;              // set for SentencePiece, which ignores the three above but token_bytes_
};

// Reads a file of stories separated by lines that hold only "<|endoftext|>" (TinyStories' .txt
// layout; lines may end in "\n" or "\r\n") and encodes it exactly as it reads: the separator lines
// become eot_id(), all other text, line endings included, is encoded as ordinary text, so
// decode(result) == the file's bytes. SentencePiece encodes each story much as llama2.c's
// pretokenization does: BOS, then the story with the ASCII whitespace around it stripped (an empty
// story is left out), by run.c's rule (llama2.c ran SentencePiece itself and Python's strip()).
std::vector<TokenId> encode_stories_file(const Tokenizer& tokenizer, const std::string& path,
                                         const ProgressFn& progress = {});

}  // namespace mvgpt::text
