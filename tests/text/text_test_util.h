#pragma once
// A scratch folder per test, removed afterwards, and small file helpers.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

namespace mvgpt::text::testing_util {

class ScratchDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("mvgpt_text_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string path(std::string_view name) const { return (dir_ / name).string(); }

  std::string write(std::string_view name, std::string_view bytes) const {
    const std::string p = path(name);
    std::ofstream out(p, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    return p;
  }

  std::filesystem::path dir_;
};

// A short text with words, punctuation, a contraction, digits and a blank line, for the tokenizers'
// export tests (a vocabulary of 300 learns a few dozen merges from it).
inline constexpr const char* kSampleText =
    "The cat sat on the mat. The dog sat on the log. Don't stop, it's 2026!\n\nThe end.";

// EXPECT that `fn` throws E with every one of `parts` in its message.
template <typename E, typename Fn>
void expect_throw_with(Fn&& fn, std::initializer_list<std::string_view> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    const std::string what = e.what();
    for (std::string_view part : parts) {
      EXPECT_NE(what.find(part), std::string::npos) << "message \"" << what << "\" lacks \"" << part << "\"";
    }
  }
}

}  // namespace mvgpt::text::testing_util
