// evaluate, context and generate on each device, compared with the CPU (like OpOnDevice and
// ModelOnDevice): the same checkpoint's losses within a float tolerance, and the same greedy story.
// Without a GPU the CUDA cases skip with the reason, never removed. A tiny pretraining run on the
// device comes first, so the whole chain runs there.
#include "app_runner.h"

#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include <mvgpt/backends/backend.h>
#include "cuda_required.h"

namespace mvgpt::apps::testing {
namespace {

using json = nlohmann::ordered_json;

class AppsOnDevice : public AppsTest, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cuda") {
      MVGPT_SKIP_WITHOUT_CUDA("the apps run against the CPU on a GPU machine (scripts/gpu-check.sh)");
    }
  }
};

// "model method" -> loss, from evaluate's or context's --json.
std::map<std::string, double> losses(const std::string& out) {
  std::map<std::string, double> m;
  for (const auto& row : json::parse(out))
    m[std::string(row["model"]) + " " + (row.contains("method") ? std::string(row["method"]) : "")] = row["loss"];
  return m;
}

void expect_same_losses(const RunResult& got, const RunResult& want, const std::string& what) {
  ASSERT_EQ(got.code, 0) << what << ": " << got.err;
  ASSERT_EQ(want.code, 0) << what << ": " << want.err;
  const auto g = losses(got.out), w = losses(want.out);
  ASSERT_EQ(g.size(), w.size()) << what;
  for (const auto& [key, loss] : w) {
    ASSERT_TRUE(g.count(key)) << what << ": " << key;
    EXPECT_NEAR(g.at(key), loss, 1e-4 * (1 + std::abs(loss))) << what << ": " << key;
  }
}

TEST_P(AppsOnDevice, PretrainThenEvaluateContextAndGenerateMatchTheCpu) {
  const std::string dev = " --device " + GetParam();
  const fs::path cwd = prepared();
  const std::string run = "checkpoints/on-" + GetParam();
  write_text(cwd / "on-device.json", tiny_config(true));
  RunResult trained = run_app("pretrain", "--config on-device.json --steps 4 --batch-size 4 --eval-interval 2 "
                              "--eval-windows 2 --overwrite --out " + run + dev, cwd);
  ASSERT_EQ(trained.code, 0) << trained.out << trained.err;

  expect_same_losses(run_app("evaluate", "--ckpt " + run + " --json --max-windows 8" + dev, cwd),
                     run_app("evaluate", "--ckpt " + run + " --json --max-windows 8 --device cpu", cwd), "evaluate");
  const std::string ctx = "--ckpt " + run + " --length 40 --streams 2 --json --no-plot --out-dir ctx-" + GetParam();
  expect_same_losses(run_app("context", ctx + dev, cwd), run_app("context", ctx + "-cpu --device cpu", cwd), "context");
  // Greedy: the argmax of the same logits (ties aside, which a trained model does not produce).
  for (const char* cache : {"", " --no-cache"}) {
    const std::string gen = "--ckpt " + run + " --prompt 'Once upon a time' --max-new-tokens 20 --temperature 0" + cache;
    RunResult got = run_app("generate", gen + dev, cwd), want = run_app("generate", gen + " --device cpu", cwd);
    ASSERT_EQ(got.code, 0) << got.err;
    EXPECT_EQ(got.out, want.out) << cache;
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, AppsOnDevice, ::testing::Values("cpu", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace mvgpt::apps::testing
