#pragma once
// Parsing JSON files we read back (configs, tokenizers, headers, manifests) strictly: nlohmann keeps
// the last of two equal keys silently, and its "number overflow" error names neither the key nor the
// file. parse_json_strict refuses the first and names the key in both; callers add the file's name.
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

namespace mvgpt::util {

// What is wrong with the text, without the file's name (the caller knows it).
class JsonError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class Json = nlohmann::json>
Json parse_json_strict(std::string_view text) {
  // Keys seen in each open object, and the last key read (the one whose value is being parsed).
  std::vector<std::unordered_set<std::string>> keys;
  std::string last_key, duplicate;
  auto on_event = [&](int /*depth*/, typename Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (event == Json::parse_event_t::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (event == Json::parse_event_t::key) {
      last_key = parsed.template get<std::string>();
      if (!keys.empty() && !keys.back().insert(last_key).second && duplicate.empty()) duplicate = last_key;
    }
    return true;
  };
  Json j;
  try {
    j = Json::parse(text.begin(), text.end(), on_event);
  } catch (const typename Json::out_of_range& e) {  // 406: a number past double's range, e.g. 1e400
    const std::string where = last_key.empty() ? std::string() : "field \"" + last_key + "\": ";
    throw JsonError(where + "number out of range (" + e.what() + ")");
  } catch (const typename Json::exception& e) {
    throw JsonError(std::string("not valid JSON (") + e.what() + ")");
  }
  if (!duplicate.empty()) throw JsonError("duplicate field \"" + duplicate + "\" (a key given twice in one object)");
  return j;
}

}  // namespace mvgpt::util
