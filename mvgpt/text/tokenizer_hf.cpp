// The tokenizer as Hugging Face's tokenizer.json, both ways (NOTE [ Hugging Face tokenizer.json ]
// in tokenizer.h).
#include <array>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include <mvgpt/text/tokenizer.h>
#include <mvgpt/text/tokenizer_impl.h>
#include <mvgpt/util/json.h>

namespace mvgpt::text {

namespace {

const nlohmann::json kByteLevel = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                                   {"use_regex", true}};

}  // namespace

std::string Tokenizer::to_hf_json() const {
  if (scored_)
    throw std::invalid_argument(
        "Tokenizer::to_hf_json: a SentencePiece tokenizer (llama2.c's) has no Hugging Face form in mvgpt yet");
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (TokenId id = 0; id < vocab_size(); ++id) {
    const std::string s = id == eot_id() ? std::string(kEndOfText) : detail::spelled(token_bytes(id));
    if (vocab.contains(s))
      throw std::invalid_argument("Tokenizer::to_hf_json: tokens " + std::to_string(vocab[s].get<TokenId>()) + " and " +
                                  std::to_string(id) + " are both \"" + s +
                                  "\"; a Hugging Face BPE vocabulary needs distinct tokens");
    vocab[s] = id;
  }
  nlohmann::ordered_json merges = nlohmann::ordered_json::array();
  for (const auto& [a, b] : merges_) merges.push_back(detail::spelled(token_bytes(a)) + " " + detail::spelled(token_bytes(b)));
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = {{{"id", eot_id()}, {"content", kEndOfText}, {"single_word", false}, {"lstrip", false},
                        {"rstrip", false}, {"normalized", false}, {"special", true}}};
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = kByteLevel;
  j["post_processor"] = nullptr;
  j["decoder"] = kByteLevel;
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                {"ignore_merges", false}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}};
  return j.dump() + "\n";
}

namespace {

// The checks of NOTE [ Hugging Face tokenizer.json ]; `fail(what)` makes the error to throw.
template <typename Fail>
Tokenizer tokenizer_from_hf(const nlohmann::json& j, const Fail& fail) {
  const nlohmann::json& model = j["model"];
  if (!model.is_object() || model.value("type", "") != "BPE") throw fail("the model is not \"type\": \"BPE\"");
  if (!j.contains("pre_tokenizer") || !j["pre_tokenizer"].is_object() || j["pre_tokenizer"].value("type", "") != "ByteLevel" ||
      j["pre_tokenizer"].value("add_prefix_space", true) || !j["pre_tokenizer"].value("use_regex", true))
    throw fail("the pre-tokenizer is not ByteLevel with add_prefix_space false and use_regex true");
  if (j.contains("normalizer") && !j["normalizer"].is_null()) throw fail("it has a normalizer");
  if (!model.contains("vocab") || !model["vocab"].is_object()) throw fail("the model has no \"vocab\" object");
  if (!model.contains("merges") || !model["merges"].is_array()) throw fail("the model has no \"merges\" array");
  const nlohmann::json& vocab = model["vocab"];
  auto id_of = [&](const std::string& s) -> int64_t {
    const auto it = vocab.find(s);
    return it != vocab.end() && it->is_number_unsigned() ? int64_t(it->get<uint64_t>()) : -1;
  };
  for (int b = 0; b < 256; ++b)
    if (id_of(detail::byte_chars()[b]) != b)
      throw fail("byte " + std::to_string(b) + " (\"" + detail::byte_chars()[b] + "\") is not id " + std::to_string(b));

  const nlohmann::json& merges_json = model["merges"];
  std::vector<Merge> merges;
  std::vector<std::string> spelled_tokens(detail::byte_chars().begin(), detail::byte_chars().end());
  for (size_t i = 0; i < merges_json.size(); ++i) {
    const nlohmann::json& m = merges_json[i];
    std::string a, b;
    if (m.is_string()) {  // "a b"; tokenizers 0.20 and later may write ["a", "b"]
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) throw fail("merge " + std::to_string(i) + " is " + m.dump());
      a = s.substr(0, space), b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>(), b = m[1].get<std::string>();
    } else {
      throw fail("merge " + std::to_string(i) + " is " + m.dump());
    }
    const int64_t ia = id_of(a), ib = id_of(b), merged = id_of(a + b), expected = int64_t(kNumByteTokens + i);
    if (ia < 0 || ib < 0 || ia >= expected || ib >= expected || merged != expected)
      throw fail("merge " + std::to_string(i) + " (" + m.dump() + ") does not make id " + std::to_string(expected) +
                 " from ids defined before it");
    merges.emplace_back(TokenId(ia), TokenId(ib));
  }
  const int64_t eot = int64_t(kNumByteTokens + merges.size());
  const auto& added = j.contains("added_tokens") ? j["added_tokens"] : nlohmann::json::array();
  if (!added.is_array() || added.size() != 1 || !added[0].is_object() || added[0].value("content", "") != kEndOfText ||
      !added[0].contains("id") || added[0]["id"] != eot)
    throw fail("the added tokens are not <|endoftext|> alone, as id " + std::to_string(eot));
  const bool eot_in_vocab = vocab.contains(std::string(kEndOfText));
  if (eot_in_vocab && id_of(std::string(kEndOfText)) != eot)
    throw fail("<|endoftext|> is id " + vocab[std::string(kEndOfText)].dump() + " in the vocabulary, expected " + std::to_string(eot));
  if (vocab.size() != size_t(eot) + (eot_in_vocab ? 1 : 0))
    throw fail("the vocabulary has " + std::to_string(vocab.size()) + " entries; 256 bytes + " +
               std::to_string(merges.size()) + " merges make " + std::to_string(eot));
  try {
    return Tokenizer::from_merges(std::move(merges));
  } catch (const std::invalid_argument& e) {
    throw fail(e.what());
  }
}

}  // namespace

namespace detail {

Tokenizer tokenizer_from_hf_json(std::string_view json_text, const std::string& source) {
  auto fail = [&](const std::string& what) {
    return std::runtime_error("Tokenizer::load: " + source + ": " + what +
                              " (mvgpt reads the Hugging Face tokenizers it writes: byte-level BPE, bytes as ids "
                              "0-255, merges in id order, <|endoftext|> last)");
  };
  try {
    return tokenizer_from_hf(util::parse_json_strict(json_text), fail);
  } catch (const nlohmann::json::exception& e) {  // a field of an unexpected type
    throw fail(std::string("malformed: ") + e.what());
  }
}

}  // namespace detail
}  // namespace mvgpt::text
