// Reliability of pretrain: a NaN in a gradient is caught at its step (named, nothing overwritten, or
// skipped by flag); a run killed with SIGKILL at random moments, during checkpoint writes too, always
// leaves a last/ that loads and resumes, and the resumed run ends bit for bit where an uninterrupted
// run does.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <numeric>
#include <sstream>
#include <random>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "app_runner.h"
#include <mvgpt/gpt/checkpoint.h>

namespace mvgpt::apps::testing {
namespace {

class Reliability : public AppsTest {};

const char* kTiny = "--config tiny.json --batch-size 4 --eval-windows 4 --device cpu ";

int64_t state_step(const fs::path& last) {
  return nlohmann::json::parse(slurp(last / "state.json")).at("step").get<int64_t>();
}

// Every weight of the checkpoint in `dir` is finite (it loads, too).
bool all_weights_finite(const fs::path& dir) {
  auto ck = gpt::load_checkpoint(dir.string());
  for (const auto& [name, p] : ck.model->named_parameters())
    for (double v : p.to_vector<double>())
      if (!std::isfinite(v)) return false;
  return true;
}

// The text after `prefix` up to the next space or newline.
std::string word_after(const std::string& text, const std::string& prefix) {
  size_t i = text.find(prefix);
  if (i == std::string::npos) return "";
  i += prefix.size();
  return text.substr(i, text.find_first_of(" \n", i) - i);
}

TEST_F(Reliability, NanGradientStopsTheRunAtItsStepAndKeepsTheLastCheckpoint) {
  const fs::path cwd = prepared();
  write_text(cwd / "tiny.json", tiny_config(false));
  for (const char* clip : {"1.0", "0"}) {  // the clipped norm finds it, and so does the scan without clipping
    SCOPED_TRACE(std::string("--grad-clip ") + clip);
    fs::remove_all(cwd / "nan" / "run");
    fs::remove_all(cwd / "nan-ref" / "run");
    // The reference: the same run stopped cleanly after step 3 (the schedule does not depend on --steps).
    RunResult ref = run_app("pretrain", std::string(kTiny) + "--steps 3 --schedule-steps 8 --eval-interval 3 --grad-clip " +
                            clip + " --out nan-ref/run", cwd);
    ASSERT_EQ(ref.code, 0) << ref.out << ref.err;
    RunResult r = run_app("pretrain", std::string(kTiny) + "--steps 8 --schedule-steps 8 --eval-interval 3 --grad-clip " +
                          clip + " --out nan/run --debug-inject-nan-at-step 4", cwd);
    const std::string poisoned = word_after(r.out, "wrote NaN into the gradient of ");
    ASSERT_FALSE(poisoned.empty()) << r.out;
    expect_one_line_error(r, "pretrain", "step 4: the gradient of " + poisoned + " is not finite");
    EXPECT_NE(r.err.find("last/ holds step 3"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--skip-nonfinite"), std::string::npos) << r.err;
    // last/ is step 3's checkpoint, byte for byte the one of the run that stopped there.
    EXPECT_EQ(state_step(cwd / "nan" / "run" / "last"), 3);
    EXPECT_TRUE(slurp(cwd / "nan" / "run" / "last" / "model.safetensors") ==
                slurp(cwd / "nan-ref" / "run" / "last" / "model.safetensors"));
    EXPECT_TRUE(slurp(cwd / "nan" / "run" / "last" / "optimizer.safetensors") ==
                slurp(cwd / "nan-ref" / "run" / "last" / "optimizer.safetensors"));
  }
}

TEST_F(Reliability, SkipNonfiniteSkipsTheStepAndTrainsOn) {
  const fs::path cwd = prepared();
  write_text(cwd / "tiny.json", tiny_config(false));
  RunResult r = run_app("pretrain", std::string(kTiny) + "--steps 6 --eval-interval 3 --out skip/run "
                        "--debug-inject-nan-at-step 2 --skip-nonfinite", cwd);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("step 2: the gradient of "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("skipped (--skip-nonfinite)"), std::string::npos) << r.out;
  EXPECT_EQ(state_step(cwd / "skip" / "run" / "last"), 6);
  EXPECT_TRUE(all_weights_finite(cwd / "skip" / "run" / "last"));
}

TEST_F(Reliability, ADivergingRunStopsAtItsFirstNonFiniteLossBeforeSavingIt) {
  const fs::path cwd = prepared();
  write_text(cwd / "tiny.json", tiny_config(false));
  // A learning rate of 1e30: step 0's update blows the weights up, and step 1's loss is not finite.
  const std::string diverge = std::string(kTiny) + "--lr 1e30 --warmup-steps 0 --steps 6 --schedule-steps 6 ";
  RunResult r = run_app("pretrain", diverge + "--eval-interval 6 --out diverge/run", cwd);
  expect_one_line_error(r, "pretrain", "step 2: the loss is");
  EXPECT_NE(r.err.find("no checkpoint saved yet"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(cwd / "diverge" / "run" / "last"));
  // Measured after step 0 (a checkpoint each step), the held-out loss is the first to show it.
  r = run_app("pretrain", diverge + "--eval-interval 1 --out diverge-eval/run", cwd);
  expect_one_line_error(r, "pretrain", "step 1: the held-out loss is");
  EXPECT_FALSE(fs::exists(cwd / "diverge-eval" / "run" / "last"));
}

// How many times `needle` occurs in `text`.
int occurrences(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t i = text.find(needle); i != std::string::npos; i = text.find(needle, i + 1)) ++n;
  return n;
}

// NOTE [ Killing a run at random moments ]
// Every step evaluates and saves best/ and last/ (--eval-interval 1), so a run spends much of its
// time writing checkpoints. Each process is killed either at a random moment of its start-up, or a
// random fraction of a step after its first or second training step ended (while it evaluates, saves
// or trains on): each kill moves the run on by a step or two, so 20+ kills fit in one run. A
// temporary folder left behind shows a kill landed inside a save. After each kill, last/ (when there
// is one yet) must load and the next process resumes from it; the chain then finishes and must end
// byte for byte where an uninterrupted run ends.
TEST_F(Reliability, SigkillAtRandomMomentsNeverLosesTheCheckpoint) {
  const fs::path cwd = prepared();
  write_text(cwd / "tiny.json", tiny_config(false));
  constexpr int kSteps = 60, kKills = 24;
  const std::string settings = "--batch-size 4 --eval-windows 4 --device cpu --schedule-steps 60 --eval-interval 1 --steps " +
                               std::to_string(kSteps) + " ";
  const std::string args = "--config tiny.json " + settings;  // the same settings are allowed on --resume, the model is not
  // Uninterrupted: the same run folder name in another place, so checkpoint metadata match.
  const auto t_whole = std::chrono::steady_clock::now();
  RunResult whole = run_app("pretrain", args + " --out kill-a/run", cwd);
  ASSERT_EQ(whole.code, 0) << whole.out << whole.err;
  const double step_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_whole).count() / kSteps;

  const fs::path run = cwd / "kill-b" / "run", last = run / "last";
  std::mt19937 rng(20261129);
  int kills = 0, mid_save = 0, resumed_starts = 0;
  std::string logs;
  std::set<std::string> tmp_seen;
  for (int attempt = 0; kills < kKills && attempt < 2 * kKills; ++attempt) {
    const bool resume = fs::exists(last / "state.json");
    if (resume && state_step(last) >= kSteps) break;
    const fs::path log = cwd / ("kill-b." + std::to_string(attempt) + ".out");
    // Killed between its first best/ and last/: a run is there, but nothing to resume; start over as
    // the message says (the old best/ stays until the new run's first checkpoint).
    const bool best_only = !resume && fs::exists(run / "best");
    const pid_t pid = spawn_pretrain((resume ? "--resume " + settings : args + (best_only ? " --overwrite" : "")) + " --out kill-b/run",
                                     cwd, log);
    ASSERT_GT(pid, 0);
    resumed_starts += resume;
    // 0: in start-up; 1 or 2: after that many training steps.
    const int after_steps = std::uniform_int_distribution<int>(0, 2)(rng);
    const double delay_ms = std::uniform_real_distribution<double>(0, after_steps == 0 ? 150 : step_ms)(rng);
    int status = 0;
    pid_t done = 0;
    auto t0 = std::chrono::steady_clock::now();
    bool armed = after_steps == 0;
    while ((done = ::waitpid(pid, &status, WNOHANG)) == 0) {
      if (!armed && occurrences(slurp(log), "| loss ") >= after_steps) {
        armed = true;
        t0 = std::chrono::steady_clock::now();
      }
      if (armed && std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() >= delay_ms)
        break;
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    if (done == 0) {
      ::kill(pid, SIGKILL);
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      ASSERT_TRUE(WIFSIGNALED(status));
      ++kills;
    } else {
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(log);
    }
    logs += slurp(log);
    bool tmp_left = false;  // a new one: the next start removes those of dead processes
    if (fs::exists(run))
      for (const auto& e : fs::directory_iterator(run))
        if (e.path().filename().string().find(".tmp.") != std::string::npos)
          tmp_left |= tmp_seen.insert(e.path().filename().string()).second;
    mid_save += tmp_left;
    if (fs::exists(last)) {
      SCOPED_TRACE("after kill " + std::to_string(kills));
      EXPECT_NO_THROW(gpt::load_checkpoint(last.string()));
      EXPECT_NO_THROW(state_step(last));
      EXPECT_TRUE(fs::exists(last / "optimizer.safetensors"));
      EXPECT_TRUE(fs::exists(last / "tokenizer.json"));
    }
  }
  EXPECT_GE(kills, 20) << logs;
  EXPECT_GE(resumed_starts, 10) << logs;
  EXPECT_EQ(logs.find("error"), std::string::npos) << logs;
  // Finish the chain, then compare with the uninterrupted run.
  RunResult rest = run_app("pretrain", "--resume --device cpu --steps " + std::to_string(kSteps) +
                           " --out kill-b/run", cwd);
  if (rest.code != 0) {
    EXPECT_NE(rest.err.find("already at step"), std::string::npos) << rest.err;
  }
  EXPECT_EQ(state_step(last), kSteps);
  for (const auto& e : fs::directory_iterator(run))  // the dead processes' temporary folders are gone
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  for (const char* f : {"last/model.safetensors", "last/optimizer.safetensors", "best/model.safetensors"})
    EXPECT_TRUE(slurp(cwd / "kill-a" / "run" / f) == slurp(run / f)) << f << " differs from the uninterrupted run's";
  // log.csv follows the checkpoints through every kill: each step's row exactly once, in order.
  std::vector<int64_t> logged;
  std::istringstream log_rows(slurp(run / "log.csv"));
  std::string row;
  std::getline(log_rows, row);  // the header
  while (std::getline(log_rows, row))
    if (!row.empty()) logged.push_back(std::stoll(row.substr(0, row.find(','))));
  std::vector<int64_t> every_step(kSteps);
  std::iota(every_step.begin(), every_step.end(), 1);
  EXPECT_EQ(logged, every_step) << slurp(run / "log.csv");
  std::printf("[ info     ] %d kills (%.0f ms a step), %d left a temporary checkpoint folder (killed mid-save), %d resumed starts\n",
              kills, step_ms, mid_save, resumed_starts);
}

TEST_F(Reliability, ARunThatDoesNotFitInMemoryFailsBeforeItStarts) {
  const fs::path cwd = prepared();
  // ~3.3 trillion parameters: the 48 TiB of weights and optimizer state fit no machine running this.
  write_text(cwd / "huge.json",
             R"({"vocab_size": 300, "block_size": 1024, "n_layer": 64, "n_head": 64, "n_embd": 65536})");
  RunResult r = run_app("pretrain", "--config huge.json --steps 2 --device cpu --out checkpoints/huge", cwd);
  expect_one_line_error(r, "pretrain", "training this model needs about");
  EXPECT_NE(r.err.find("TiB"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is available"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(cwd / "checkpoints" / "huge"));
  // A tiny model with a batch whose activations do not fit.
  write_text(cwd / "tiny.json", tiny_config(false));
  r = run_app("pretrain", "--config tiny.json --batch-size 1000000000 --steps 2 --device cpu --out checkpoints/bigbatch", cwd);
  expect_one_line_error(r, "pretrain", "activations");
  EXPECT_NE(r.err.find("a batch of 1000000000 x 16"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(cwd / "checkpoints" / "bigbatch"));
}

}  // namespace
}  // namespace mvgpt::apps::testing
