// pretrain: a stopped run resumed with --resume ends exactly where an uninterrupted run does; logs,
// TensorBoard events and checkpoints are where the docs say; bad inputs change nothing.
#include <signal.h>

#include <nlohmann/json.hpp>

#include "app_runner.h"

#include "apps/common/tensorboard.h"
#include <mvgpt/backends/backend.h>
#include <mvgpt/gpt/checkpoint.h>

namespace mvgpt::apps::testing {
namespace {

class Pretrain : public AppsTest {};

const char* kArgs = "--config resume.json --batch-size 4 --eval-interval 3 --eval-windows 4 --device cpu ";

// Columns of the CSV: step -> fields.
std::map<std::string, std::vector<std::string>> csv_rows(const fs::path& csv) {
  std::istringstream in(slurp(csv));
  std::string line;
  std::map<std::string, std::vector<std::string>> rows;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::vector<std::string> fields;
    std::istringstream l(line);
    for (std::string f; std::getline(l, f, ',');) fields.push_back(f);
    if (line.back() == ',') fields.push_back("");
    rows[fields.at(0)] = fields;
  }
  return rows;
}

// With dropout the masks come from the saved stream, and a resumed model must be back in training
// mode (a loaded checkpoint comes in eval mode): otherwise the steps after the resume drop nothing.
TEST_F(Pretrain, ResumeWithDropoutContinuesExactly) {
  const fs::path cwd = prepared();
  std::string config = tiny_config(true);
  config.insert(config.size() - 1, ", \"dropout\": 0.2");
  write_text(cwd / "resume.json", config);
  RunResult whole = run_app("pretrain", std::string(kArgs) + "--steps 6 --schedule-steps 6 --out c/run", cwd);
  ASSERT_EQ(whole.code, 0) << whole.out << whole.err;
  RunResult first = run_app("pretrain", std::string(kArgs) + "--steps 3 --schedule-steps 6 --out d/run", cwd);
  ASSERT_EQ(first.code, 0) << first.out << first.err;
  RunResult rest = run_app("pretrain", "--resume --steps 6 --device cpu --out d/run", cwd);
  ASSERT_EQ(rest.code, 0) << rest.out << rest.err;
  auto whole_rows = csv_rows(cwd / "c" / "run" / "log.csv"), resumed_rows = csv_rows(cwd / "d" / "run" / "log.csv");
  ASSERT_EQ(whole_rows.size(), 6u);
  ASSERT_EQ(resumed_rows.size(), 6u);
  for (const auto& [step, w] : whole_rows) EXPECT_EQ(resumed_rows.at(step).at(1), w.at(1)) << "train loss at step " << step;
  EXPECT_TRUE(slurp(cwd / "c" / "run" / "last" / "model.safetensors") == slurp(cwd / "d" / "run" / "last" / "model.safetensors"));
}

TEST_F(Pretrain, ResumeContinuesExactlyLikeAnUninterruptedRun) {
  const fs::path cwd = prepared();
  write_text(cwd / "resume.json", tiny_config(true));
  // The same run folder name in two places, so the checkpoints' metadata match too.
  RunResult whole = run_app("pretrain", std::string(kArgs) + "--steps 9 --schedule-steps 9 --out a/run", cwd);
  ASSERT_EQ(whole.code, 0) << whole.out << whole.err;
  RunResult first = run_app("pretrain", std::string(kArgs) + "--steps 4 --schedule-steps 9 --out b/run", cwd);
  ASSERT_EQ(first.code, 0) << first.out << first.err;
  RunResult rest = run_app("pretrain", "--resume --steps 9 --device cpu --out b/run", cwd);
  ASSERT_EQ(rest.code, 0) << rest.out << rest.err;
  EXPECT_NE(rest.out.find("resuming b/run at step 4"), std::string::npos) << rest.out;

  // Every step's training loss and learning rate are the same; so is every held-out loss measured
  // in both (the stopped run also measured at its last step, 4).
  auto whole_rows = csv_rows(cwd / "a" / "run" / "log.csv"), resumed_rows = csv_rows(cwd / "b" / "run" / "log.csv");
  ASSERT_EQ(whole_rows.size(), 9u);
  ASSERT_EQ(resumed_rows.size(), 9u);
  for (const auto& [step, w] : whole_rows) {
    const auto& r = resumed_rows.at(step);
    EXPECT_EQ(r.at(1), w.at(1)) << "train loss at step " << step;
    EXPECT_EQ(r.at(3), w.at(3)) << "lr at step " << step;
    if (!w.at(2).empty()) {
      EXPECT_EQ(r.at(2), w.at(2)) << "held-out loss at step " << step;
    }
  }
  EXPECT_FALSE(resumed_rows.at("4").at(2).empty());
  for (const char* f : {"last/model.safetensors", "last/optimizer.safetensors", "best/model.safetensors"})
    EXPECT_TRUE(slurp(cwd / "a" / "run" / f) == slurp(cwd / "b" / "run" / f)) << f << " differs";
  EXPECT_TRUE(fs::exists(cwd / "a" / "run" / "last" / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(cwd / "a" / "run" / "last" / "state.json"));

  // TensorBoard: the scalars, in the run folder (tests/python/test_tensorboard.py reads them with
  // TensorBoard itself, the settings text too).
  std::vector<ScalarEvent> events;
  for (const auto& e : fs::directory_iterator(cwd / "a" / "run" / "tensorboard")) {
    auto part = read_scalar_events(e.path().string());
    events.insert(events.end(), part.begin(), part.end());
  }
  std::set<std::string> tags;
  for (const auto& e : events) tags.insert(e.tag);
  EXPECT_EQ(tags, (std::set<std::string>{"loss/train", "loss/val", "perplexity/val", "top1/val", "bits_per_byte/val", "lr",
                                         "grad_norm", "tokens_per_s"}));
}

// Muon (hidden matrices) with AdamW (the rest) and the warm-up-stable-decay schedule: the state file
// holds both optimizers' slots, a resume continues exactly, and the rates follow the WSD shape.
TEST_F(Pretrain, MuonAndWsdResumeExactly) {
  const fs::path cwd = prepared();
  write_text(cwd / "resume.json", tiny_config(true));
  const std::string args = std::string(kArgs) + "--optimizer muon --muon-lr 0.01 --schedule wsd --decay-fraction 0.5 "
                                                "--warmup-steps 2 --schedule-steps 8 --muon-coefficients polar_express "
                                                "--muon-ns-steps 3 --embedding-lr 3e-3 --qk-norm ";
  RunResult whole = run_app("pretrain", args + "--steps 8 --out muon_a/run", cwd);
  ASSERT_EQ(whole.code, 0) << whole.out << whole.err;
  EXPECT_NE(whole.out.find("Muon for the hidden matrices: lr 0.01 -> 0.001, momentum 0.95 (Nesterov), 3 Newton-Schulz "
                           "steps (polar_express)"),
            std::string::npos)
      << whole.out;
  EXPECT_NE(whole.out.find("the embeddings at their own rate: 0.003 -> 0.0003"), std::string::npos) << whole.out;
  const std::string saved = slurp(cwd / "muon_a" / "run" / "last" / "state.json");
  for (const char* field : {R"("muon_coefficients": "polar_express")", R"("muon_ns_steps": 3)", R"("embedding_lr": 0.003)"})
    EXPECT_NE(saved.find(field), std::string::npos) << field << " not in " << saved;
  EXPECT_NE(slurp(cwd / "muon_a" / "run" / "last" / "config.json").find(R"("qk_norm": true)"), std::string::npos);
  RunResult first = run_app("pretrain", args + "--steps 5 --out muon_b/run", cwd);
  ASSERT_EQ(first.code, 0) << first.out << first.err;
  // A resume keeps the run's optimizer; giving another is refused.
  RunResult other = run_app("pretrain", "--resume --steps 8 --optimizer adamw --device cpu --out muon_b/run", cwd);
  EXPECT_NE(other.code, 0);
  EXPECT_NE(other.err.find("--optimizer differs from the resumed run's"), std::string::npos) << other.err;
  RunResult plain = run_app("pretrain", "--resume --steps 8 --no-qk-norm --device cpu --out muon_b/run", cwd);
  EXPECT_NE(plain.code, 0);
  EXPECT_NE(plain.err.find("--no-qk-norm differs from the resumed run's model"), std::string::npos) << plain.err;
  RunResult rate = run_app("pretrain", "--resume --steps 8 --embedding-lr 1e-3 --device cpu --out muon_b/run", cwd);
  EXPECT_NE(rate.code, 0);
  EXPECT_NE(rate.err.find("--embedding-lr differs from the resumed run's"), std::string::npos) << rate.err;
  RunResult rest = run_app("pretrain", "--resume --steps 8 --device cpu --out muon_b/run", cwd);
  ASSERT_EQ(rest.code, 0) << rest.out << rest.err;
  for (const char* f : {"last/model.safetensors", "last/optimizer.safetensors"})
    EXPECT_TRUE(slurp(cwd / "muon_a" / "run" / f) == slurp(cwd / "muon_b" / "run" / f)) << f << " differs";
  // WSD: warm-up (steps 0, 1), the peak until the decay starts at step 5 of 8, then linear to lr / 10.
  auto rows = csv_rows(cwd / "muon_a" / "run" / "log.csv");
  std::vector<double> lr;
  for (int step = 1; step <= 8; ++step) lr.push_back(std::stod(rows.at(std::to_string(step)).at(3)));
  EXPECT_DOUBLE_EQ(lr[0], 5e-4);
  for (int i = 1; i <= 5; ++i) EXPECT_DOUBLE_EQ(lr[size_t(i)], 1e-3) << "step " << i + 1;
  EXPECT_NEAR(lr[6], 1e-4 + 9e-4 * 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(lr[7], 1e-4 + 9e-4 / 3.0, 1e-12);
  // The optimizer state: Muon's momentum for the matrices, AdamW's moments for the rest.
  const std::string state = slurp(cwd / "muon_a" / "run" / "last" / "optimizer.safetensors");
  EXPECT_NE(state.find("\"optimizer\":\"Muon\""), std::string::npos);
  EXPECT_NE(state.find("attn.c_attn.weight.momentum_buffer"), std::string::npos);
  EXPECT_NE(state.find("\"wte.weight.exp_avg_sq\""), std::string::npos);
}

TEST_F(Pretrain, RunFolderFollowsThePositionEmbedding) {
  const fs::path cwd = prepared();
  write_text(cwd / "tiny-learned.json", tiny_config(false));
  RunResult r = run_app("pretrain", "--config tiny-learned.json --rope --steps 2 --batch-size 2 --eval-interval 2 "
                        "--eval-windows 2 --device cpu", cwd);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(fs::exists(cwd / "checkpoints" / "pretrain-rope" / "best" / "config.json"));
  EXPECT_NE(slurp(cwd / "checkpoints" / "pretrain-rope" / "best" / "config.json").find("\"rope\": true"), std::string::npos);
  EXPECT_NE(r.out.find("parameters"), std::string::npos);
  EXPECT_NE(r.out.find("OpenBLAS"), std::string::npos);
  EXPECT_NE(r.out.find("tok/s"), std::string::npos);
  EXPECT_NE(r.out.find("ETA"), std::string::npos);
}

TEST_F(Pretrain, BadInputsFailWithOneLineAndChangeNothing) {
  const fs::path run = trained(false);
  const fs::path cwd = prepared();
  auto before = snapshot(run);
  const std::string out = " --out checkpoints/tiny --device cpu --batch-size 4 --eval-windows 4";
  // A run is there: starting again needs --resume or --overwrite.
  expect_one_line_error(run_app("pretrain", "--config tiny.json --steps 2" + out, cwd), "pretrain", "--resume");
  // Nothing to resume.
  expect_one_line_error(run_app("pretrain", "--resume --steps 2 --out checkpoints/none --device cpu", cwd), "pretrain",
                        "nothing to resume");
  // Missing data.
  expect_one_line_error(run_app("pretrain", "--resume --steps 9 --data nowhere" + out, cwd), "pretrain", "run prepare");
  // A truncated token file.
  fs::create_directories(cwd / "cut");
  fs::copy_file(cwd / "data" / "tokenizer.json", cwd / "cut" / "tokenizer.json", fs::copy_options::overwrite_existing);
  fs::copy_file(cwd / "data" / "valid.bin", cwd / "cut" / "valid.bin", fs::copy_options::overwrite_existing);
  std::string train = slurp(cwd / "data" / "train.bin");
  write_text(cwd / "cut" / "train.bin", train.substr(0, train.size() - 10));
  expect_one_line_error(run_app("pretrain", "--resume --steps 9 --data cut" + out, cwd), "pretrain", "train.bin");
  // Token ids past the model's vocabulary (a model of 100 tokens on a 300-token tokenizer's files).
  write_text(cwd / "small-vocab.json", tiny_config(false, 100));
  expect_one_line_error(run_app("pretrain", "--config small-vocab.json --steps 2 --out checkpoints/small --device cpu", cwd),
                        "pretrain", "vocabulary of 100");
  EXPECT_FALSE(fs::exists(cwd / "checkpoints" / "small" / "last"));
  // Settings that define the run cannot change on resume.
  expect_one_line_error(run_app("pretrain", "--resume --steps 9 --lr 0.5" + out, cwd), "pretrain", "--lr", 2);
  // A GPU that is not there.
  if (!cuda_available())
    expect_one_line_error(run_app("pretrain", "--resume --steps 9 --out checkpoints/tiny --device cuda", cwd), "pretrain",
                          "--device cpu");
  expect_one_line_error(run_app("pretrain", "--device tpu", cwd), "pretrain", "--device tpu", 2);
  // The same command again resumes; another model or context in it does not.
  expect_one_line_error(run_app("pretrain", "--resume --block-size 8 --steps 9 --out checkpoints/tiny --device cpu", cwd),
                        "pretrain", "--block-size 8 differs from the resumed run's (16)", 2);
  expect_one_line_error(run_app("pretrain", "--resume --preset series --steps 9 --out checkpoints/tiny --device cpu", cwd),
                        "pretrain", "--preset series describes another model than the resumed run's", 2);
  EXPECT_EQ(snapshot(run), before);
}

}  // namespace
}  // namespace mvgpt::apps::testing

namespace mvgpt::apps::testing {
namespace {

// Every weight of two checkpoints, the largest absolute difference.
double max_weight_difference(const fs::path& a, const fs::path& b) {
  auto ma = gpt::load_checkpoint(a.string()).model, mb = gpt::load_checkpoint(b.string()).model;
  double worst = 0;
  const auto pb = mb->named_parameters();
  size_t i = 0;
  for (const auto& [name, p] : ma->named_parameters()) {
    const auto va = p.to_vector<double>(), vb = pb.at(i++).second.to_vector<double>();
    for (size_t k = 0; k < va.size(); ++k) worst = std::max(worst, std::abs(va[k] - vb[k]));
  }
  return worst;
}

// N micro-batches of B/N sequences make the same update as one batch of B (gradients summed with
// 1/N each), to float rounding.
TEST_F(Pretrain, GradientAccumulationEqualsOneBigBatch) {
  const fs::path cwd = prepared();
  write_text(cwd / "accum.json", tiny_config(true));
  const std::string args = "--config accum.json --batch-size 8 --steps 4 --eval-interval 4 --eval-windows 4 --device cpu ";
  RunResult one = run_app("pretrain", args + "--out accum/one", cwd);
  ASSERT_EQ(one.code, 0) << one.out << one.err;
  for (const char* n : {"2", "4"}) {
    SCOPED_TRACE(n);
    const std::string name = std::string("n").append(n);
    RunResult r = run_app("pretrain", args + "--grad-accum-steps " + n + " --out accum/" + name, cwd);
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find(std::string("gradient accumulation: ").append(n)), std::string::npos) << r.out;
    EXPECT_LT(max_weight_difference(cwd / "accum" / "one" / "last", cwd / "accum" / name / "last"), 1e-5);
    auto a = csv_rows(cwd / "accum" / "one" / "log.csv"), b = csv_rows(cwd / "accum" / name / "log.csv");
    for (const auto& [step, row] : a) EXPECT_NEAR(std::stod(row.at(1)), std::stod(b.at(step).at(1)), 1e-5) << "loss at " << step;
  }
  // A batch that does not split is a usage error; a resumed run keeps its accumulation.
  expect_one_line_error(run_app("pretrain", args + "--grad-accum-steps 3 --out accum/bad", cwd), "pretrain",
                        "not a multiple of grad-accum-steps", 2);
  expect_one_line_error(run_app("pretrain", "--resume --steps 6 --device cpu --grad-accum-steps 4 --out accum/n2", cwd),
                        "pretrain", "--grad-accum-steps differs", 2);
}

// With --minutes and no --schedule-steps the decay is fitted to the clock: on a clock where a step
// takes 0.5 s or 0.25 s, a one-minute run ends at --min-lr either way, in 120 or 240 steps.
TEST_F(Pretrain, TheScheduleFitsTheClock) {
  const fs::path cwd = prepared();
  write_text(cwd / "fit.json", tiny_config(false));
  for (const char* seconds : {"0.5", "0.25"}) {
    SCOPED_TRACE(seconds);
    const std::string out = std::string("fit/run") + seconds;
    RunResult r = run_app("pretrain", "--config fit.json --batch-size 2 --eval-interval 50 --eval-windows 2 --device cpu "
                          "--lr 0.001 --min-lr 0.0001 --minutes 1 --debug-step-seconds " + std::string(seconds) + " --out " + out, cwd);
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    const int64_t expected_steps = int64_t(60 / std::stod(seconds));
    auto rows = csv_rows(cwd / out / "log.csv");
    ASSERT_EQ(int64_t(rows.size()), expected_steps);
    EXPECT_NEAR(std::stod(rows.at(std::to_string(expected_steps)).at(3)), 1e-4, 1e-12) << "the last step's rate";
    EXPECT_GT(std::stod(rows.at(std::to_string(expected_steps / 2)).at(3)), 4e-4) << "half way, still decaying";
    EXPECT_NE(r.out.find("the rate reaches 0.0001 at step " + std::to_string(expected_steps - 1)), std::string::npos) << r.out;
    const auto state = nlohmann::json::parse(slurp(cwd / out / "last" / "state.json"));
    EXPECT_EQ(state.at("settings").at("schedule_steps").get<int64_t>(), expected_steps - 1);
    EXPECT_TRUE(state.at("settings").at("fit_schedule").get<bool>());
  }
  // A run stopped part way (SIGTERM) and resumed with the same command keeps the same curve: every
  // step's rate is the uninterrupted run's.
  const std::string ten = "--config fit.json --batch-size 2 --eval-interval 100 --eval-windows 2 --device cpu "
                          "--minutes 10 --debug-step-seconds 0.5 --out ";
  RunResult whole_run = run_app("pretrain", ten + "fit/whole", cwd);
  ASSERT_EQ(whole_run.code, 0) << whole_run.out << whole_run.err;
  const pid_t pid = spawn_pretrain(ten + "fit/resumed", cwd, cwd / "fit" / "resumed.log");
  for (int i = 0; i < 6000 && slurp(cwd / "fit" / "resumed.log").find("step    30") == std::string::npos; ++i) ::usleep(5000);
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << slurp(cwd / "fit" / "resumed.log");
  RunResult rest = run_app("pretrain", "--resume " + ten + "fit/resumed", cwd);
  ASSERT_EQ(rest.code, 0) << rest.out << rest.err;
  auto whole = csv_rows(cwd / "fit" / "whole" / "log.csv"), resumed = csv_rows(cwd / "fit" / "resumed" / "log.csv");
  ASSERT_EQ(whole.size(), 1200u);
  ASSERT_EQ(resumed.size(), whole.size());
  for (const auto& [step, row] : whole) EXPECT_EQ(resumed.at(step).at(3), row.at(3)) << "lr at step " << step;
}

}  // namespace
}  // namespace mvgpt::apps::testing
