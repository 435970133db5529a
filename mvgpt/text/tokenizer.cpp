// The vocabulary: the merges, the bytes of every token, and decoding. Its other jobs have files of
// their own: pre_tokenizer.cpp (chunks), encode.cpp, bpe_train.cpp, tokenizer_json.cpp and
// sentencepiece.cpp (the other kind's vocabulary and encoding).
#include <mvgpt/text/tokenizer.h>

#include <stdexcept>
#include <unordered_set>

#include <mvgpt/text/tokenizer_impl.h>

namespace mvgpt::text {

using detail::pair_key;

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
  for (size_t i = 0; i < ids.size(); ++i) text += i ? decode_next(ids[i - 1], ids[i]) : token_bytes_[ids[i]];
  return text;
}

std::string_view Tokenizer::decode_next(TokenId prev, TokenId id) const {
  const std::string_view bytes = token_bytes(id);
  // run.c looks at the piece, so a byte token "<0x20>" keeps its space.
  if (scored_ && prev == kBos && !is_byte_token(id) && !bytes.empty() && bytes[0] == ' ') return bytes.substr(1);
  return bytes;
}

std::vector<TokenId> Tokenizer::encode_prompt(std::string_view text) const {
  std::vector<TokenId> ids = encode(text);
  if (scored_) ids.insert(ids.begin(), kBos);
  else if (ids.empty()) ids.push_back(eot_id());
  return ids;
}

bool Tokenizer::operator==(const Tokenizer& other) const {
  if (kind() != other.kind()) return false;
  if (!scored_) return merges_ == other.merges_;
  return scored_ == other.scored_ ||
         (scored_->pieces == other.scored_->pieces && scored_->scores == other.scored_->scores);
}

}  // namespace mvgpt::text
