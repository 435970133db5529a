#include <mvgpt/nn/layer_norm.h>

#include <mvgpt/fused/norms.h>

namespace mvgpt::nn {

LayerNorm::LayerNorm(int64_t d, double e, bool affine, bool with_bias, const Init& init) : dim(d), eps(e) {
  if (d <= 0) throw std::invalid_argument("LayerNorm: dim must be positive, found " + std::to_string(d));
  if (affine) weight = register_parameter("weight", ones({d}, init));
  if (affine && with_bias) bias = register_parameter("bias", zeros({d}, init));
}

namespace {
void check_input(const Tensor& x, int64_t dim) {
  if (x.dim() < 1 || x.size(-1) != dim)
    throw std::invalid_argument("LayerNorm::forward: expected input (..., " + std::to_string(dim) + "), found " +
                                x.describe());
}
}  // namespace

Tensor LayerNorm::forward(const Tensor& x) const {
  check_input(x, dim);
  return layer_norm(x, weight, bias, eps);
}

Tensor LayerNorm::forward_for_product(const Tensor& x) const {
  check_input(x, dim);
  return layer_norm_for_product(x, weight, bias, eps);
}

}  // namespace mvgpt::nn
