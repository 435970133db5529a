// The apps' shared pieces, in process: the three ways past the window on a tiny random model,
// checkpoint names, the resumable CSV log, formatting.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "apps/common/app.h"
#include "apps/common/checkpoints.h"
#include "apps/common/context_methods.h"
#include "apps/common/csv_log.h"
#include <mvgpt/util/atomic_file.h>

namespace mvgpt::apps {
namespace {

namespace fs = std::filesystem;

gpt::GPTConfig tiny(bool rope, int64_t n_layer = 2) {
  gpt::GPTConfig c;
  c.vocab_size = 50;
  c.block_size = 8;
  c.n_layer = n_layer;
  c.n_head = 2;
  c.n_embd = 16;
  c.rope = rope;
  return c;
}

std::vector<int32_t> stream(size_t n) {
  std::vector<int32_t> s(n);
  for (size_t i = 0; i < n; ++i) s[i] = int32_t((i * 7 + i * i * 3 + 1) % 50);
  return s;
}

TEST(ContextMethods, OneLayerCacheAndFullAgreeWithTheWindowWhereTheySeeTheSameTokens) {
  Generator gen(3);
  gpt::GPT model(tiny(true, 1), &gen);
  model.eval();
  const auto s = stream(30);
  ContextResult window = context_losses(model, s, ContextMethod::window, Device::cpu());
  ContextResult cache = context_losses(model, s, ContextMethod::cache, Device::cpu());
  ContextResult full = context_losses(model, s, ContextMethod::full, Device::cpu());
  ASSERT_EQ(window.losses.size(), 22u);  // positions 8 .. 29
  ASSERT_EQ(cache.losses.size(), 22u);
  ASSERT_EQ(full.losses.size(), 22u);
  // The cache holds the same 8 tokens as each window; with RoPE only distances matter, and with one
  // layer the cached keys and values are exactly what the window computes again.
  for (size_t j = 0; j < window.losses.size(); ++j) EXPECT_NEAR(cache.losses[j], window.losses[j], 1e-5) << j;
  // The first token past the window: the full pass sees exactly the first window too.
  EXPECT_NEAR(full.losses[0], window.losses[0], 1e-5);
  // Further on it sees more than the window, so it predicts differently.
  double diff = 0;
  for (size_t j = 1; j < full.losses.size(); ++j) diff += std::abs(full.losses[j] - window.losses[j]);
  EXPECT_GT(diff, 1e-3);
  EXPECT_GT(window.seconds, 0);
  EXPECT_GT(cache.ms_per_token(), 0);
}

TEST(ContextMethods, DeeperCachesRememberTokensThatLeftTheWindow) {
  // From the second layer on, a cached key or value was computed when its token attended to tokens
  // that have since left the window; the window run again recomputes it without them. So the two
  // agree exactly only until the first slide, then closely but not exactly.
  Generator gen(3);
  gpt::GPT model(tiny(true, 2), &gen);
  model.eval();
  const auto s = stream(30);
  ContextResult window = context_losses(model, s, ContextMethod::window, Device::cpu());
  ContextResult cache = context_losses(model, s, ContextMethod::cache, Device::cpu());
  EXPECT_NEAR(cache.losses[0], window.losses[0], 1e-5);
  double max_diff = 0;
  for (size_t j = 1; j < window.losses.size(); ++j) max_diff = std::max(max_diff, std::abs(cache.losses[j] - window.losses[j]));
  EXPECT_GT(max_diff, 1e-5);
  EXPECT_LT(max_diff, 0.05);
}

TEST(ContextMethods, LearnedPositionsOnlyRunTheWindow) {
  Generator gen(4);
  gpt::GPT model(tiny(false), &gen);
  model.eval();
  const auto s = stream(12);
  EXPECT_TRUE(supports(model.config(), ContextMethod::window));
  EXPECT_FALSE(supports(model.config(), ContextMethod::cache));
  EXPECT_EQ(context_losses(model, s, ContextMethod::window, Device::cpu()).losses.size(), 4u);
  EXPECT_THROW(context_losses(model, s, ContextMethod::cache, Device::cpu()), std::invalid_argument);
  EXPECT_THROW(context_losses(model, s, ContextMethod::full, Device::cpu()), std::invalid_argument);
  EXPECT_THROW(context_losses(model, stream(8), ContextMethod::window, Device::cpu()), std::invalid_argument);
  EXPECT_THROW(parse_context_method("sliding"), std::invalid_argument);
  EXPECT_EQ(parse_context_method("full"), ContextMethod::full);
}

TEST(Checkpoints, NamesComeFromTheFolderGiven) {
  EXPECT_EQ(checkpoint_name("checkpoints/pretrain-rope"), "pretrain-rope");
  EXPECT_EQ(checkpoint_name("checkpoints/pretrain-rope/"), "pretrain-rope");
  EXPECT_EQ(checkpoint_name("checkpoints/pretrain/best"), "pretrain/best");
  EXPECT_EQ(checkpoint_name("./mine"), "mine");
}

TEST(CsvLog, AResumedRunDropsTheRowsAfterItsCheckpoint) {
  const fs::path path = fs::temp_directory_path() / ("mvgpt_csv_" + std::to_string(::getpid()) + ".csv");
  {
    CsvLog log(path.string(), {"step", "loss"});
    for (int s = 1; s <= 5; ++s) log.row({std::to_string(s), std::to_string(10 - s)});
  }
  {
    CsvLog log(path.string(), {"step", "loss"}, 3);
    log.row({"4", "x"});
  }
  EXPECT_EQ(util::read_file(path.string()), "step,loss\n1,9\n2,8\n3,7\n4,x\n");
  {
    CsvLog fresh(path.string(), {"step", "loss"});
  }
  EXPECT_EQ(util::read_file(path.string()), "step,loss\n");
  fs::remove(path);
}

// It looked for a header that had moved (mvgpt/model.h), so it never found the repository, and
// prepare's default stories folder was only found from the current folder.
TEST(Repository, TheRootIsFoundFromTheExecutable) {
  std::error_code ec;
  const fs::path source = fs::weakly_canonical(MVGPT_SOURCE_DIR, ec), binary = fs::weakly_canonical(MVGPT_BINARY_DIR, ec);
  const bool build_inside = std::mismatch(source.begin(), source.end(), binary.begin(), binary.end()).first == source.end();
  if (!build_inside) GTEST_SKIP() << "skipped: the build folder " << binary << " is outside the sources";
  EXPECT_EQ(fs::path(repository_root()), source);
  // From a folder with nothing above it, the stories are still found from the executable's repository.
  if (fs::is_directory(source / ".." / "shared" / "data" / "tinystories")) {
    const fs::path cwd = fs::current_path();
    fs::current_path(fs::temp_directory_path());
    ::unsetenv("MVGPT_DATA_DIR");
    std::string found;
    EXPECT_NO_THROW(found = find_stories_dir(""));
    fs::current_path(cwd);
    EXPECT_EQ(fs::path(found), fs::weakly_canonical(source / ".." / "shared" / "data" / "tinystories"));
  }
}

TEST(Format, DurationsAndCounts) {
  EXPECT_EQ(format_duration(9.4), "0:09");
  EXPECT_EQ(format_duration(247), "4:07");
  EXPECT_EQ(format_duration(3903), "1:05:03");
  // The ETA of a --minutes 1e300 run: clamped, not an int64 overflow.
  EXPECT_EQ(format_duration(1e300), format_duration(std::numeric_limits<double>::infinity()));
  EXPECT_EQ(format_duration(1e300).substr(0, 13), "277777777777:");
  EXPECT_EQ(format_duration(std::nan("")), "0:00");
  EXPECT_EQ(format_count(12345678), "12,345,678");
  EXPECT_EQ(format_count(999), "999");
  EXPECT_EQ(format_count(-1000), "-1,000");
  EXPECT_EQ(format("%d-%s", 3, "x"), "3-x");
}

TEST(Device, TextThatIsNotADeviceIsAUsageError) {
  EXPECT_THROW(resolve_device("tpu"), UsageError);
  EXPECT_EQ(resolve_device("cpu"), Device::cpu());
}

}  // namespace
}  // namespace mvgpt::apps
