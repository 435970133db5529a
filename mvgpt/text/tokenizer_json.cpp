// The tokenizer's file: to and from JSON, every field of a loaded file validated.
#include <mvgpt/text/tokenizer.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include <mvgpt/text/token_file.h>
#include <mvgpt/text/tokenizer_impl.h>
#include <mvgpt/util/atomic_file.h>
#include <mvgpt/util/json.h>

namespace mvgpt::text {

std::string Tokenizer::to_json() const {
  nlohmann::ordered_json j;
  if (scored_) {
    j["type"] = "sentencepiece-bpe";
    j["version"] = 1;
    j["pieces"] = scored_->pieces;
    j["scores"] = scored_->scores;  // floats: written in their shortest form, read back exactly
    j["unk_id"] = 0, j["bos_id"] = kBos, j["eos_id"] = kEos;
    j["byte_fallback"] = true, j["add_dummy_prefix"] = true;
    return j.dump() + "\n";
  }
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
  // llama2.c's tokenizer.bin starts with a small int32 (its longest piece); a JSON text's first four
  // characters, read as one, are at least 0x09000000.
  // A file that starts with a byte no text starts with (a control character, a byte of no UTF-8
  // character start other than a BOM's) is binary too: tokenizer.bin with a bad header, whose error
  // names the header rather than "not valid JSON".
  int32_t max_token_length = 0;
  if (text.size() >= 4) std::memcpy(&max_token_length, text.data(), 4);
  if (max_token_length > 0 && uint64_t(max_token_length) <= kMaxTokenBytes) return from_llama2c_bin(text, path);
  if (max_token_length == kTokenFileMagic)  // the file prepare writes beside it, handed over by mistake
    throw std::runtime_error("Tokenizer::load: " + path + " is an llm.c token file (train.bin, valid.bin), not a tokenizer; "
                             "pass the tokenizer.json beside it");
  const auto first = text.empty() ? 0u : unsigned(static_cast<unsigned char>(text[0]));
  const bool text_start = first == '\t' || first == '\n' || first == '\r' || (first >= 0x20 && first < 0x7f) || first == 0xef;
  if (text.size() >= 4 && !text_start) return from_llama2c_bin(text, path);
  return from_json(text, path);
}

namespace {

template <typename Fail>
Tokenizer sentencepiece_from_json(const nlohmann::json& j, const Fail& fail) {
  using Json = nlohmann::json;
  // run.c's fixed rules, spelled out so that a file says what it needs.
  const std::pair<const char*, Json> fixed[] = {{"version", 1},         {"unk_id", 0},           {"bos_id", 1},
                                                {"eos_id", 2},          {"byte_fallback", true}, {"add_dummy_prefix", true}};
  for (const auto& item : j.items()) {
    // Named references, not a structured binding: clang before 16 cannot capture bindings in lambdas.
    const std::string& key = item.key();
    const Json& value = item.value();
    if (key == "type" || key == "pieces" || key == "scores") continue;
    const auto it = std::find_if(std::begin(fixed), std::end(fixed), [&](const auto& f) { return key == f.first; });
    if (it == std::end(fixed)) throw fail("unexpected field \"" + key + "\"");
    if (value != it->second)
      throw fail("\"" + key + "\" is " + value.dump() + "; mvgpt runs llama2.c's rule, " + it->second.dump());
  }
  for (const char* key : {"pieces", "scores"})
    if (!j.contains(key) || !j[key].is_array()) throw fail(std::string("\"") + key + "\" must be an array");
  std::vector<std::string> pieces;
  std::vector<float> scores;
  for (const Json& p : j["pieces"]) {
    if (!p.is_string()) throw fail("piece " + std::to_string(pieces.size()) + " is " + p.dump() + ", expected a string");
    pieces.push_back(p.get<std::string>());
  }
  for (const Json& v : j["scores"]) {
    if (!v.is_number()) throw fail("score " + std::to_string(scores.size()) + " is " + v.dump() + ", expected a number");
    scores.push_back(v.get<float>());
  }
  try {
    return Tokenizer::from_pieces(std::move(pieces), std::move(scores));
  } catch (const std::invalid_argument& e) {
    throw fail(e.what());
  }
}

}  // namespace

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
  if (j.contains("model")) return detail::tokenizer_from_hf_json(json, source);
  if (j.contains("type") && j["type"] == "sentencepiece-bpe") return sentencepiece_from_json(j, fail);

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
