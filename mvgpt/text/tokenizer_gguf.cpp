// The tokenizer as GGUF's vocabulary, both ways (NOTE [ GGUF vocabulary ] in tokenizer.h).
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include <mvgpt/text/tokenizer.h>
#include <mvgpt/text/tokenizer_impl.h>

namespace mvgpt::text {

namespace {

// llama.cpp's llama_token_type.
constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kByte = 6;
constexpr std::string_view kSpace = "\xe2\x96\x81";  // "▁", SentencePiece's space

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  for (size_t at = 0;;) {
    const size_t next = s.find(from, at);
    out.append(s.substr(at, next - at));
    if (next == std::string_view::npos) return out;
    out.append(to);
    at = next + from.size();
  }
}

}  // namespace

Tokenizer::GgufVocabulary Tokenizer::to_gguf_vocabulary() const {
  GgufVocabulary v;
  if (scored_) {
    v.model = "llama";
    for (TokenId id = 0; id < vocab_size(); ++id) {
      v.tokens.push_back(replace_all(scored_->pieces[id], " ", kSpace));
      v.scores.push_back(scored_->scores[id]);
      v.token_types.push_back(id == 0 ? kUnknown : id == kBos || id == kEos ? kControl : is_byte_token(id) ? kByte : kNormal);
    }
    v.unk = 0, v.bos = kBos, v.eos = kEos;
    v.add_bos = true, v.add_space_prefix = true;
    return v;
  }
  v.model = "gpt2";
  v.pre = "gpt-2";
  std::set<std::string> seen;
  for (TokenId id = 0; id < vocab_size(); ++id) {
    const std::string s = id == eot_id() ? std::string(kEndOfText) : detail::spelled(token_bytes(id));
    if (!seen.insert(s).second)
      throw std::invalid_argument("Tokenizer::to_gguf_vocabulary: two tokens are \"" + s + "\" (the second is " +
                                  std::to_string(id) + "); a GGUF vocabulary needs distinct tokens");
    v.tokens.push_back(s);
    v.token_types.push_back(id == eot_id() ? kControl : kNormal);
  }
  for (const auto& [a, b] : merges_) v.merges.push_back(detail::spelled(token_bytes(a)) + " " + detail::spelled(token_bytes(b)));
  v.bos = v.eos = v.eot = eot_id();
  return v;
}

Tokenizer Tokenizer::from_gguf_vocabulary(const GgufVocabulary& v, const std::string& source) {
  auto fail = [&](const std::string& what) {
    return std::runtime_error(source + ": the tokenizer (tokenizer.ggml.*) " + what +
                              "; mvgpt reads the vocabularies it writes: byte-level BPE as gpt2 with the gpt-2 "
                              "pre-tokenizer (bytes as ids 0-255, merges in id order, <|endoftext|> last), or "
                              "llama2.c's SentencePiece as llama");
  };
  if (v.model == "llama") {
    if (!v.scores.empty() && v.scores.size() != v.tokens.size())
      throw fail("has " + std::to_string(v.tokens.size()) + " tokens but " + std::to_string(v.scores.size()) + " scores");
    if ((v.bos >= 0 && v.bos != kBos) || (v.eos >= 0 && v.eos != kEos))
      throw fail("has BOS " + std::to_string(v.bos) + " and EOS " + std::to_string(v.eos) + " (expected 1 and 2)");
    std::vector<std::string> pieces;
    for (const std::string& t : v.tokens) pieces.push_back(replace_all(t, kSpace, " "));
    try {
      return from_pieces(std::move(pieces), v.scores.empty() ? std::vector<float>(v.tokens.size(), 0.0f) : v.scores);
    } catch (const std::invalid_argument& e) {
      throw fail(e.what());
    }
  }
  if (v.model != "gpt2") throw fail("is model \"" + v.model + "\"");
  if (v.pre != "gpt-2") throw fail("has pre-tokenizer \"" + v.pre + "\", not \"gpt-2\" (another pre-tokenizer splits text otherwise)");
  if (v.tokens.empty() || v.tokens.back() != kEndOfText) throw fail("does not end with <|endoftext|>");
  // The same vocabulary as Hugging Face's tokenizer.json holds: read by the same checks.
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t id = 0; id + 1 < v.tokens.size(); ++id) {
    if (vocab.contains(v.tokens[id])) throw fail("spells token " + std::to_string(id) + " \"" + v.tokens[id] + "\" twice");
    vocab[v.tokens[id]] = id;
  }
  nlohmann::json j = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", v.merges}}},
                      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
                      {"added_tokens", {{{"id", v.tokens.size() - 1}, {"content", kEndOfText}}}}};
  Tokenizer t = detail::tokenizer_from_hf_json(j.dump(), source);
  const int64_t eot = t.eot_id();
  if ((v.eos >= 0 && v.eos != eot) || (v.eot >= 0 && v.eot != eot))
    throw fail("ends documents with id " + std::to_string(v.eos >= 0 && v.eos != eot ? v.eos : v.eot) + ", not <|endoftext|> (" +
               std::to_string(eot) + ")");
  return t;
}

}  // namespace mvgpt::text
