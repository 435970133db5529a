// The flags and numbers users of nanoGPT and Hugging Face expect (issue 19): several samples, nucleus
// sampling and prompts from a file or standard input in generate; progress lines in context.
#include <cstdlib>

#include "app_runner.h"

namespace mvgpt::apps::testing {
namespace {

class DailyUse : public AppsTest {};

int occurrences(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t i = text.find(needle); i != std::string::npos; i = text.find(needle, i + 1)) ++n;
  return n;
}

TEST_F(DailyUse, GenerateWritesSeveralSamplesFromAPromptFileOrStandardInput) {
  trained(true);
  const fs::path cwd = prepared();
  const std::string base = "--ckpt checkpoints/tiny-rope --device cpu --max-new-tokens 12 --top-p 0.9 ";
  RunResult three = run_app("generate", base + "--prompt 'Once upon' --num-samples 3", cwd);
  ASSERT_EQ(three.code, 0) << three.err;
  EXPECT_EQ(occurrences(three.out, "---------------\n"), 2) << three.out;
  EXPECT_EQ(occurrences(three.out, "Once upon"), 3) << three.out;
  // Each sample has its own draws: the first is the one a single sample with the same seed writes.
  RunResult one = run_app("generate", base + "--prompt 'Once upon'", cwd);
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_EQ(three.out.substr(0, three.out.find("---------------")), one.out);
  EXPECT_NE(three.out.substr(0, three.out.find("---------------")),
            three.out.substr(three.out.find("---------------") + 16, one.out.size()));
  // The prompt from a file and from standard input: the same story as --prompt (a final newline is
  // not part of the prompt).
  write_text(cwd / "prompt.txt", "Once upon\n");
  RunResult file = run_app("generate", base + "--prompt-file prompt.txt", cwd);
  ASSERT_EQ(file.code, 0) << file.err;
  EXPECT_EQ(file.out, one.out);
  RunResult piped = run_command("echo 'Once upon' | '" + app_path("generate") + "' " + base + "--prompt-file -", cwd);
  ASSERT_EQ(piped.code, 0) << piped.err;
  EXPECT_EQ(piped.out, one.out);
  expect_one_line_error(run_app("generate", base + "--prompt-file missing.txt", cwd), "generate", "missing.txt");
  expect_one_line_error(run_app("generate", base + "--prompt x --prompt-file prompt.txt", cwd), "generate", "excludes", 2);
  expect_one_line_error(run_app("generate", base + "--top-p 0", cwd), "generate", "--top-p", 2);
}

TEST_F(DailyUse, ContextSaysWhereItIsOnStandardError) {
  trained(true);
  RunResult r = run_app("context", "--ckpt checkpoints/tiny-rope --device cpu --length 40 --streams 3 --no-plot --out-dir ctx",
                        prepared());
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* method : {"window", "cache", "full"})
    EXPECT_NE(r.err.find(std::string("tiny-rope ") + method + ": stream 3/3, ETA"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("stream 1/3"), std::string::npos) << "progress stays off the table: " << r.out;
}

// The per-method summary beside the per-position losses, and both pictures when gnuplot is there.
TEST_F(DailyUse, ContextWritesASummaryOfTheMethodsAndTwoPictures) {
  trained(false);
  trained(true);
  RunResult r = run_app("context", "--ckpt checkpoints/tiny --ckpt checkpoints/tiny-rope --device cpu --length 40 --streams 2 "
                        "--out-dir ctx-plots", prepared());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(slurp(prepared() / "ctx-plots" / "context_methods.csv").substr(0, 50).find("model,method,loss,ms_per_token\ntiny,window,"), 0u);
  int rows = 0;
  for (char c : slurp(prepared() / "ctx-plots" / "context_methods.csv")) rows += c == '\n';
  EXPECT_EQ(rows, 1 + 4);  // header, tiny window, tiny-rope window, cache, full
  if (std::system("command -v gnuplot > /dev/null 2>&1") == 0) {
    for (const char* png : {"context_losses.png", "context_methods.png"}) {
      const std::string bytes = slurp(prepared() / "ctx-plots" / png);
      EXPECT_EQ(bytes.substr(0, 4), "\x89PNG") << png << ": " << r.out;
    }
  }
}

}  // namespace
}  // namespace mvgpt::apps::testing
