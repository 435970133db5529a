#include "apps/common/numerics.h"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "backends/ops.h"

namespace mvgpt::apps {

std::string first_nonfinite_gradient(const nn::NamedTensors& params) {
  NoGradGuard no_grad;
  for (const auto& [name, p] : params) {
    if (!p.defined() || !p.grad().defined()) continue;
    // A float64 sum of finite float32 values cannot overflow, so it is finite exactly when every
    // element is: one reduction per chunk instead of a host copy. Chunks bound the float64 copy.
    constexpr int64_t kChunk = int64_t(1) << 20;
    const Tensor flat = ops::reshape(p.grad(), {-1});
    for (int64_t off = 0; off < flat.numel(); off += kChunk) {
      const Tensor part = ops::to(ops::narrow(flat, 0, off, std::min(kChunk, flat.numel() - off)), DType::f64);
      if (!std::isfinite(ops::to(ops::sum(part), Device::cpu()).item<double>())) return name;
    }
  }
  return "";
}

void poison_gradient(const Tensor& param) {
  NoGradGuard no_grad;
  ops::copy_(param.grad(), ops::mul(param.grad(), NAN));  // 0 * NaN is NaN too
}

}  // namespace mvgpt::apps
