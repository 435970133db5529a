#include <mvgpt/nn/mlp.h>

#include <mvgpt/autograd/ops.h>
#include <mvgpt/fused/bias_gelu.h>

namespace mvgpt::nn {

MLP::MLP(int64_t n_embd, int64_t hidden, bool bias, const Init& init) {
  if (hidden <= 0) hidden = 4 * n_embd;
  c_fc = register_module("c_fc", std::make_shared<Linear>(n_embd, hidden, bias, init));
  c_proj = register_module("c_proj", std::make_shared<Linear>(hidden, n_embd, bias, init));
}

bool MLP::input_feeds_one_product() const { return !c_fc->lora_A; }

Tensor MLP::forward(const Tensor& x) const {
  // GPT-2's GELU: with plain layers the whole MLP is one op (linear_gelu_linear), whose passes under
  // bf16 products write the products' bfloat16 operands and keep the hidden activations in bfloat16
  // (NOTE [ The MLP's activations in bf16 ] in autograd/fused/bias_gelu.h). With an adapter on either
  // layer, the same hidden activation from the layers' own forwards (mlp_hidden_gelu), so a fresh
  // adapter gives the plain MLP's values.
  if (activation == Activation::gelu) {
    if (!c_fc->lora_A && !c_proj->lora_A) {
      c_fc->check_input(x);
      return linear_gelu_linear(x, c_fc->weight, c_fc->bias, c_proj->weight, c_proj->bias);
    }
    return c_proj->forward(mlp_hidden_gelu(c_fc->forward(x), c_fc->weight));
  }
  const Tensor h = c_fc->forward(x);
  switch (activation) {
    case Activation::gelu_erf: return c_proj->forward(gelu_erf(h));
    case Activation::relu2: return c_proj->forward(relu2(h));
    case Activation::gelu: break;
  }
  return c_proj->forward(gelu(h));
}

SwiGLU::SwiGLU(int64_t n_embd, int64_t hidden, bool bias, const Init& init) {
  if (hidden <= 0) hidden = 4 * n_embd;
  w1 = register_module("w1", std::make_shared<Linear>(n_embd, hidden, bias, init));
  w3 = register_module("w3", std::make_shared<Linear>(n_embd, hidden, bias, init));
  w2 = register_module("w2", std::make_shared<Linear>(hidden, n_embd, bias, init));
}

Tensor SwiGLU::forward(const Tensor& x) const { return w2->forward(mul(silu(w1->forward(x)), w3->forward(x))); }

}  // namespace mvgpt::nn
