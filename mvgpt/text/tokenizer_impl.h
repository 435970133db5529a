#pragma once
// INTERNAL: not part of the public API. The keys the tokenizer's files share: a merge's pair as one
// integer (the vocabulary's table, encoding and training look merges up by it) and string maps that
// find a chunk by its string_view (encoding's cache, training's counts).
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

#include <mvgpt/text/tokenizer.h>

namespace mvgpt::text::detail {

constexpr uint64_t pair_key(TokenId a, TokenId b) { return (uint64_t(a) << 32) | b; }

// Heterogeneous lookup: find a std::string key by std::string_view without allocating.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

}  // namespace mvgpt::text::detail
