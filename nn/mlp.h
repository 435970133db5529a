#pragma once
// The feed-forward blocks of a transformer.
//   MLP (GPT-2):   c_proj(act(c_fc(x))), c_fc (hidden, C), c_proj (C, hidden), hidden = 4C; act the
//                  GELU's tanh approximation (GPT-2's), the exact GELU (nanoGPT's nn.GELU()) or the
//                  squared ReLU (Primer; modded-nanogpt's MLP).
//   SwiGLU (Llama): w2(silu(w1(x)) * w3(x)), w1/w3 gate and up (hidden, C), w2 down (C, hidden).
#include <memory>

#include <mvgpt/nn/init.h>
#include <mvgpt/nn/linear.h>
#include <mvgpt/nn/module.h>

namespace mvgpt::nn {

enum class Activation { gelu, gelu_erf, relu2 };

class MLP : public Module {
 public:
  // hidden <= 0 means 4 * n_embd.
  MLP(int64_t n_embd, int64_t hidden = 0, bool bias = true, const Init& init = {});
  std::string type_name() const override { return "MLP"; }

  // x (..., C) -> (..., C).
  Tensor forward(const Tensor& x) const override;
  // x goes to c_fc alone, unless an adapter on c_fc reads it too.
  bool input_feeds_one_product() const override;

  std::shared_ptr<Linear> c_fc, c_proj;
  Activation activation = Activation::gelu;
};

class SwiGLU : public Module {
 public:
  // hidden <= 0 means 4 * n_embd (Llama uses about 8/3 * C; pass it explicitly).
  SwiGLU(int64_t n_embd, int64_t hidden, bool bias = false, const Init& init = {});
  std::string type_name() const override { return "SwiGLU"; }

  // x (..., C) -> (..., C).
  Tensor forward(const Tensor& x) const override;

  std::shared_ptr<Linear> w1, w3, w2;
};

}  // namespace mvgpt::nn
