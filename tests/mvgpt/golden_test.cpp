// The GPT against an independent PyTorch implementation (scripts/make_gpt_golden.py, which wrote
// tests/fixtures/gpt/<variant>/): logits, loss and every parameter's gradient for learned positions,
// RoPE and the Llama-style variant, loaded from checkpoint folders the script wrote by hand; then
// the KV cache token by token and greedy generation past the window against the script's own cache.
//
// Tolerances: the fixture is the float64 answer on the float32 weights, rounded once, so what we
// measure is our float32 error. Logits and loss: |a - b| <= 1e-5 + 1e-5 |b|; gradients:
// |a - b| <= 1e-5 + 1e-4 |b| (a gradient sums many float32 products of both signs, so its relative
// error is larger where it is small).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <filesystem>
#include <set>
#include <sstream>

#include <mvgpt/autograd/ops.h>
#include <mvgpt/autograd/precision.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/fused/cross_entropy.h>
#include <mvgpt/gpt/checkpoint.h>
#include <mvgpt/gpt/generate.h>
#include <mvgpt/gpt/model.h>
#include <mvgpt/nn/safetensors.h>

namespace mvgpt::gpt {
namespace {

const std::string kFixtures = std::string(MVGPT_SOURCE_DIR) + "/tests/fixtures/gpt";

struct Golden {
  LoadedCheckpoint checkpoint;
  safetensors::File expected;
  const GPT& model() const { return *checkpoint.model; }
  const Tensor& at(const std::string& name) const { return expected.at(name); }
};

Golden load_golden(const std::string& variant) {
  const std::string dir = kFixtures + "/" + variant;
  return {load_checkpoint(dir + "/checkpoint"), safetensors::load(dir + "/expected.safetensors")};
}

std::vector<double> values(const Tensor& t) { return ops::to(ops::contiguous(t.detach()), DType::f64).to_vector<double>(); }

// Checks |a - b| <= abs_tol + rel_tol |b| elementwise; reports the worst element.
::testing::AssertionResult close(const Tensor& actual, const Tensor& expected, double abs_tol, double rel_tol) {
  if (!(actual.shape() == expected.shape()))
    return ::testing::AssertionFailure() << "shape " << mvgpt::to_string(actual.shape()) << " vs expected "
                                         << mvgpt::to_string(expected.shape());
  auto a = values(actual), b = values(expected);
  double worst = -1, worst_a = 0, worst_b = 0;
  size_t worst_i = 0, bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double excess = std::abs(a[i] - b[i]) - (abs_tol + rel_tol * std::abs(b[i]));
    if (!(excess <= 0)) ++bad;
    if (!(excess <= worst) || std::isnan(excess)) worst = excess, worst_i = i, worst_a = a[i], worst_b = b[i];
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << a.size() << " elements out of tolerance; worst at " << worst_i
                                       << ": " << worst_a << " vs expected " << worst_b;
}

Tensor inputs(const Golden& g) { return ops::contiguous(ops::narrow(g.at("tokens"), 1, 0, g.at("tokens").size(1) - 1)); }
Tensor targets(const Golden& g) { return ops::contiguous(ops::narrow(g.at("tokens"), 1, 1, g.at("tokens").size(1) - 1)); }

void set_fused_attention(const GPT& model, bool fused) {
  for (size_t i = 0; i < model.h->size(); ++i) model.h->at<Block>(i).attn->use_fused = fused;
}

class GoldenGPT : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenGPT, CheckpointHoldsTheScriptsParameters) {
  Golden g = load_golden(GetParam());
  // Every parameter has a gradient in the fixture and nothing else does: the two models agree on
  // which tensors exist (load_checkpoint already refused missing, unexpected or mis-shaped ones).
  std::set<std::string> ours, theirs;
  for (auto& [name, p] : g.model().named_parameters()) ours.insert("grad." + name);
  for (auto& [name, t] : g.expected.tensors)
    if (name.rfind("grad.", 0) == 0) theirs.insert(name);
  EXPECT_EQ(ours, theirs);
  EXPECT_EQ(g.checkpoint.metadata.at("written_by"), "scripts/make_gpt_golden.py");
}

class GoldenPaths : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(GoldenPaths, LogitsLossAndEveryGradient) {
  auto [variant, fused] = GetParam();
  Golden g = load_golden(variant);
  set_fused_attention(g.model(), fused);
  const int64_t V = g.model().config().vocab_size;

  Tensor logits = g.model().forward(inputs(g));  // (B, T, V)
  EXPECT_TRUE(close(logits, g.at("logits"), 1e-5, 1e-5));
  Tensor loss = cross_entropy(reshape(logits, {-1, V}), reshape(targets(g), {-1}));
  EXPECT_TRUE(close(loss, g.at("loss"), 1e-5, 1e-5));
  // GPT::loss is the same number.
  EXPECT_TRUE(close(detach(g.model().loss(inputs(g), targets(g))), g.at("loss"), 1e-5, 1e-5));

  backward(loss);
  for (auto& [name, p] : g.model().named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_TRUE(close(p.grad(), g.at("grad." + name), 1e-5, 1e-4)) << name;
  }
  // And GPT::loss's own gradients (linear_cross_entropy; tied and separate heads among the goldens),
  // added to the composition's: twice the answer.
  backward(g.model().loss(inputs(g), targets(g)));
  for (auto& [name, p] : g.model().named_parameters())
    EXPECT_TRUE(close(p.grad(), ops::mul(g.at("grad." + name), 2.0), 2e-5, 1e-4)) << "GPT::loss: " << name;
}

// The largest |a - b| over two tensors, and the relative L2 distance |a - b| / |b|.
double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = values(a), y = values(b);
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}
double relative_l2(const Tensor& a, const Tensor& b) {
  auto x = values(a), y = values(b);
  double d = 0, n = 0;
  for (size_t i = 0; i < x.size(); ++i) d += (x[i] - y[i]) * (x[i] - y[i]), n += y[i] * y[i];
  return std::sqrt(d / std::max(n, 1e-300));
}

// --precision bf16 against PyTorch's own bf16 mixed precision, torch.autocast("cpu", bfloat16), on
// the same checkpoint and tokens (expected_autocast.safetensors): both are measured against the
// float64 answer, and ours must be about as close to it as PyTorch's (both round the operands of
// every product, attention's included, to bf16; autocast also rounds the products' results, we keep
// their float32 sums): logits within 1.25x autocast's largest error, the loss within 1.5x its error
// (+2e-3), every gradient within 2x its relative error (or 1e-2); and not equal to the float32 answer
// (the products must really round their operands). Measured: see the test's output.
TEST_P(GoldenGPT, Bf16IsAsCloseToTheAnswerAsPyTorchAutocast) {
  Golden g = load_golden(GetParam());
  const safetensors::File torch_bf16 =
      safetensors::load(kFixtures + "/" + GetParam() + "/expected_autocast.safetensors");
  const int64_t V = g.model().config().vocab_size;
  Tensor logits, loss;
  {
    PrecisionGuard bf16(Precision::bf16);
    logits = g.model().forward(inputs(g));
    loss = cross_entropy(reshape(logits, {-1, V}), reshape(targets(g), {-1}));
    backward(loss);
  }
  const double ours = max_abs_diff(logits, g.at("logits")), theirs = max_abs_diff(torch_bf16.at("logits"), g.at("logits"));
  std::cout << GetParam() << ": max |logits - float64 answer|: mvgpt bf16 " << ours << ", PyTorch autocast " << theirs
            << "; loss " << values(loss)[0] << " vs " << values(torch_bf16.at("loss"))[0] << " (float64 "
            << values(g.at("loss"))[0] << ")\n";
  EXPECT_GT(ours, 1e-4) << "bf16 logits as exact as float32 ones: were the operands rounded?";
  EXPECT_LE(ours, 1.25 * theirs);
  EXPECT_LE(max_abs_diff(logits, torch_bf16.at("logits")), 2 * theirs);
  EXPECT_LE(std::abs(values(loss)[0] - values(g.at("loss"))[0]),
            1.5 * std::abs(values(torch_bf16.at("loss"))[0] - values(g.at("loss"))[0]) + 2e-3);
  for (auto& [name, p] : g.model().named_parameters()) {
    const std::string key = "grad." + name;
    const double e_ours = relative_l2(p.grad(), g.at(key)), e_theirs = relative_l2(torch_bf16.at(key), g.at(key));
    EXPECT_LE(e_ours, std::max(2 * e_theirs, 1e-2)) << name << ": relative error " << e_ours << " vs autocast's "
                                                      << e_theirs;
  }
}

TEST_P(GoldenGPT, CacheTokenByTokenMatchesTheScript) {
  Golden g = load_golden(GetParam());
  NoGradGuard no_grad;
  Tensor ids = inputs(g);  // (2, 16)
  KVCache cache(g.model().config(), ids.size(0));
  // Three tokens at once, then one at a time.
  std::vector<Tensor> parts = {g.model().forward(ops::narrow(ids, 1, 0, 3), &cache)};
  for (int64_t t = 3; t < ids.size(1); ++t) parts.push_back(g.model().forward(ops::narrow(ids, 1, t, 1), &cache));
  EXPECT_EQ(cache.position, ids.size(1));
  EXPECT_TRUE(close(ops::cat(parts, 1), g.at("logits"), 1e-5, 1e-5));
}

// The logits of each greedy step, fed the script's tokens, the way generate() runs the model: the
// prompt through the cache, then one token at a time; with RoPE the cache slides once it holds a
// window, with learned positions each token past the window re-runs the last window.
Tensor step_logits(const GPT& model, std::vector<int32_t> story, const std::vector<int32_t>& tokens) {
  const int64_t W = model.config().block_size;
  auto ids = [](auto begin, auto end) {
    std::vector<int32_t> v(begin, end);
    return Tensor::from_vector(v, Shape{1, int64_t(v.size())});
  };
  KVCache cache(model.config());
  std::vector<Tensor> out = {model.forward(ids(story.end() - std::min<int64_t>(W, int64_t(story.size())), story.end()),
                                           &cache, true)};
  for (size_t i = 0; i + 1 < tokens.size(); ++i) {
    story.push_back(tokens[i]);
    if (model.config().rope) {
      if (cache.length() >= W) cache.slide(W - 1);
      out.push_back(model.forward(ids(story.end() - 1, story.end()), &cache, true));
      EXPECT_LE(cache.length(), W);
    } else if (cache.position < W) {
      out.push_back(model.forward(ids(story.end() - 1, story.end()), &cache, true));
    } else {
      out.push_back(model.forward(ids(story.end() - std::min<int64_t>(W, int64_t(story.size())), story.end()), nullptr, true));
    }
  }
  return reshape(ops::cat(out, 1), {int64_t(tokens.size()), -1});  // (N, V)
}

TEST_P(GoldenGPT, GreedyGenerationPastTheWindowMatchesTheScript) {
  Golden g = load_golden(GetParam());
  auto prompt = g.at("gen.prompt").to_vector<int32_t>();
  auto expected = g.at("gen.tokens").to_vector<int32_t>();
  ASSERT_GT(prompt.size() + expected.size(), size_t(2 * g.model().config().block_size));  // well past the window

  SampleOptions greedy;
  greedy.temperature = 0;
  EXPECT_EQ(generate(g.model(), prompt, int64_t(expected.size()), greedy), expected);
  if (!g.model().config().rope) {
    // Past the window learned positions re-run it, which is what use_cache = false does throughout.
    greedy.use_cache = false;
    EXPECT_EQ(generate(g.model(), prompt, int64_t(expected.size()), greedy), expected);
  }
  NoGradGuard no_grad;
  EXPECT_TRUE(close(step_logits(g.model(), prompt, expected), g.at("gen.logits"), 1e-5, 1e-5));
}

// The other direction: a checkpoint written by save_checkpoint, with the logits our model gives
// for some tokens, for `make_gpt_golden.py --verify DIR` to check in PyTorch. It always writes to a
// temporary folder and reads it back; MVGPT_EXPORT_GOLDEN=DIR keeps a copy in DIR/<variant> (run by
// hand, see docs/checkpoints.md).
TEST(GoldenExport, CheckpointForTheTorchScript) {
  GPTConfig learned;
  learned.vocab_size = 67;
  learned.block_size = 16;
  learned.n_layer = 2;
  learned.n_head = 2;
  learned.n_embd = 16;
  GPTConfig llama = GPTConfig::preset("llama-small");
  llama.vocab_size = 67;
  llama.block_size = 16;
  llama.n_layer = 2;
  llama.n_head = 4;
  llama.n_kv_head = 2;
  llama.n_embd = 16;
  llama.tie_embeddings = false;

  const char* keep = std::getenv("MVGPT_EXPORT_GOLDEN");
  const auto tmp = std::filesystem::temp_directory_path() / ("mvgpt_golden_export_" + std::to_string(::getpid()));
  for (auto& [name, config] : {std::pair{std::string("learned"), learned}, std::pair{std::string("llama"), llama}}) {
    Generator gen(42);
    GPT model(config, &gen);
    {
      // Weights larger than GPT-2's init, so the logits the script compares are not all near zero.
      NoGradGuard no_grad;
      for (auto& p : model.parameters()) ops::copy_(p, ops::mul(ops::randn(p.shape(), DType::f32, Device::cpu(), &gen), 0.5));
    }
    Tensor tokens = Tensor::from_vector(std::vector<int32_t>{1, 5, 9, 66, 0, 3, 3, 7, 12, 40, 2, 8}, Shape{2, 6});
    Tensor logits;
    {
      NoGradGuard no_grad;
      logits = model.forward(tokens);
    }
    auto extra = [&](const std::string& dir) {
      safetensors::save(dir + "/expected.safetensors", {{"tokens", tokens}, {"logits", logits}});
    };
    for (const std::string& dir : {(tmp / name).string(), keep ? std::string(keep) + "/" + name : std::string()}) {
      if (dir.empty()) continue;
      save_checkpoint(dir, model, {{"written_by", "tests/mvgpt/golden_test.cpp"}}, extra);
      auto back = safetensors::load(dir + "/expected.safetensors");
      EXPECT_TRUE(close(back.at("logits"), logits, 0, 0));
      NoGradGuard no_grad;
      EXPECT_TRUE(close(load_checkpoint(dir).model->forward(tokens), logits, 0, 0));
    }
  }
  std::filesystem::remove_all(tmp);
}

INSTANTIATE_TEST_SUITE_P(Variants, GoldenGPT, ::testing::Values("learned", "rope", "llama"));
INSTANTIATE_TEST_SUITE_P(Variants, GoldenPaths,
                         ::testing::Combine(::testing::Values("learned", "rope", "llama"), ::testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param) + (std::get<1>(info.param) ? "_fused" : "_reference");
                         });

}  // namespace
}  // namespace mvgpt::gpt
