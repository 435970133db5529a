// prepare: tokenizer + llm.c token files from a tiny stories folder; bad inputs change nothing.
#include "app_runner.h"

#include "apps/common/checkpoints.h"
#include <mvgpt/text/token_file.h>
#include <mvgpt/text/tokenizer.h>

namespace mvgpt::apps::testing {
namespace {

class Prepare : public AppsTest {};

TEST_F(Prepare, WritesTokenizerAndTokenFilesThatDecodeBackToTheStories) {
  const fs::path cwd = prepared();
  auto tok = text::Tokenizer::load((cwd / "data" / "tokenizer.json").string());
  EXPECT_LE(tok.vocab_size(), 300u);
  EXPECT_GT(tok.vocab_size(), 257u);
  for (const char* split : {"train", "valid"}) {
    text::TokenFile f((cwd / "data" / (std::string(split) + ".bin")).string());
    ASSERT_GT(f.size(), 0u);
    // The header is llm.c's.
    std::string bytes = slurp(cwd / "data" / (std::string(split) + ".bin"));
    int32_t header[3];
    std::memcpy(header, bytes.data(), sizeof header);
    EXPECT_EQ(header[0], 20240520);
    EXPECT_EQ(header[1], 1);
    EXPECT_EQ(size_t(header[2]), f.size());
    std::vector<text::TokenId> ids(f.tokens().begin(), f.tokens().end());
    EXPECT_EQ(tok.decode(ids), slurp(cwd / "stories" / (std::string(split) + ".txt")));
    // Story separators are the special token.
    EXPECT_NE(std::find(ids.begin(), ids.end(), tok.eot_id()), ids.end());
  }
}

TEST_F(Prepare, ReusesAGivenTokenizer) {
  const fs::path cwd = prepared();
  RunResult r = run_app("prepare", "--data-dir stories --tokenizer data/tokenizer.json --out data-again", cwd);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("MB/s"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(cwd / "data-again" / "train.bin"), slurp(cwd / "data" / "train.bin"));
  EXPECT_TRUE(same_tokenizer((cwd / "data-again" / "tokenizer.json").string(), (cwd / "data" / "tokenizer.json").string()));
}

TEST_F(Prepare, MissingInputsFailWithOneLineAndChangeNothing) {
  const fs::path cwd = prepared();
  auto before = snapshot(cwd / "data");
  expect_one_line_error(run_app("prepare", "--data-dir no-such-folder --out data", cwd), "prepare", "no such folder");
  fs::create_directories(cwd / "half");
  write_text(cwd / "half" / "train.txt", tiny_stories(3, 9));
  expect_one_line_error(run_app("prepare", "--data-dir half --out data", cwd), "prepare", "valid.txt: no such file");
  write_text(cwd / "half" / "valid.txt", "");
  expect_one_line_error(run_app("prepare", "--data-dir half --out data", cwd), "prepare", "empty");
  expect_one_line_error(run_app("prepare", "--data-dir stories --tokenizer nothing.json --out data", cwd), "prepare",
                        "nothing.json: no such file");
  write_text(cwd / "broken.json", "{\"type\": \"byte-bpe\", \"merges\": [[1, ");
  auto r = run_app("prepare", "--data-dir stories --tokenizer broken.json --out data", cwd);
  expect_one_line_error(r, "prepare", "broken.json");
  EXPECT_EQ(snapshot(cwd / "data"), before);
}

TEST_F(Prepare, BadFlagsAreUsageErrors) {
  const fs::path cwd = root();
  expect_one_line_error(run_app("prepare", "--vocab-size 100", cwd), "prepare", "--vocab-size", 2);
  expect_one_line_error(run_app("prepare", "--no-such-flag", cwd), "prepare", "no-such-flag", 2);
  RunResult help = run_app("prepare", "--help", cwd);
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("--vocab-size"), std::string::npos);
}

}  // namespace
}  // namespace mvgpt::apps::testing
