// evaluate, context and generate on tiny trained runs: the JSON other programs read, the tables,
// and every bad input of the issue (each one line on stderr, exit 1 or 2, nothing changed on disk).
#include "app_runner.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include <mvgpt/backends/backend.h>
#include <mvgpt/text/token_file.h>
#include <mvgpt/text/tokenizer.h>

namespace mvgpt::apps::testing {
namespace {

using json = nlohmann::ordered_json;  // keeps the keys in the order printed

class EvaluateContextGenerate : public AppsTest {};

std::vector<std::string> keys(const json& object) {
  std::vector<std::string> k;
  for (auto it = object.begin(); it != object.end(); ++it) k.push_back(it.key());
  return k;
}

TEST_F(EvaluateContextGenerate, EvaluateJsonIsAListOfModelLossPerplexityTop1) {
  trained(false);
  trained(true);
  RunResult r = run_app("evaluate", "--ckpt checkpoints/tiny --ckpt checkpoints/tiny-rope/last --device cpu --json", prepared());
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);  // stdout holds the JSON and nothing else
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["model"], "tiny");
  EXPECT_EQ(j[1]["model"], "tiny-rope/last");
  for (const auto& row : j) {
    EXPECT_EQ(keys(row), (std::vector<std::string>{"model", "loss", "perplexity", "top1", "bits_per_byte", "tokens", "bytes"}));
    // Bits per byte: the loss of every scored token, over the bytes of text they decode to (tokens
    // 1..n of the file, the windows' targets; the end-of-text marker stands for no text).
    const text::TokenFile file((prepared() / "data" / "valid.bin").string());
    const text::Tokenizer tok = text::Tokenizer::load((prepared() / "data" / "tokenizer.json").string());
    int64_t bytes = 0;
    for (int64_t t = 1; t <= int64_t(row["tokens"]); ++t)
      if (file.data()[t] != tok.eot_id()) bytes += int64_t(tok.token_bytes(file.data()[t]).size());
    EXPECT_EQ(int64_t(row["bytes"]), bytes);
    EXPECT_NEAR(double(row["bits_per_byte"]), double(row["loss"]) * double(row["tokens"]) / (double(bytes) * std::log(2.0)), 1e-9);
    const double loss = row["loss"];
    EXPECT_GT(loss, 0);
    EXPECT_LT(loss, std::log(300.0) + 1);
    EXPECT_NEAR(double(row["perplexity"]), std::exp(loss), 1e-6 * std::exp(loss));
    EXPECT_GE(double(row["top1"]), 0);
    EXPECT_LE(double(row["top1"]), 1);
  }
  RunResult table = run_app("evaluate", "--ckpt checkpoints/tiny --device cpu", prepared());
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("perplexity"), std::string::npos);
  EXPECT_NE(table.out.find("tiny "), std::string::npos);
}

// --precision: every app says which precision it runs in and why; bf16 gives a loss within bf16's
// error of fp32's (not the same number); auto follows the CPU; a misspelt value is a usage error.
TEST_F(EvaluateContextGenerate, PrecisionIsChosenSaidAndUsed) {
  trained(true);
  const std::string base = "--ckpt checkpoints/tiny-rope --device cpu --json --precision ";
  RunResult fp32 = run_app("evaluate", base + "fp32", prepared());
  RunResult bf16 = run_app("evaluate", base + "bf16", prepared());
  ASSERT_EQ(fp32.code, 0) << fp32.err;
  ASSERT_EQ(bf16.code, 0) << bf16.err;
  EXPECT_NE(fp32.err.find("precision: fp32 as asked"), std::string::npos) << fp32.err;  // stdout holds the JSON
  EXPECT_NE(bf16.err.find("precision: bf16 as asked"), std::string::npos) << bf16.err;
  const double l32 = json::parse(fp32.out)[0]["loss"], l16 = json::parse(bf16.out)[0]["loss"];
  EXPECT_NE(l32, l16);
  EXPECT_NEAR(l16, l32, 0.02);

  const bool native = backend_for(Device::cpu()).bf16_support().native;
  RunResult automatic = run_app("evaluate", "--ckpt checkpoints/tiny-rope --device cpu --precision auto", prepared());
  ASSERT_EQ(automatic.code, 0) << automatic.err;
  EXPECT_NE(automatic.out.find(native ? "precision: auto: bf16" : "precision: auto: fp32"), std::string::npos)
      << automatic.out;
  RunResult context = run_app("context", "--ckpt checkpoints/tiny-rope --device cpu --length 40 --streams 1 --no-plot "
                              "--precision bf16 --out-dir runs/precision", prepared());
  ASSERT_EQ(context.code, 0) << context.err;
  EXPECT_NE(context.out.find("precision: bf16 as asked"), std::string::npos) << context.out;
  RunResult generate = run_app("generate", "--ckpt checkpoints/tiny-rope --device cpu --prompt 'Once' "
                               "--max-new-tokens 5 --precision bf16", prepared());
  ASSERT_EQ(generate.code, 0) << generate.err;
  EXPECT_EQ(generate.out.find("precision:"), std::string::npos) << "the story owns stdout: " << generate.out;
  EXPECT_NE(generate.err.find("; precision: bf16 as asked"), std::string::npos) << generate.err;  // the stats line
  expect_one_line_error(run_app("evaluate", base + "fp16", prepared()), "evaluate", "--precision", 2);
}

TEST_F(EvaluateContextGenerate, ContextJsonHasEveryMethodAndTheCacheMatchesTheWindow) {
  trained(false);
  trained(true);
  RunResult r = run_app("context", "--ckpt checkpoints/tiny --ckpt checkpoints/tiny-rope --length 40 --streams 2 "
                        "--device cpu --json --out-dir ctx", prepared());
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  std::vector<std::pair<std::string, std::string>> rows;
  std::map<std::string, double> loss;
  for (const auto& row : j) {
    EXPECT_EQ(keys(row), (std::vector<std::string>{"model", "method", "loss", "ms_per_token"}));
    rows.emplace_back(row["model"], row["method"]);
    loss[std::string(row["model"]) + " " + std::string(row["method"])] = row["loss"];
    EXPECT_GT(double(row["ms_per_token"]), 0);
    EXPECT_TRUE(std::isfinite(double(row["loss"])));
  }
  EXPECT_EQ(rows, (std::vector<std::pair<std::string, std::string>>{
                      {"tiny", "window"}, {"tiny-rope", "window"}, {"tiny-rope", "cache"}, {"tiny-rope", "full"}}));
  // The sliding cache sees the same 16 tokens as the window; its deeper layers also remember tokens
  // that left the window (common_test.cpp), so the two are close, not equal.
  EXPECT_NEAR(loss["tiny-rope cache"], loss["tiny-rope window"], 0.02);
  // Per-position losses: positions 16..39, one column per row of the table.
  std::string csv = slurp(prepared() / "ctx" / "context_losses.csv");
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "position,tiny window,tiny-rope window,tiny-rope cache,tiny-rope full");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 24);

  RunResult table = run_app("context", "--ckpt checkpoints/tiny-rope --length 40 --streams 1 --methods cache --device cpu "
                            "--out-dir ctx2 --no-plot", prepared());
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("ms/token"), std::string::npos);
  EXPECT_NE(table.out.find("cache"), std::string::npos);
  EXPECT_EQ(table.out.find("window "), std::string::npos);
}

TEST_F(EvaluateContextGenerate, GenerateStreamsTextAfterThePrompt) {
  trained(true);
  trained(false);
  RunResult r = run_app("generate", "--ckpt checkpoints/tiny-rope --prompt 'Once upon a time' --max-new-tokens 40 "
                        "--device cpu --seed 7", prepared());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("Once upon a time", 0), 0u) << r.out;
  EXPECT_GT(r.out.size(), std::string("Once upon a time").size());
  EXPECT_NE(r.err.find("40 tokens"), std::string::npos) << r.err;
  // The same seed draws the same story; past the 16-token window the cache has slid.
  RunResult again = run_app("generate", "--ckpt checkpoints/tiny-rope --prompt 'Once upon a time' --max-new-tokens 40 "
                            "--device cpu --seed 7", prepared());
  EXPECT_EQ(again.out, r.out);
  RunResult learned = run_app("generate", "--ckpt checkpoints/tiny --max-new-tokens 30 --device cpu", prepared());
  EXPECT_EQ(learned.code, 0) << learned.err;
}

TEST_F(EvaluateContextGenerate, BadInputsFailWithOneLineAndChangeNothing) {
  const fs::path learned = trained(false), rope = trained(true), cwd = prepared();
  auto before_l = snapshot(learned), before_r = snapshot(rope), before_data = snapshot(cwd / "data");

  // Missing checkpoint and token files.
  expect_one_line_error(run_app("evaluate", "--ckpt checkpoints/none --device cpu", cwd), "evaluate", "no such folder");
  expect_one_line_error(run_app("evaluate", "--ckpt checkpoints/tiny --tokens none.bin --device cpu", cwd), "evaluate",
                        "none.bin: no such file");
  expect_one_line_error(run_app("context", "--ckpt checkpoints/tiny --tokens none.bin --device cpu", cwd), "context",
                        "none.bin: no such file");
  expect_one_line_error(run_app("evaluate", "--tokens data/valid.bin", cwd), "evaluate", "--ckpt", 2);

  // A truncated token file.
  std::string valid = slurp(cwd / "data" / "valid.bin");
  write_text(cwd / "bad" / "cut.bin", valid.substr(0, valid.size() - 7));
  expect_one_line_error(run_app("evaluate", "--ckpt checkpoints/tiny --tokens bad/cut.bin --device cpu", cwd), "evaluate",
                        "cut.bin");
  write_text(cwd / "bad" / "short.bin", valid.substr(0, 100));
  expect_one_line_error(run_app("context", "--ckpt checkpoints/tiny --tokens bad/short.bin --device cpu", cwd), "context",
                        "short.bin");

  // Token ids the model has no embedding for.
  text::write_token_file((cwd / "bad" / "big-ids.bin").string(), std::vector<uint32_t>(200, 4000));
  expect_one_line_error(run_app("evaluate", "--ckpt checkpoints/tiny --tokens bad/big-ids.bin --device cpu", cwd),
                        "evaluate", "token id 4000");
  expect_one_line_error(run_app("context", "--ckpt checkpoints/tiny --tokens bad/big-ids.bin --length 40 --streams 2 "
                                "--device cpu", cwd), "context", "token id 4000");

  // A checkpoint whose config does not match its tensors, and one whose tensors are cut short.
  fs::copy(rope / "best", cwd / "bad" / "wide", fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  std::string config = slurp(cwd / "bad" / "wide" / "config.json");
  config.replace(config.find("\"n_embd\": 32"), 12, "\"n_embd\": 64");
  write_text(cwd / "bad" / "wide" / "config.json", config);
  for (const char* app : {"evaluate", "context", "generate"}) {
    const std::string extra = app == std::string("context") ? " --length 40 --streams 2" : "";
    expect_one_line_error(run_app(app, "--ckpt bad/wide --device cpu" + extra, cwd), app, "bad/wide");
  }
  fs::copy(rope / "best", cwd / "bad" / "cut-model", fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  std::string weights = slurp(cwd / "bad" / "cut-model" / "model.safetensors");
  write_text(cwd / "bad" / "cut-model" / "model.safetensors", weights.substr(0, weights.size() / 2));
  expect_one_line_error(run_app("evaluate", "--ckpt bad/cut-model --device cpu", cwd), "evaluate", "cut-model");
  fs::create_directories(cwd / "bad" / "empty");
  expect_one_line_error(run_app("generate", "--ckpt bad/empty --device cpu", cwd), "generate", "no config.json");

  // A tokenizer that does not match the model: a bigger vocabulary, or other merges.
  write_text(cwd / "bad" / "stories" / "train.txt", tiny_stories(40, 5) + "zebra xylophone quartz jukebox\n<|endoftext|>\n");
  write_text(cwd / "bad" / "stories" / "valid.txt", tiny_stories(30, 6));
  ASSERT_EQ(run_app("prepare", "--data-dir bad/stories --vocab-size 400 --out bad/data400", cwd).code, 0);
  ASSERT_EQ(run_app("prepare", "--data-dir bad/stories --vocab-size 280 --out bad/data280", cwd).code, 0);
  expect_one_line_error(run_app("generate", "--ckpt checkpoints/tiny-rope --tokenizer bad/data400/tokenizer.json --device cpu", cwd),
                        "generate", "vocabulary of 300");
  expect_one_line_error(run_app("generate", "--ckpt checkpoints/tiny-rope --tokenizer bad/data280/tokenizer.json --device cpu", cwd),
                        "generate", "not the one");
  expect_one_line_error(run_app("evaluate", "--ckpt checkpoints/tiny-rope --tokens bad/data280/valid.bin --device cpu", cwd),
                        "evaluate", "re-encode");
  expect_one_line_error(run_app("context", "--ckpt checkpoints/tiny-rope --tokens bad/data280/valid.bin --length 40 "
                                "--streams 2 --device cpu", cwd), "context", "re-encode");

  // cache and full asked of a learned-position model; a length inside the window.
  for (const char* method : {"cache", "full"})
    expect_one_line_error(run_app("context", std::string("--ckpt checkpoints/tiny --methods ") + method +
                                  " --length 40 --streams 2 --device cpu", cwd), "context", "rotary");
  expect_one_line_error(run_app("context", "--ckpt checkpoints/tiny-rope --length 16 --streams 2 --device cpu", cwd),
                        "context", "--length", 2);

  // A GPU that is not there.
  if (!cuda_available())
    for (const char* app : {"evaluate", "context", "generate"})
      expect_one_line_error(run_app(app, "--ckpt checkpoints/tiny --device cuda", cwd), app, "--device cpu");

  EXPECT_EQ(snapshot(learned), before_l);
  EXPECT_EQ(snapshot(rope), before_r);
  EXPECT_EQ(snapshot(cwd / "data"), before_data);
}

}  // namespace
}  // namespace mvgpt::apps::testing
