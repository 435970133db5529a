// The apps' command lines, parsed in process (apps/flags/<app>.h): what each flag sets, the defaults
// filled in, the combinations refused, the numbers CLI11 would let through (NaN); and the replay of
// fuzz_cli's corpus (tests/fixtures/fuzz/cli/: seeds, a sample of the corpus, every crasher found).
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "app_runner.h"
#include "apps/common/app.h"
#include "apps/flags/context.h"
#include "apps/flags/evaluate.h"
#include "apps/flags/export.h"
#include "apps/flags/generate.h"
#include "apps/flags/import.h"
#include "apps/flags/merge.h"
#include "apps/flags/prepare.h"
#include "apps/flags/pretrain.h"
#include "fuzz/cli_input.h"

namespace mvgpt::apps::testing {
namespace {

// argv from words, the program's name first.
template <typename Args>
Args parse(Args (*parse_args)(int, const char* const*), const std::vector<std::string>& words) {
  std::vector<const char*> argv{"app"};
  for (const auto& w : words) argv.push_back(w.c_str());
  return parse_args(int(argv.size()), argv.data());
}

// The message of the exception `words` end in ("" when they parse).
template <typename Args>
std::string rejection(Args (*parse_args)(int, const char* const*), const std::vector<std::string>& words) {
  try {
    parse(parse_args, words);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Cli, PretrainFillsTheScheduleOfANewRunFromItsFlags) {
  const PretrainArgs a = parse(parse_pretrain_args, {"--preset", "series", "--steps", "40", "--eval-windows", "1"});
  EXPECT_EQ(a.steps, 40);
  EXPECT_EQ(a.settings.eval_windows, 1);
  EXPECT_EQ(a.settings.schedule_steps, 40);                  // --steps, when no --schedule-steps
  EXPECT_EQ(a.settings.warmup_steps, 10);                    // max(40 / 20, min(10, 40 / 4))
  EXPECT_DOUBLE_EQ(a.settings.min_lr, a.settings.lr / 10);  // lr / 10
  EXPECT_EQ(a.out_dir, "checkpoints/pretrain");
  EXPECT_TRUE(a.given.has("--steps"));
  EXPECT_FALSE(a.given.has("--lr"));

  const PretrainArgs d = parse(parse_pretrain_args, {"--rope", "--warmup-steps", "0"});
  EXPECT_EQ(d.settings.schedule_steps, kDefaultScheduleSteps);
  EXPECT_EQ(d.settings.warmup_steps, 0);
  EXPECT_EQ(d.out_dir, "checkpoints/pretrain-rope");
}

TEST(Cli, TheSpeedrunRecipeSetsWhatItsFlagsDidNotSay) {
  const PretrainArgs series = parse(parse_pretrain_args, {"--rope"});
  EXPECT_EQ(series.settings.optimizer, "adamw");
  EXPECT_EQ(series.settings.schedule, "cosine");
  EXPECT_EQ(series.settings.batch_size, 16);
  const PretrainArgs fast = parse(parse_pretrain_args, {"--rope", "--recipe", "speedrun"});
  EXPECT_EQ(fast.settings.optimizer, "muon");
  EXPECT_EQ(fast.settings.schedule, "wsd");
  EXPECT_EQ(fast.settings.batch_size, 8);
  EXPECT_EQ(fast.settings.embedding_lr, 3e-3);
  EXPECT_EQ(fast.settings.muon_coefficients, "polar_express");
  EXPECT_EQ(fast.settings.muon_ns_steps, 3);
  EXPECT_EQ(fast.qk_norm, 1);
  EXPECT_EQ(series.qk_norm, 0);
  EXPECT_EQ(series.settings.embedding_lr, 0);
  const PretrainArgs mixed = parse(parse_pretrain_args, {"--recipe", "speedrun", "--batch-size", "4", "--schedule", "cosine",
                                                         "--no-qk-norm", "--muon-ns-steps", "5"});
  EXPECT_EQ(mixed.settings.optimizer, "muon");
  EXPECT_EQ(mixed.settings.schedule, "cosine");
  EXPECT_EQ(mixed.settings.batch_size, 4);
  EXPECT_EQ(mixed.settings.muon_ns_steps, 5);
  EXPECT_EQ(mixed.qk_norm, -1);
  EXPECT_EQ(parse(parse_pretrain_args, {"--qk-norm"}).qk_norm, 1);
  EXPECT_EQ(parse(parse_pretrain_args, {"--no-qk-norm", "--qk-norm"}).qk_norm, 1);  // the last wins
  EXPECT_EQ(parse(parse_pretrain_args, {"--recipe", "speedrun", "--qk-norm", "--no-qk-norm"}).qk_norm, -1);
  EXPECT_NE(rejection(parse_pretrain_args, {"--qk-norm", "--init-from", "x"}), "");
  EXPECT_NE(rejection(parse_pretrain_args, {"--resume", "--recipe", "speedrun"}).find("a resumed run keeps its own"),
            std::string::npos);
  EXPECT_NE(rejection(parse_pretrain_args, {"--recipe", "fast"}), "");
}

TEST(Cli, AResumedRunKeepsItsFlagsAsGivenForTheRunToCompare) {
  const PretrainArgs a = parse(parse_pretrain_args, {"--resume", "--lr", "0.5", "--steps", "9"});
  EXPECT_TRUE(a.resume);
  EXPECT_DOUBLE_EQ(a.settings.lr, 0.5);
  EXPECT_EQ(a.settings.schedule_steps, 0);  // the run's own, from state.json
  EXPECT_EQ(a.settings.min_lr, -1);
  EXPECT_TRUE(a.given.has("--lr"));
}

TEST(Cli, CombinationsThatCannotRunAreRefused) {
  EXPECT_NE(rejection(parse_pretrain_args, {"--steps", "5", "--warmup-steps", "10"})
                .find("--warmup-steps 10 is longer than the schedule (5 steps)"),
            std::string::npos);
  EXPECT_THROW(parse(parse_pretrain_args, {"--resume", "--overwrite"}), CLI::ExcludesError);
  EXPECT_THROW(parse(parse_pretrain_args, {"--steps", "5", "--minutes", "3"}), CLI::ExcludesError);
  EXPECT_THROW(parse(parse_pretrain_args, {"--preset", "series", "--config", "c.json"}), CLI::ExcludesError);
  EXPECT_THROW(parse(parse_pretrain_args, {"--preset", "huge"}), CLI::ValidationError);
  EXPECT_THROW(parse(parse_evaluate_args, {"--tokens", "data/valid.bin"}), CLI::RequiredError);
  EXPECT_THROW(parse(parse_context_args, {"--ckpt", "x", "--methods", "window,fast"}), CLI::ValidationError);
  EXPECT_THROW(parse(parse_prepare_args, {"--vocab-size", "100"}), CLI::ValidationError);
}

TEST(Cli, DeviceFlagsAreCheckedForTheirSpellingOnly) {
  for (auto parse_device : {+[](const std::string& d) { parse(parse_pretrain_args, {"--device", d}); },
                            +[](const std::string& d) { parse(parse_evaluate_args, {"--ckpt", "x", "--device", d}); },
                            +[](const std::string& d) { parse(parse_context_args, {"--ckpt", "x", "--device", d}); },
                            +[](const std::string& d) { parse(parse_generate_args, {"--ckpt", "x", "--device", d}); }}) {
    for (const char* ok : {"auto", "cpu", "cuda", "cuda:3"}) EXPECT_NO_THROW(parse_device(ok)) << ok;
    try {
      parse_device("tpu");
      ADD_FAILURE() << "--device tpu parsed";
    } catch (const UsageError& e) {
      EXPECT_STREQ(e.what(), "--device tpu: expected cpu, cuda, cuda:N or auto");
    }
  }
}

// CLI11's PositiveNumber and NonNegativeNumber compare, and NaN compares false with everything.
TEST(Cli, NonFiniteNumbersAreRefusedWhereCli11WouldLetThemThrough) {
  for (const std::string flag : {"--lr", "--min-lr", "--weight-decay", "--grad-clip", "--minutes"})
    for (const std::string value : {"nan", "NAN", "nan(1)"})
      EXPECT_EQ(rejection(parse_pretrain_args, {flag, value}), flag + ": " + value + " is not a finite number");
  EXPECT_EQ(rejection(parse_generate_args, {"--ckpt", "x", "--temperature", "nan"}),
            "--temperature: nan is not a finite number");
  EXPECT_EQ(rejection(parse_prepare_args, {"--tokenizer-mb", "nan"}), "--tokenizer-mb: nan is not a finite number");
  // Infinities were refused already (above the range's maximum).
  EXPECT_NE(rejection(parse_pretrain_args, {"--lr", "inf"}), "");
  EXPECT_NE(rejection(parse_generate_args, {"--ckpt", "x", "--temperature", "inf"}), "");
}

TEST(Cli, DerivedSizesNeverOverflow) {
  // A tokenizer sample of 1e300 MB is the whole file (a cast to size_t would be undefined).
  EXPECT_EQ(parse(parse_prepare_args, {"--tokenizer-mb", "1e300"}).tokenizer_bytes, 0u);
  EXPECT_EQ(parse(parse_prepare_args, {"--tokenizer-mb", "0.5"}).tokenizer_bytes, 500000u);
  EXPECT_EQ(parse(parse_prepare_args, {}).tokenizer_bytes, 0u);
  // Streams x length past int64: the run's "too few tokens" check must still refuse it.
  EXPECT_EQ(parse(parse_context_args, {"--ckpt", "x", "--length", "9223372036854775807", "--streams", "2"}).tokens_needed,
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(parse(parse_context_args, {"--ckpt", "x", "--length", "40", "--streams", "3"}).tokens_needed, 120);
}

TEST(Cli, HelpIsAnAnswerNotAnExit) {
  EXPECT_THROW(parse(parse_prepare_args, {"--help"}), CLI::CallForHelp);
  EXPECT_THROW(parse(parse_pretrain_args, {"-h"}), CLI::CallForHelp);
  EXPECT_THROW(parse(parse_generate_args, {"--help"}), CLI::CallForHelp);  // before --ckpt is required
}

// The same refusals as the app prints them: one line, exit 2, nothing written.
class CliApps : public AppsTest {};

TEST_F(CliApps, NonFiniteFlagValuesAreUsageErrors) {
  const fs::path cwd = root() / "cli";
  fs::create_directories(cwd);
  expect_one_line_error(run_app("pretrain", "--lr nan --steps 2", cwd), "pretrain", "--lr: nan is not a finite number", 2);
  expect_one_line_error(run_app("generate", "--ckpt x --temperature nan", cwd), "generate",
                        "--temperature: nan is not a finite number", 2);
  expect_one_line_error(run_app("pretrain", "--resume --preset series", cwd), "pretrain", "run prepare first");
  EXPECT_TRUE(fs::is_empty(cwd));
}

TEST_F(CliApps, ContextRefusesMoreStreamsThanTheFileHolds) {
  trained(true);
  const fs::path cwd = prepared();
  expect_one_line_error(run_app("context", "--ckpt checkpoints/tiny-rope --length 40 --streams 100000 --device cpu", cwd),
                        "context", "fewer than 100000 streams of 40 (4,000,000); lower --streams or --length");
  // streams x length past int64 saturates: refused the same way, not wrapped around to a small count.
  expect_one_line_error(run_app("context", "--ckpt checkpoints/tiny-rope --length 9223372036854775807 --streams 2 --device cpu", cwd),
                        "context", "fewer than 2 streams of 9223372036854775807 (9,223,372,036,854,775,807)");
}

TEST(FuzzRegression, CommandLines) {
  const fs::path dir = fs::path(MVGPT_SOURCE_DIR) / "tests" / "fixtures" / "fuzz" / "cli";
  int parsed = 0, rejected = 0, help = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    SCOPED_TRACE(e.path().string());
    fuzz::CliOutcome outcome{};
    EXPECT_EQ(fuzz::check_command_line(fuzz::split_command_line(slurp(e.path())), outcome), "");
    parsed += outcome == fuzz::CliOutcome::parsed;
    rejected += outcome == fuzz::CliOutcome::rejected;
    help += outcome == fuzz::CliOutcome::help;
  }
  EXPECT_GT(parsed, 10);  // the seeds: realistic command lines of every app
  EXPECT_GT(help, 0);
  std::printf("[ info     ] %d command lines parsed, %d rejected, %d asked for help\n", parsed, rejected, help);
}

}  // namespace
}  // namespace mvgpt::apps::testing

namespace mvgpt::apps::testing {
namespace {

TEST_F(CliApps, EveryAppHasVersionAndExamplesInItsHelp) {
  const fs::path cwd = root() / "cli-version";
  fs::create_directories(cwd);
  for (const char* app : {"prepare", "pretrain", "evaluate", "context", "generate", "merge", "export", "import"}) {
    SCOPED_TRACE(app);
    RunResult v = run_app(app, "--version", cwd);
    EXPECT_EQ(v.code, 0) << v.err;
    EXPECT_EQ(v.out.rfind("mvgpt ", 0), 0u) << v.out;
    RunResult h = run_app(app, "--help", cwd);
    EXPECT_EQ(h.code, 0) << h.err;
    EXPECT_NE(h.out.find("Examples:\n  " + std::string(app)), std::string::npos) << h.out;
  }
}

}  // namespace
}  // namespace mvgpt::apps::testing
