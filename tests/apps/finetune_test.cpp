// Fine-tuning (issue 16): pretrain --init-from starts a new run from another run's weights; with
// --lora-rank only LoRA adapters train, saved beside the frozen base; evaluate, context and generate
// take --adapter; merge folds adapters into an ordinary checkpoint.
#include <nlohmann/json.hpp>

#include "app_runner.h"
#include <mvgpt/nn/safetensors.h>

namespace mvgpt::apps::testing {
namespace {

class FineTune : public AppsTest {};

double evaluate_loss(const std::string& args, const fs::path& cwd) {
  RunResult r = run_app("evaluate", args + " --max-windows 8 --device cpu --json", cwd);
  EXPECT_EQ(r.code, 0) << r.err;
  return r.code == 0 ? nlohmann::json::parse(r.out).at(0).at("loss").get<double>() : NAN;
}

TEST_F(FineTune, InitFromStartsANewRunFromAnotherRunsWeights) {
  const fs::path base = trained(true), cwd = prepared();
  const std::string args = "--init-from checkpoints/tiny-rope --steps 4 --batch-size 4 --eval-interval 2 --eval-windows 4 --device cpu ";
  RunResult r = run_app("pretrain", args + "--block-size 24 --dropout 0.1 --out ft/full", cwd);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("initialised from checkpoints/tiny-rope/best (step "), std::string::npos) << r.out;
  const auto state = nlohmann::json::parse(slurp(cwd / "ft" / "full" / "last" / "state.json"));
  EXPECT_EQ(state.at("step").get<int64_t>(), 4);  // its own steps, from 0
  EXPECT_EQ(state.at("init_from").at("checkpoint").get<std::string>(), "checkpoints/tiny-rope/best");
  const auto config = nlohmann::json::parse(slurp(cwd / "ft" / "full" / "last" / "config.json"));
  EXPECT_EQ(config.at("block_size").get<int64_t>(), 24);
  EXPECT_EQ(config.at("dropout").get<double>(), 0.1);
  // It starts where the base model is, not from random weights: from a base trained well past chance,
  // its first loss is the base's level.
  write_text(cwd / "ft" / "base.json", tiny_config(true));
  ASSERT_EQ(run_app("pretrain", "--config ft/base.json --steps 40 --lr 0.01 --batch-size 8 --eval-interval 40 --eval-windows 4 "
                    "--device cpu --out ft/base", cwd).code, 0);
  const double base_loss = evaluate_loss("--ckpt ft/base", cwd);
  ASSERT_LT(base_loss, std::log(300.0) - 1.5);
  r = run_app("pretrain", "--init-from ft/base --steps 1 --batch-size 4 --eval-interval 1 --eval-windows 4 --device cpu --out ft/again", cwd);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const double first = std::stod(r.out.substr(r.out.find("loss ", r.out.find("step     1")) + 5, 6));
  EXPECT_LT(first, base_loss + 0.5) << r.out;
  // A learned-position model's table cannot grow; the data must be the checkpoint's tokenizer's.
  trained(false);
  expect_one_line_error(run_app("pretrain", "--init-from checkpoints/tiny --block-size 32 --steps 2 --device cpu --out ft/x", cwd),
                        "pretrain", "only a rotary model's context can change", 2);
  ASSERT_EQ(run_app("prepare", "--data-dir stories --vocab-size 280 --out ft/data280", cwd).code, 0);
  expect_one_line_error(run_app("pretrain", args + "--data ft/data280 --out ft/y", cwd), "pretrain",
                        "is not the tokenizer checkpoints/tiny-rope/best was trained with");
  expect_one_line_error(run_app("pretrain", args + "--resume --out ft/full", cwd), "pretrain", "--init-from starts a new run", 2);
}

TEST_F(FineTune, LoraTrainsAdaptersAloneThatEvaluateTakesAndMergeFolds) {
  trained(true);
  const fs::path cwd = prepared();
  RunResult r = run_app("pretrain", "--init-from checkpoints/tiny-rope --lora-rank 4 --lr 0.01 --steps 6 --batch-size 4 "
                        "--eval-interval 3 --eval-windows 4 --device cpu --out ft/lora", cwd);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("LoRA: rank 4, alpha 8 on 4 layers"), std::string::npos) << r.out;  // 2 blocks x (c_attn, c_proj)
  const fs::path best = cwd / "ft" / "lora" / "best";
  ASSERT_TRUE(fs::exists(best / "adapter.safetensors"));
  // The base is frozen: the run's weights are the base checkpoint's, tensor for tensor.
  auto base = safetensors::load((cwd / "checkpoints" / "tiny-rope" / "best" / "model.safetensors").string());
  auto kept = safetensors::load((best / "model.safetensors").string());
  ASSERT_EQ(base.tensors.size(), kept.tensors.size());
  for (size_t i = 0; i < base.tensors.size(); ++i)
    EXPECT_EQ(base.tensors[i].second.to_vector<float>(), kept.tensors[i].second.to_vector<float>()) << base.tensors[i].first;
  auto adapter = safetensors::load((best / "adapter.safetensors").string());
  EXPECT_TRUE(adapter.contains("transformer.h.0.attn.c_attn.lora_A.weight"));
  EXPECT_TRUE(adapter.contains("transformer.h.1.attn.c_proj.lora_B.weight"));
  EXPECT_LT(fs::file_size(best / "adapter.safetensors"), fs::file_size(best / "model.safetensors") / 4);
  // The run folder, and the base with --adapter, are the same model; merged, too.
  const double lora = evaluate_loss("--ckpt ft/lora", cwd);
  const double with_adapter = evaluate_loss("--ckpt checkpoints/tiny-rope --adapter ft/lora/best/adapter.safetensors", cwd);
  EXPECT_EQ(lora, with_adapter);
  EXPECT_NE(lora, evaluate_loss("--ckpt checkpoints/tiny-rope", cwd)) << "the adapter changes the model";
  RunResult m = run_app("merge", "--ckpt ft/lora --out ft/merged", cwd);
  ASSERT_EQ(m.code, 0) << m.err;
  EXPECT_FALSE(fs::exists(cwd / "ft" / "merged" / "adapter.safetensors"));
  EXPECT_NEAR(evaluate_loss("--ckpt ft/merged", cwd), lora, 1e-5);
  RunResult g = run_app("generate", "--ckpt checkpoints/tiny-rope --adapter ft/lora/best/adapter.safetensors --max-new-tokens 5 "
                        "--device cpu", cwd);
  EXPECT_EQ(g.code, 0) << g.err;
  // What cannot be done says so.
  expect_one_line_error(run_app("merge", "--ckpt ft/merged --out ft/merged2", cwd), "merge", "has no LoRA adapters to merge");
  expect_one_line_error(run_app("merge", "--ckpt ft/lora --out ft/merged", cwd), "merge", "already exists");
  expect_one_line_error(run_app("pretrain", "--lora-rank 4 --steps 2 --device cpu --out ft/z", cwd), "pretrain", "--init-from", 2);
  expect_one_line_error(run_app("evaluate", "--ckpt ft/lora --adapter ft/lora/best/adapter.safetensors --device cpu", cwd),
                        "evaluate", "has adapters of its own already");
}

// The context's loss past the window of the one model and method asked for.
double context_loss(const std::string& args, const fs::path& cwd) {
  RunResult r = run_app("context", args + " --length 40 --streams 1 --methods full --no-plot --device cpu --json", cwd);
  EXPECT_EQ(r.code, 0) << r.err;
  return r.code == 0 ? nlohmann::json::parse(r.out).at(0).at("loss").get<double>() : NAN;
}

TEST_F(FineTune, RopeScalingAtLoadTimeAndForALongerContext) {
  trained(true);
  const fs::path cwd = prepared();
  // Load time, no retraining: factor 1 is the model itself, exactly; a factor above 1 changes it.
  // Within this model's 16-token windows that shows with interpolation, which slows every
  // frequency; NTK scaling slows mostly the low ones, which barely turn in 16 positions, and a
  // 6-step model's near-uniform attention can leave the loss the same to its last bit (it did once
  // the bias gradients' rounding changed), so NTK is checked past the window, below.
  const double plain = evaluate_loss("--ckpt checkpoints/tiny-rope", cwd);
  EXPECT_EQ(evaluate_loss("--ckpt checkpoints/tiny-rope --rope-scaling ntk:1", cwd), plain);
  EXPECT_EQ(evaluate_loss("--ckpt checkpoints/tiny-rope --rope-scaling linear:1", cwd), plain);
  EXPECT_NE(evaluate_loss("--ckpt checkpoints/tiny-rope --rope-scaling linear:4", cwd), plain);
  const double full = context_loss("--ckpt checkpoints/tiny-rope", cwd);
  EXPECT_EQ(context_loss("--ckpt checkpoints/tiny-rope --rope-scaling linear:1", cwd), full);
  EXPECT_NE(context_loss("--ckpt checkpoints/tiny-rope --rope-scaling ntk:2", cwd), full);
  RunResult g = run_app("generate", "--ckpt checkpoints/tiny-rope --rope-scaling ntk:2 --block-size 32 --max-new-tokens 40 "
                        "--device cpu", cwd);
  EXPECT_EQ(g.code, 0) << g.err;

  // A fine-tune at a longer block size with position interpolation: saved in the run's config.
  RunResult r = run_app("pretrain", "--init-from checkpoints/tiny-rope --block-size 32 --rope-scaling linear:2 --steps 2 "
                        "--batch-size 2 --eval-interval 2 --eval-windows 2 --device cpu --out ft/pi", cwd);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("rotary linear:2 positions"), std::string::npos) << r.out;
  const auto config = nlohmann::json::parse(slurp(cwd / "ft" / "pi" / "last" / "config.json"));
  EXPECT_EQ(config.at("block_size").get<int64_t>(), 32);
  EXPECT_EQ(config.at("rope_scaling"), (nlohmann::json{{"type", "linear"}, {"factor", 2.0}}));
  // Scored past 16 with --block-size 16, as the base model; and the scaling can be taken off again.
  const double pi = context_loss("--ckpt ft/pi --block-size 16", cwd);
  EXPECT_TRUE(std::isfinite(pi));
  EXPECT_NE(context_loss("--ckpt ft/pi --block-size 16 --rope-scaling none", cwd), pi);
  // A resumed run keeps its scaling.
  expect_one_line_error(run_app("pretrain", "--resume --rope-scaling ntk:2 --steps 3 --device cpu --out ft/pi", cwd), "pretrain",
                        "--rope-scaling ntk:2 differs from the resumed run's (linear:2)", 2);

  // What cannot be done says so, in one line.
  trained(false);
  expect_one_line_error(run_app("evaluate", "--ckpt checkpoints/tiny --rope-scaling ntk:2 --device cpu", cwd), "evaluate",
                        "--rope-scaling: tiny has a learned table of 16 positions");
  expect_one_line_error(run_app("context", "--ckpt checkpoints/tiny --block-size 32 --length 40 --device cpu", cwd), "context",
                        "--block-size: tiny has a learned table of 16 positions");
  expect_one_line_error(run_app("pretrain", "--init-from checkpoints/tiny --rope-scaling linear:2 --steps 2 --device cpu --out ft/l",
                                cwd), "pretrain", "has learned positions; only rotary positions can be scaled", 2);
  for (const char* bad : {"yarn:2", "linear:0.5", "ntk", "linear:x"})
    EXPECT_EQ(run_app("evaluate", std::string("--ckpt checkpoints/tiny-rope --device cpu --rope-scaling ") + bad, cwd).code, 2)
        << bad;
}

}  // namespace
}  // namespace mvgpt::apps::testing
