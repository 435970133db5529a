// Sampling and generation: sample_token's argmax, top-k, determinism and distribution; generate()
// with and without the KV cache, prompts cut to the window, and both position kinds past the window
// (RoPE: the cache slides; learned positions: the window is re-run).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include <mvgpt/autograd/ops.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/gpt/generate.h>

namespace mvgpt::gpt {
namespace {

constexpr int64_t kWindow = 12;

GPTConfig tiny(bool rope, int64_t n_layer = 2) {
  GPTConfig c;
  c.vocab_size = 31;
  c.block_size = kWindow;
  c.n_layer = n_layer;
  c.n_head = 2;
  c.n_embd = 16;
  c.rope = rope;
  return c;
}

// Weights far larger than GPT-2's init, so the logits are spread out and a greedy choice is never
// a near tie that float rounding between two computation orders could flip.
std::shared_ptr<GPT> make_model(const GPTConfig& c, uint64_t seed) {
  Generator g(seed);
  auto model = std::make_shared<GPT>(c, &g);
  NoGradGuard no_grad;
  for (auto& p : model->parameters()) ops::copy_(p, ops::mul(ops::randn(p.shape(), DType::f32, Device::cpu(), &g), 0.5));
  model->eval();
  return model;
}

std::vector<int32_t> tokens(int64_t n, int64_t vocab, uint64_t seed) {
  Generator g(seed);
  std::vector<int32_t> out;
  for (double u : ops::rand({n}, DType::f64, Device::cpu(), &g).to_vector<double>()) out.push_back(int32_t(u * double(vocab)));
  return out;
}

SampleOptions greedy(bool use_cache = true) {
  SampleOptions o;
  o.temperature = 0;
  o.use_cache = use_cache;
  return o;
}

Tensor logits_of(const std::vector<float>& v) { return Tensor::from_vector(v); }

// --- sample_token ---

TEST(SampleToken, TemperatureZeroIsArgmax) {
  Tensor logits = logits_of({0.5f, -1.0f, 3.25f, 3.0f, -7.0f});
  SampleOptions o = greedy();
  for (uint64_t draw = 0; draw < 10; ++draw) EXPECT_EQ(sample_token(logits, o, draw), 2);
  o.temperature = -1;  // anything not above zero is greedy
  EXPECT_EQ(sample_token(logits, o, 0), 2);
  o.top_k = 1;
  EXPECT_EQ(sample_token(logits, o, 0), 2);
  // A non-contiguous view: every other element of a longer vector.
  Tensor strided = ops::narrow(ops::reshape(logits_of({0, 1, 9, 1, 2, 1, 3, 1}), {4, 2}), 1, 0, 1);
  EXPECT_EQ(sample_token(ops::reshape(strided, {-1}), o, 0), 1);
}

TEST(SampleToken, TopKOneAndTopKLimitTheChoice) {
  Tensor logits = logits_of({1.0f, 0.9f, 0.8f, 0.7f, 0.6f, 0.5f, 0.4f, 0.3f});
  SampleOptions o;
  o.seed = 5;
  o.top_k = 1;
  for (uint64_t draw = 0; draw < 50; ++draw) EXPECT_EQ(sample_token(logits, o, draw), 0);
  o.top_k = 3;
  std::set<int32_t> seen;
  for (uint64_t draw = 0; draw < 2000; ++draw) seen.insert(sample_token(logits, o, draw));
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1, 2}));  // the three largest, each drawn at some point
  o.top_k = 100;  // more than V: the whole vocabulary
  seen.clear();
  for (uint64_t draw = 0; draw < 2000; ++draw) seen.insert(sample_token(logits, o, draw));
  EXPECT_EQ(seen.size(), 8u);
}

TEST(SampleToken, SameSeedSameDraw) {
  Tensor logits = logits_of({0.1f, 0.2f, 0.3f, 0.0f, -0.5f, 0.4f});
  SampleOptions a, b;
  a.seed = b.seed = 1234;
  std::vector<int32_t> first, second, other;
  for (uint64_t draw = 0; draw < 200; ++draw) {
    first.push_back(sample_token(logits, a, draw));
    second.push_back(sample_token(logits, b, draw));
  }
  EXPECT_EQ(first, second);
  b.seed = 1235;
  for (uint64_t draw = 0; draw < 200; ++draw) other.push_back(sample_token(logits, b, draw));
  EXPECT_NE(first, other);
}

// Frequencies over many draws against softmax(logits / T) restricted to the top k, in double.
void expect_distribution(const std::vector<float>& logits, double temperature, int64_t top_k) {
  const int64_t V = int64_t(logits.size()), draws = 20000;
  std::vector<float> sorted = logits;
  std::sort(sorted.rbegin(), sorted.rend());
  const double kth = top_k > 0 ? sorted[size_t(top_k - 1)] : -INFINITY;
  std::vector<double> p(size_t(V), 0.0);
  for (int64_t i = 0; i < V; ++i)
    if (logits[size_t(i)] >= kth) p[size_t(i)] = std::exp(double(logits[size_t(i)]) / temperature);
  const double total = std::accumulate(p.begin(), p.end(), 0.0);
  for (double& x : p) x /= total;

  SampleOptions o;
  o.temperature = temperature;
  o.top_k = top_k;
  o.seed = 99;
  std::vector<double> freq(size_t(V), 0.0);
  Tensor t = logits_of(logits);
  for (int64_t d = 0; d < draws; ++d) freq[size_t(sample_token(t, o, uint64_t(d)))] += 1.0 / double(draws);
  for (int64_t i = 0; i < V; ++i) {
    // Five standard deviations of a frequency over 20000 draws (at most 0.018).
    const double sd = std::sqrt(p[size_t(i)] * (1 - p[size_t(i)]) / double(draws));
    EXPECT_NEAR(freq[size_t(i)], p[size_t(i)], 5 * sd + 1e-12)
        << "token " << i << ", temperature " << temperature << ", top_k " << top_k;
  }
}

TEST(SampleToken, DrawsFollowTheDistribution) {
  const std::vector<float> logits = {std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f), -3.0f};
  expect_distribution(logits, 1.0, 0);
  expect_distribution(logits, 0.5, 0);  // sharper: p^2, renormalised
  expect_distribution(logits, 2.0, 0);  // flatter
  expect_distribution(logits, 1.0, 2);  // only 0.3 and 0.4, as 3/7 and 4/7
}

TEST(SampleToken, Errors) {
  EXPECT_THROW(sample_token(ops::zeros({2, 3}, DType::f32), SampleOptions{}, 0), std::invalid_argument);
}

// A model with NaN weights gives NaN logits: the draw must fail, not return some id (the same one,
// story after story).
TEST(SampleToken, RefusesNonFiniteLogits) {
  for (float bad : {NAN, INFINITY}) {
    for (double temperature : {0.0, 1.0}) {
      SampleOptions o;
      o.temperature = temperature;
      try {
        sample_token(logits_of({0.5f, bad, 1.0f}), o, 0);
        ADD_FAILURE() << "expected an error for " << bad;
      } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("the logit of token 1 is"), std::string::npos) << e.what();
      }
    }
  }
  EXPECT_THROW(sample_token(logits_of({-INFINITY, -INFINITY}), SampleOptions{}, 0), std::runtime_error);
  // -infinity alone is a token that cannot be drawn, nothing wrong.
  EXPECT_EQ(sample_token(logits_of({-INFINITY, 2.0f}), SampleOptions{}, 0), 1);
}

// A model whose vocabulary is padded past its tokenizer's never draws the ids beyond it.
TEST(SampleToken, VocabLimitKeepsDrawsBelowIt) {
  SampleOptions o;
  o.vocab_limit = 3;
  for (uint64_t i = 0; i < 200; ++i) EXPECT_LT(sample_token(logits_of({0, 0, 0, 9, 9, 9}), o, i), 3);
  o.temperature = 0;
  EXPECT_EQ(sample_token(logits_of({0, 1, 0, 9, 9, 9}), o, 0), 1);
  o.vocab_limit = 6;
  EXPECT_EQ(sample_token(logits_of({0, 1, 0, 9, 9.5, 9}), o, 0), 4);
  o.vocab_limit = -1;
  EXPECT_THROW(sample_token(logits_of({0, 1}), o, 0), std::invalid_argument);
}

// --- generate ---

class GeneratePositions : public ::testing::TestWithParam<bool> {};

TEST_P(GeneratePositions, CacheAndNoCacheAgreeWithinTheWindow) {
  auto model = make_model(tiny(GetParam()), 1);
  auto prompt = tokens(3, 31, 2);
  const int64_t n = kWindow - 3;  // prompt + new tokens fill the window exactly
  auto cached = generate(*model, prompt, n, greedy(true));
  EXPECT_EQ(cached.size(), size_t(n));
  EXPECT_EQ(cached, generate(*model, prompt, n, greedy(false)));
  // The same at temperature 1: the draws are the same, and so are the logits they are taken from.
  SampleOptions sampled;
  sampled.seed = 17;
  auto a = generate(*model, prompt, n, sampled);
  sampled.use_cache = false;
  EXPECT_EQ(a, generate(*model, prompt, n, sampled));
  EXPECT_NE(a, cached);  // sampling is not greedy here
}

TEST_P(GeneratePositions, GreedyTokensAreTheArgmaxOfTheFullForward) {
  // generate()'s tokens against the model run on the whole story so far, one argmax at a time.
  auto model = make_model(tiny(GetParam()), 3);
  auto story = tokens(4, 31, 4);
  auto out = generate(*model, story, kWindow - 4, greedy());
  NoGradGuard no_grad;
  for (int32_t token : out) {
    Tensor logits = model->forward(Tensor::from_vector(story, Shape{1, int64_t(story.size())}), nullptr, true);
    EXPECT_EQ(token, ops::argmax(ops::reshape(logits, {-1}), 0).item<int64_t>());
    story.push_back(token);
  }
}

TEST_P(GeneratePositions, APromptLongerThanTheWindowIsCut) {
  auto model = make_model(tiny(GetParam()), 5);
  auto prompt = tokens(3 * kWindow + 1, 31, 6);
  const std::vector<int32_t> tail(prompt.end() - kWindow, prompt.end());
  for (bool cache : {true, false}) {
    auto out = generate(*model, prompt, 5, greedy(cache));
    EXPECT_EQ(out, generate(*model, tail, 5, greedy(cache))) << "use_cache " << cache;
  }
}

TEST_P(GeneratePositions, StopsWhenToldAndRejectsAnEmptyPrompt) {
  auto model = make_model(tiny(GetParam()), 7);
  std::vector<int32_t> seen;
  auto out = generate(*model, {1, 2}, 20, greedy(), [&](int32_t t) {
    seen.push_back(t);
    return seen.size() < 4;
  });
  EXPECT_EQ(out.size(), 4u);
  EXPECT_EQ(out, seen);
  EXPECT_TRUE(generate(*model, {1, 2}, 0, greedy()).empty());
  EXPECT_THROW(generate(*model, {}, 3, greedy()), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(LearnedAndRope, GeneratePositions, ::testing::Values(false, true));

TEST(Generate, LearnedPositionsPastTheWindowRerunTheWindow) {
  // Past the window the cache cannot serve a learned-position model; generate re-runs the last
  // window for each token, which is what use_cache = false does from the start.
  auto model = make_model(tiny(false), 8);
  auto prompt = tokens(5, 31, 9);
  const int64_t n = 3 * kWindow;
  EXPECT_EQ(generate(*model, prompt, n, greedy(true)), generate(*model, prompt, n, greedy(false)));
  SampleOptions sampled;
  sampled.seed = 8;
  auto cached = generate(*model, prompt, n, sampled);
  sampled.use_cache = false;
  EXPECT_EQ(cached, generate(*model, prompt, n, sampled));
}

// What generate() does with RoPE, spelled out: the prompt through the cache, then one token at a
// time, sliding the cache to block_size - 1 tokens before each. Checks the cache's length bound and
// that positions keep counting; returns the tokens drawn as generate() draws them.
std::vector<int32_t> sliding_cache_generate(const GPT& model, const std::vector<int32_t>& prompt, int64_t n,
                                            const SampleOptions& options) {
  const int64_t W = model.config().block_size;
  NoGradGuard no_grad;
  KVCache cache(model.config());
  Tensor logits = model.forward(Tensor::from_vector(prompt, Shape{1, int64_t(prompt.size())}), &cache, true);
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n; ++i) {
    int32_t token = sample_token(ops::reshape(logits, {-1}), options, uint64_t(i));
    out.push_back(token);
    if (cache.length() >= W) cache.slide(W - 1);
    EXPECT_EQ(cache.length(), std::min<int64_t>(W - 1, int64_t(prompt.size()) + i));
    logits = model.forward(Tensor::from_vector(std::vector<int32_t>{token}, Shape{1, 1}), &cache, true);
    EXPECT_LE(cache.length(), W);
    EXPECT_EQ(cache.position, int64_t(prompt.size()) + i + 1);
  }
  return out;
}

TEST(Generate, RopePastTheWindowSlidesTheCache) {
  // Four windows' worth of new tokens: more than the cache's capacity (2 * block_size), so a
  // cache that did not slide would overflow, and positions run to 4 * block_size.
  auto model = make_model(tiny(true), 10);
  auto prompt = tokens(5, 31, 11);
  const int64_t n = 4 * kWindow;
  auto out = generate(*model, prompt, n, greedy(true));
  ASSERT_EQ(out.size(), size_t(n));
  EXPECT_EQ(out, sliding_cache_generate(*model, prompt, n, greedy(true)));
  SampleOptions sampled;
  sampled.seed = 3;
  out = generate(*model, prompt, n, sampled);
  EXPECT_EQ(out, sliding_cache_generate(*model, prompt, n, sampled));
  EXPECT_GT(std::set<int32_t>(out.begin(), out.end()).size(), 5u);
}

TEST(Generate, OneLayerRopeSlidingCacheEqualsRerunningTheWindow) {
  // With one block, a cached key depends on its own token and position only, so the sliding cache
  // sees exactly what the re-run window sees: the same greedy tokens, however far past the window.
  // (Deeper models differ after the first slide; tests/mvgpt/model_test.cpp measures by how much.)
  auto model = make_model(tiny(true, 1), 12);
  auto prompt = tokens(7, 31, 13);
  const int64_t n = 4 * kWindow;
  EXPECT_EQ(generate(*model, prompt, n, greedy(true)), generate(*model, prompt, n, greedy(false)));
  // Greedy tokens tend to settle into a loop; sampled ones (the same draws either way) keep
  // varying, so a cache that kept one token too many or too few would show.
  SampleOptions sampled;
  sampled.seed = 21;
  auto cached = generate(*model, prompt, n, sampled);
  sampled.use_cache = false;
  EXPECT_EQ(cached, generate(*model, prompt, n, sampled));
  EXPECT_GT(std::set<int32_t>(cached.begin(), cached.end()).size(), 5u);
}

}  // namespace
}  // namespace mvgpt::gpt

namespace mvgpt::gpt {
namespace {

// Nucleus sampling: only the fewest likeliest tokens whose probability reaches p are ever drawn, with
// their probabilities renormalised.
TEST(SampleToken, TopPKeepsTheSmallestNucleus) {
  // softmax of these: about 0.474, 0.287, 0.174, 0.039, 0.026 (the first three hold 0.935).
  const std::vector<float> v{2.0f, 1.5f, 1.0f, -0.5f, -0.9f};
  Tensor logits = logits_of(v);
  std::vector<double> p;
  double total = 0;
  for (float x : v) total += std::exp(double(x));
  for (float x : v) p.push_back(std::exp(double(x)) / total);
  SampleOptions o;
  o.seed = 11;
  o.top_p = 0.9;  // needs the first three (0.474 + 0.287 < 0.9 <= 0.935)
  std::vector<int> counts(5, 0);
  const int draws = 20000;
  for (int d = 0; d < draws; ++d) ++counts[size_t(sample_token(logits, o, uint64_t(d)))];
  EXPECT_EQ(counts[3] + counts[4], 0);
  const double kept = p[0] + p[1] + p[2];
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(double(counts[size_t(i)]) / draws, p[size_t(i)] / kept, 0.015) << i;
  o.top_p = 0.4;  // the likeliest alone reaches it
  for (int d = 0; d < 200; ++d) EXPECT_EQ(sample_token(logits, o, uint64_t(d)), 0);
  o.top_p = 1.0;  // everything
  std::set<int32_t> seen;
  for (int d = 0; d < 5000; ++d) seen.insert(sample_token(logits, o, uint64_t(d)));
  EXPECT_EQ(seen.size(), 5u);
}

}  // namespace
}  // namespace mvgpt::gpt
