// config.dropout: nanoGPT's three places (embeddings, attention weights, residual branches), in
// training mode only, with masks from the default generator.
#include <gtest/gtest.h>

#include <mvgpt/autograd/gradcheck.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/gpt/model.h>

namespace mvgpt::gpt {
namespace {

GPTConfig tiny(bool rope, double dropout) {
  GPTConfig c;
  c.vocab_size = 11;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.rope = rope;
  c.dropout = dropout;
  return c;
}

Tensor ids_of(std::vector<int32_t> v, int64_t B) { return Tensor::from_vector(v, Shape{B, int64_t(v.size()) / B}); }

bool bitwise_equal(const Tensor& a, const Tensor& b) { return a.to_vector<float>() == b.to_vector<float>(); }

class ModelDropout : public ::testing::TestWithParam<bool> {};

TEST_P(ModelDropout, EvalModeIsTheModelWithoutDropout) {
  Generator g1(3), g2(3);
  GPT with(tiny(GetParam(), 0.3), &g1), without(tiny(GetParam(), 0.0), &g2);
  with.eval();
  Tensor ids = ids_of({1, 4, 2, 9, 0, 3, 7, 5}, 2);
  manual_seed(1);
  const uint64_t offset = default_generator().offset;
  EXPECT_TRUE(bitwise_equal(with.forward(ids), without.forward(ids)));
  EXPECT_EQ(default_generator().offset, offset) << "eval mode drew random numbers";
}

TEST_P(ModelDropout, TrainingDropsReproduciblyFromTheSeed) {
  Generator g(3);
  GPT model(tiny(GetParam(), 0.3), &g);
  Tensor ids = ids_of({1, 4, 2, 9, 0, 3, 7, 5}, 2);
  model.eval();
  Tensor clean = model.forward(ids);
  model.train();
  manual_seed(7);
  Tensor a = model.forward(ids);
  manual_seed(7);
  Tensor b = model.forward(ids);
  manual_seed(8);
  Tensor c = model.forward(ids);
  EXPECT_TRUE(bitwise_equal(a, b)) << "same seed, different masks";
  EXPECT_FALSE(bitwise_equal(a, c)) << "another seed gave the same masks";
  EXPECT_FALSE(bitwise_equal(a, clean)) << "training mode did not drop anything";
}

TEST_P(ModelDropout, DropsInEveryPlace) {
  // Every place draws its masks: per forward of (B, T) = (2, 4) with C = 8, H = 2 and L = 2 layers,
  // B T C for the embeddings, and per layer B H T T attention weights, B T C attention outputs and
  // B T C MLP outputs.
  Generator g(3);
  GPT model(tiny(GetParam(), 0.3), &g);
  model.train();
  manual_seed(1);
  const uint64_t before = default_generator().offset;
  model.forward(ids_of({1, 4, 2, 9, 0, 3, 7, 5}, 2));
  const uint64_t B = 2, T = 4, C = 8, H = 2, L = 2;
  EXPECT_EQ(default_generator().offset - before, B * T * C + L * (B * H * T * T + 2 * B * T * C));
}

TEST_P(ModelDropout, GradientsWithFixedMasksFloat64) {
  Generator g(2);
  GPT model(tiny(GetParam(), 0.25), &g);
  model.to(DType::f64);
  model.train();
  {
    NoGradGuard no_grad;
    Generator g2(4);
    for (auto& p : model.parameters()) ops::copy_(p, ops::mul(ops::randn(p.shape(), DType::f64, Device::cpu(), &g2), 0.3));
  }
  Tensor ids = ids_of({1, 4, 2, 9, 0, 3}, 2), targets = ids_of({4, 2, 9, 0, 3, 7}, 2);
  std::vector<Tensor> params = model.parameters();
  // The same masks at every evaluation: reseed inside the function.
  auto result = autograd::gradcheck("gpt with dropout", [&](const autograd::Inputs&) {
    manual_seed(11);
    return model.loss(ids, targets);
  }, params);
  EXPECT_TRUE(result.ok) << result.message;
  EXPECT_GT(result.checked, 300);
}

INSTANTIATE_TEST_SUITE_P(LearnedAndRope, ModelDropout, ::testing::Values(false, true));

}  // namespace
}  // namespace mvgpt::gpt
