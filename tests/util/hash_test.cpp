// XXH64 against the reference implementation's values, fed whole and in pieces; strict JSON parsing.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <mvgpt/util/hash.h>
#include <mvgpt/util/json.h>

namespace mvgpt::util {
namespace {

// Values of the reference xxHash 0.8 (XXH64, checked against libxxhash for lengths 0..299).
TEST(Xxh64, MatchesTheReference) {
  EXPECT_EQ(xxh64("", 0), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(xxh64("abc", 3), 0x44BC2CF5AD770999ull);
  const std::string fox = "Nobody inspects the spammish repetition";
  EXPECT_EQ(xxh64(fox.data(), fox.size()), 0xFBCEA83C8A378BF1ull);
}

TEST(Xxh64, PiecesGiveTheSameDigestAsTheWhole) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data += char(i * 7 + i / 13);
  for (size_t piece : {1, 3, 7, 31, 32, 33, 100}) {
    Xxh64 h(42);
    for (size_t i = 0; i < data.size(); i += piece) h.update(data.data() + i, std::min(piece, data.size() - i));
    EXPECT_EQ(h.digest(), xxh64(data.data(), data.size(), 42)) << piece;
  }
}

TEST(Xxh64, DigestsFilesAndHex) {
  auto path = std::filesystem::temp_directory_path() / ("mvgpt_hash_" + std::to_string(::getpid()));
  std::ofstream(path, std::ios::binary) << "abc";
  FileDigest d = digest_file(path.string());
  EXPECT_EQ(d.bytes, 3u);
  EXPECT_EQ(d.xxh64, 0x44BC2CF5AD770999ull);
  std::filesystem::remove(path);
  EXPECT_THROW(digest_file(path.string()), std::runtime_error);
  EXPECT_EQ(to_hex(0x44BC2CF5AD770999ull), "44bc2cf5ad770999");
  uint64_t v = 0;
  EXPECT_TRUE(from_hex("44bc2cf5ad770999", v));
  EXPECT_EQ(v, 0x44BC2CF5AD770999ull);
  EXPECT_FALSE(from_hex("44BC2CF5AD770999", v));
  EXPECT_FALSE(from_hex("44bc2cf5ad77099", v));
}

std::string error_of(std::string_view text) {
  try {
    parse_json_strict(text);
  } catch (const JsonError& e) {
    return e.what();
  }
  return "";
}

TEST(ParseJsonStrict, RefusesKeysGivenTwiceAndNamesNumbersOutOfRange) {
  EXPECT_EQ(parse_json_strict(R"({"a": {"b": 1}, "b": [1e300]})")["b"][0].get<double>(), 1e300);
  EXPECT_EQ(parse_json_strict(R"([{"a": 1}, {"a": 2}])").size(), 2u);  // equal keys in different objects
  EXPECT_EQ(error_of(R"({"a": 1, "a": 2})"), "duplicate field \"a\" (a key given twice in one object)");
  EXPECT_NE(error_of(R"({"x": {"a": 1, "b": 2, "a": 3}})").find("duplicate field \"a\""), std::string::npos);
  EXPECT_NE(error_of(R"({"eps": 1e-5, "base": 1e400})").find("field \"base\": number out of range"), std::string::npos);
  EXPECT_NE(error_of(R"({"a": )").find("not valid JSON"), std::string::npos);
}

}  // namespace
}  // namespace mvgpt::util
