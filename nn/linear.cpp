#include <mvgpt/nn/linear.h>

#include <mvgpt/autograd/ops.h>

namespace mvgpt::nn {

Linear::Linear(int64_t in, int64_t out, bool with_bias, const Init& init) : in_features(in), out_features(out) {
  if (in < 0 || out < 0)
    throw std::invalid_argument("Linear: negative size (in " + std::to_string(in) + ", out " + std::to_string(out) + ")");
  weight = register_parameter("weight", normal({out, in}, init.std, init));
  if (with_bias) bias = register_parameter("bias", zeros({out}, init));
}

void Linear::check_input(const Tensor& x) const {
  if (x.dim() < 1 || x.size(-1) != in_features)
    throw std::invalid_argument("Linear::forward: expected input (..., " + std::to_string(in_features) + "), found " +
                                x.describe());
}

Tensor Linear::forward(const Tensor& x) const {
  check_input(x);
  Tensor y = linear(x, weight, bias);  // one GEMM over all leading dims, the bias folded in
  if (!lora_A) return y;
  const Tensor a = lora_A->forward(lora_dropout > 0 ? dropout(x, lora_dropout, nullptr, is_training()) : x);  // (..., r)
  return y + mul(lora_B->forward(a), lora_scale);
}

}  // namespace mvgpt::nn
