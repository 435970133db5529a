#pragma once
// The tiny configs the checkpoint tests share, and a bit-for-bit comparison of tensors.
#include <cstring>

#include <mvgpt/backends/ops.h>
#include <mvgpt/gpt/config.h>

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

}  // namespace mvgpt::gpt::testing
