// pretrain: a stopped run resumed with --resume ends exactly where an uninterrupted run does; logs,
// TensorBoard events and checkpoints are where the docs say; bad inputs change nothing.
#include "app_runner.h"

#include "apps/common/tensorboard.h"
#include "backends/backend.h"

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

  // TensorBoard: the four scalars, in the run folder.
  std::vector<ScalarEvent> events;
  for (const auto& e : fs::directory_iterator(cwd / "a" / "run" / "tensorboard")) {
    auto part = read_scalar_events(e.path().string());
    events.insert(events.end(), part.begin(), part.end());
  }
  std::set<std::string> tags;
  for (const auto& e : events) tags.insert(e.tag);
  EXPECT_EQ(tags, (std::set<std::string>{"loss/train", "loss/val", "lr", "tokens_per_s"}));
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
  EXPECT_EQ(snapshot(run), before);
}

}  // namespace
}  // namespace mvgpt::apps::testing
