#pragma once
// Reading tests/fixtures/llama2c/ (made by llama2.c itself: README.md there): its .jsonl files hold
// one JSON object a line, with byte strings (prompts, decoded text) in hex.
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace mvgpt::testing::llama2c {

inline const std::string kFixtures = std::string(MVGPT_SOURCE_DIR) + "/tests/fixtures/llama2c/";

inline std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(char(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// The objects of kFixtures + name, in order.
inline std::vector<nlohmann::json> read_jsonl(const std::string& name) {
  std::ifstream in(kFixtures + name);
  EXPECT_TRUE(in) << kFixtures + name;
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

}  // namespace mvgpt::testing::llama2c
