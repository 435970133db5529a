#include <mvgpt/nn/rms_norm.h>

#include <mvgpt/fused/norms.h>

namespace mvgpt::nn {

RMSNorm::RMSNorm(int64_t d, double e, bool affine, const Init& init) : dim(d), eps(e) {
  if (d <= 0) throw std::invalid_argument("RMSNorm: dim must be positive, found " + std::to_string(d));
  if (affine) weight = register_parameter("weight", ones({d}, init));
}

Tensor RMSNorm::forward(const Tensor& x) const {
  if (x.dim() < 1 || x.size(-1) != dim)
    throw std::invalid_argument("RMSNorm::forward: expected input (..., " + std::to_string(dim) + "), found " +
                                x.describe());
  return rms_norm(x, weight, eps);
}

}  // namespace mvgpt::nn
