#include <mvgpt/text/token_file.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <vector>

#include "text/text_test_util.h"
#include <mvgpt/util/atomic_file.h>

namespace mvgpt::text {
namespace {

using testing_util::expect_throw_with;

class TokenFileTest : public testing_util::ScratchDir {
 protected:
  // A header with the given fields followed by `tokens`, written without write_token_file.
  std::string write_raw(std::string_view name, int32_t magic, int32_t version, int32_t count,
                         const std::vector<uint16_t>& tokens) const {
    std::array<int32_t, kTokenFileHeaderInts> header{};
    header[0] = magic;
    header[1] = version;
    header[2] = count;
    std::string bytes(reinterpret_cast<const char*>(header.data()), sizeof(header));
    bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(uint16_t));
    return write(name, bytes);
  }
};

TEST_F(TokenFileTest, RoundTrip) {
  const std::vector<uint32_t> tokens = {0, 1, 255, 256, 50256, 65535, 7, 7, 1234};
  const std::string p = path("a.bin");
  write_token_file(p, tokens);
  EXPECT_EQ(std::filesystem::file_size(p), kTokenFileHeaderBytes + tokens.size() * 2);

  const TokenFile file(p);
  ASSERT_EQ(file.size(), tokens.size());
  EXPECT_FALSE(file.empty());
  EXPECT_EQ(file.path(), p);
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(file[i], tokens[i]) << i;
    EXPECT_EQ(file.data()[i], tokens[i]) << i;
    EXPECT_EQ(file.tokens()[i], tokens[i]) << i;
  }
  EXPECT_EQ(file.max_token(), 65535);
  EXPECT_EQ(file.max_token(), 65535);  // cached
}

TEST_F(TokenFileTest, HeaderIsLlmcLayout) {
  const std::string p = path("h.bin");
  write_token_file(p, std::vector<uint32_t>{5, 6, 7});
  const std::string bytes = util::read_file(p);
  int32_t head[3];
  std::memcpy(head, bytes.data(), sizeof(head));
  EXPECT_EQ(head[0], 20240520);
  EXPECT_EQ(head[1], 1);
  EXPECT_EQ(head[2], 3);
  for (size_t i = 3; i < kTokenFileHeaderInts; ++i) {
    int32_t v;
    std::memcpy(&v, bytes.data() + i * 4, 4);
    EXPECT_EQ(v, 0) << i;
  }
  uint16_t second;
  std::memcpy(&second, bytes.data() + kTokenFileHeaderBytes + 2, 2);
  EXPECT_EQ(second, 6);
}

TEST_F(TokenFileTest, EmptyAndLargeStreams) {
  write_token_file(path("empty.bin"), std::vector<uint32_t>{});
  const TokenFile empty(path("empty.bin"));
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.max_token(), -1);

  // More than one write block (65536 tokens) and a max that is not at either end.
  std::vector<uint32_t> tokens(200003);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint32_t((i * 7919) % 40000);
  tokens[123457] = 41000;
  write_token_file(path("big.bin"), tokens);
  const TokenFile big(path("big.bin"));
  ASSERT_EQ(big.size(), tokens.size());
  EXPECT_EQ(big.max_token(), 41000);
  EXPECT_EQ(big[199999], tokens[199999]);
  EXPECT_EQ(big[123457], 41000);
}

TEST_F(TokenFileTest, MovesKeepTheMapping) {
  write_token_file(path("m.bin"), std::vector<uint32_t>{3, 9, 4});
  TokenFile a(path("m.bin"));
  EXPECT_EQ(a.max_token(), 9);
  TokenFile b(std::move(a));
  EXPECT_EQ(b.size(), 3u);
  EXPECT_EQ(b[1], 9);
  EXPECT_EQ(b.max_token(), 9);
  write_token_file(path("n.bin"), std::vector<uint32_t>{1});
  TokenFile c(path("n.bin"));
  c = std::move(b);
  EXPECT_EQ(c.size(), 3u);
  EXPECT_EQ(c[2], 4);
}

TEST_F(TokenFileTest, RejectsIdsAboveUint16AndLeavesNoFile) {
  const std::string p = path("bad.bin");
  expect_throw_with<std::invalid_argument>([&] { write_token_file(p, std::vector<uint32_t>{1, 65536}); },
                                           {"write_token_file", p, "65536", "token 1"});
  EXPECT_FALSE(std::filesystem::exists(p));
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) ADD_FAILURE() << "left behind: " << entry.path();

  // An existing good file survives a failed rewrite.
  write_token_file(p, std::vector<uint32_t>{42});
  EXPECT_THROW(write_token_file(p, std::vector<uint32_t>{70000}), std::invalid_argument);
  EXPECT_EQ(TokenFile(p)[0], 42);
}

TEST_F(TokenFileTest, RejectsFilesShorterThanTheHeader) {
  const std::string p = write("short.bin", std::string(100, '\0'));
  expect_throw_with<std::runtime_error>([&] { TokenFile f(p); }, {p, "100 bytes", "shorter than the 1024-byte header"});
  const std::string empty = write("zero.bin", "");
  expect_throw_with<std::runtime_error>([&] { TokenFile f(empty); }, {empty, "shorter"});
}

TEST_F(TokenFileTest, RejectsWrongMagic) {
  const std::string p = write_raw("magic.bin", 20240521, 1, 2, {1, 2});
  expect_throw_with<std::runtime_error>([&] { TokenFile f(p); }, {p, "not an llm.c token file", "20240521"});
}

TEST_F(TokenFileTest, RejectsOtherVersions) {
  // Version 2 is llm.c's uint32 (Llama 3) layout, which this reader does not handle.
  const std::string p = write_raw("v2.bin", kTokenFileMagic, 2, 2, {1, 2, 3, 4});
  expect_throw_with<std::runtime_error>([&] { TokenFile f(p); }, {p, "version 2"});
}

TEST_F(TokenFileTest, RejectsCountDisagreeingWithSize) {
  const std::string truncated = write_raw("trunc.bin", kTokenFileMagic, 1, 10, {1, 2, 3, 4, 5});
  expect_throw_with<std::runtime_error>([&] { TokenFile f(truncated); }, {truncated, "10 tokens", "truncated"});
  const std::string trailing = write_raw("trail.bin", kTokenFileMagic, 1, 2, {1, 2, 3});
  expect_throw_with<std::runtime_error>([&] { TokenFile f(trailing); }, {trailing, "trailing"});
  const std::string negative = write_raw("neg.bin", kTokenFileMagic, 1, -1, {});
  expect_throw_with<std::runtime_error>([&] { TokenFile f(negative); }, {negative, "negative"});
}

TEST_F(TokenFileTest, RejectsMissingFile) {
  const std::string p = path("nope.bin");
  expect_throw_with<std::runtime_error>([&] { TokenFile f(p); }, {p, "cannot open"});
}

}  // namespace
}  // namespace mvgpt::text
