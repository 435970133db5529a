#pragma once
// The tiny configs the checkpoint tests share, models of them with random weights, and bit-for-bit
// comparisons of tensors and models.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/gpt/config.h>
#include <mvgpt/gpt/model.h>

namespace mvgpt::gpt::testing {

inline GPTConfig tiny(bool rope) {
  GPTConfig c;
  c.vocab_size = 29;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.rope = rope;
  return c;
}

// Llama-style: RMSNorm, SwiGLU, 4 query heads on 2 KV heads, no biases.
inline GPTConfig tiny_llama(bool tied) {
  GPTConfig c = tiny(true);
  c.rope_base = 500;
  c.norm = NormKind::rmsnorm;
  c.mlp = MlpKind::swiglu;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.mlp_hidden = 24;
  c.bias = false;
  c.tie_embeddings = tied;
  c.norm_eps = 1e-6;
  return c;
}

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (!(a.shape() == b.shape()) || a.dtype() != b.dtype()) return false;
  Tensor x = ops::contiguous(a.detach()), y = ops::contiguous(b.detach());
  return std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

// Weights N(0, 0.5) so that no two tensors (or rows) are alike.
inline std::shared_ptr<GPT> random_model(const GPTConfig& c, uint64_t seed) {
  Generator g(seed);
  auto m = std::make_shared<GPT>(c, &g);
  NoGradGuard no_grad;
  for (auto& p : m->parameters()) ops::copy_(p, ops::mul(ops::randn(p.shape(), DType::f32, Device::cpu(), &g), 0.5));
  return m;
}

inline void expect_same_weights(const GPT& a, const GPT& b) {
  const auto sa = a.state_dict(), sb = b.state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].first, sb[i].first);
    EXPECT_TRUE(bitwise_equal(sa[i].second, sb[i].second)) << sa[i].first;
  }
}

}  // namespace mvgpt::gpt::testing
