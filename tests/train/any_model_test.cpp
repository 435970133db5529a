// A model that is not the GPT, the Llama of examples/llama/llama.h, goes through the shared code as
// the GPT does: the training loop (apps/common/trainer.h) with its checkpoints, a resume from last/
// that continues exactly, held-out evaluation, generation, and the module checkpoint's loader.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <vector>

#include "apps/common/evaluation.h"
#include "apps/common/trainer.h"
#include "examples/llama/llama.h"
#include "mvgpt/tiny_models.h"
#include "nn/temp_dir.h"
#include <mvgpt/gpt/batches.h>
#include <mvgpt/gpt/generate.h>
#include <mvgpt/gpt/model.h>
#include <mvgpt/nn/checkpoint.h>
#include <mvgpt/tensor/generator.h>
#include <mvgpt/text/token_file.h>

namespace mvgpt {
namespace {

namespace fs = std::filesystem;
using llama::Llama;
using llama::LlamaConfig;
using testing::TempDir;

constexpr int64_t kVocab = 32;

// Runs that count up, (s + i k) mod V with k in 1..5, of 20 to 60 tokens: only attention to the
// earlier tokens of a run predicts the next one.
std::vector<uint32_t> counting_tokens(uint32_t seed, size_t n) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> out;
  while (out.size() < n) {
    const uint32_t s = rng() % kVocab, k = 1 + rng() % 5, len = 20 + rng() % 41;
    for (uint32_t i = 0; i < len && out.size() < n; ++i) out.push_back((s + i * k) % kVocab);
  }
  return out;
}

LlamaConfig small_config() { return {.vocab = kVocab, .dim = 32, .layers = 2, .heads = 4, .kv_heads = 2, .hidden = 86, .block_size = 24}; }

std::shared_ptr<Llama> new_model() {
  manual_seed(3);  // the layers draw their initial weights from the default stream
  auto m = std::make_shared<Llama>(small_config());
  m->train();
  return m;
}

nn::LoadedCausalLM load_llama(const std::string& dir) {
  return nn::load_causal_lm(dir, [](const std::string& text, const std::string& path) -> std::shared_ptr<nn::CausalLM> {
    return std::make_shared<Llama>(LlamaConfig::from_json(text, path));
  });
}

class AnyModel : public ::testing::Test {
 protected:
  void SetUp() override {
    text::write_token_file(tmp.file("train.bin"), counting_tokens(1, 20000));
    text::write_token_file(tmp.file("valid.bin"), counting_tokens(2, 1200));
    train.emplace(tmp.file("train.bin"));
    valid.emplace(tmp.file("valid.bin"));
    settings.batch_size = 8;
    settings.lr = 3e-3;
    settings.weight_decay = 0.01;
    settings.eval_interval = 15;
    settings.eval_windows = 16;
    apps::complete_schedule(settings, kSteps);
  }

  apps::TrainerOptions options(const std::string& out, int64_t steps) const {
    apps::TrainerOptions o;
    o.out_dir = out;
    o.run_name = "llama";
    o.steps = steps;
    o.log_interval = 10;
    return o;
  }

  static constexpr int64_t kSteps = 60;
  TempDir tmp;
  std::optional<text::TokenFile> train, valid;
  apps::PretrainSettings settings;
};

TEST_F(AnyModel, TrainsResumesExactlyAndIsEvaluatedThroughTheSharedLoop) {
  gpt::RandomBatches batches(*train, settings.batch_size, small_config().block_size, settings.seed);

  // One run of kSteps steps.
  auto whole = new_model();
  const double before = apps::evaluate_windows(*whole, *valid, 8, 16, Device::cpu()).loss;
  whole->train();
  const std::string whole_dir = tmp.file("whole");
  fs::create_directories(whole_dir);
  apps::Trainer a(*whole, settings, apps::TrainState{}, batches, *valid, {}, options(whole_dir, kSteps));
  a.run(nullptr);
  EXPECT_EQ(a.state().step, kSteps);

  // The same run stopped half-way, then resumed from last/ with a model its checkpoint rebuilt.
  const std::string split_dir = tmp.file("split");
  fs::create_directories(split_dir);
  {
    auto first = new_model();
    apps::Trainer b(*first, settings, apps::TrainState{}, batches, *valid, {}, options(split_dir, kSteps / 2));
    b.run(nullptr);
  }
  const std::string last = (fs::path(split_dir) / "last").string();
  for (const char* f : {"config.json", "model.safetensors", "optimizer.safetensors", "state.json", "checksums.json"})
    EXPECT_TRUE(fs::exists(fs::path(last) / f)) << f;
  EXPECT_FALSE(fs::exists(fs::path(last) / "tokenizer.json")) << "no tokenizer was given, so none is saved";
  nn::LoadedCausalLM loaded = load_llama(last);
  EXPECT_EQ(loaded.metadata.at("step"), std::to_string(kSteps / 2));
  apps::PretrainSettings saved;
  const apps::TrainState state = apps::read_state((fs::path(last) / "state.json").string(), saved);
  EXPECT_EQ(state.step, kSteps / 2);
  loaded.model->train();
  apps::Trainer c(*loaded.model, saved, state, batches, *valid, {}, options(split_dir, kSteps));
  c.resume();
  c.run(nullptr);
  EXPECT_EQ(c.state().step, kSteps);

  // Resumed, it ends where the uninterrupted run did, bit for bit.
  const nn::NamedTensors w1 = whole->state_dict(), w2 = loaded.model->state_dict();
  ASSERT_EQ(w1.size(), w2.size());
  for (size_t i = 0; i < w1.size(); ++i) {
    EXPECT_EQ(w1[i].first, w2[i].first);
    EXPECT_EQ(w1[i].second.to_vector<float>(), w2[i].second.to_vector<float>()) << w1[i].first;
  }

  // Held-out: it learned, and its best/ checkpoint loads and measures the same as the trainer did.
  const double after = apps::evaluate_windows(*whole, *valid, 8, 16, Device::cpu()).loss;
  EXPECT_TRUE(std::isfinite(after));
  EXPECT_LT(after, 0.75 * before) << "held-out loss " << before << " -> " << after;
  EXPECT_NEAR(a.state().best_val_loss, apps::evaluate_windows(*load_llama(whole_dir + "/best").model, *valid, 8, 16,
                                                               Device::cpu()).loss, 1e-6);

  // Generation takes any causal LM: greedy tokens within the vocabulary, the same twice.
  const std::vector<int32_t> prompt{3, 6, 9, 12};
  const auto g1 = gpt::generate(*whole, prompt, 6, {.temperature = 0});
  EXPECT_EQ(g1.size(), 6u);
  for (int32_t t : g1) EXPECT_TRUE(t >= 0 && t < kVocab) << t;
  EXPECT_EQ(g1, gpt::generate(*loaded.model, prompt, 6, {.temperature = 0}));
}

TEST_F(AnyModel, TheLoaderRefusesAnotherModelsConfig) {
  auto model = new_model();
  nn::save_module_checkpoint(tmp.file("ckpt"), *model, model->config_json());
  EXPECT_NO_THROW(load_llama(tmp.file("ckpt")));
  // A GPT's config.json where the Llama's should be: the Llama's parser names the file.
  gpt::GPT gpt_model(gpt::testing::tiny(false));
  nn::save_module_checkpoint(tmp.file("gpt"), gpt_model, gpt_model.config_json());
  try {
    load_llama(tmp.file("gpt"));
    FAIL() << "a GPT's checkpoint loaded as the Llama";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(tmp.file("gpt") + "/config.json: not the config of examples/llama"),
              std::string::npos)
        << e.what();
  }
}

// One forward per module, through the base class: the GPT and its blocks answer a call through
// nn::Module& as through their own type.
TEST(OneForward, TheGptAndItsBlocksForwardThroughTheBaseClass) {
  Generator gen(5);
  gpt::GPT model(gpt::testing::tiny(true), &gen);
  model.eval();
  Tensor ids = Tensor::from_vector<int32_t>({1, 2, 3, 4, 5}, Shape{1, 5});
  const nn::Module& as_module = model;
  EXPECT_EQ(as_module.forward(ids).to_vector<float>(), model.forward(ids, nullptr).to_vector<float>());
  const nn::CausalLM& as_lm = model;
  EXPECT_EQ(as_lm.block_size(), 8);
  EXPECT_EQ(as_lm.loss(ids, ids).item<float>(), model.loss(ids, ids).item<float>());
  Tensor x = randn({1, 5, model.config().n_embd});
  const nn::Module& block = (*model.h)[0];
  EXPECT_EQ(block.forward(x).to_vector<float>(), (*model.h)[0].forward(x, Tensor{}, nullptr).to_vector<float>());
}

}  // namespace
}  // namespace mvgpt
