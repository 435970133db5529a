#include "apps/common/numerics.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/autograd/ops.h>

namespace mvgpt::apps {

// A float64 sum of finite float32 values cannot overflow, so it is finite exactly when every
// element is: one reduction per chunk instead of a host copy. Chunks bound the float64 copy.
static Tensor finite_probe(const Tensor& grad) {
  constexpr int64_t kChunk = int64_t(1) << 20;
  const Tensor flat = mvgpt::reshape(grad, {-1});
  Tensor total;
  for (int64_t off = 0; off < flat.numel(); off += kChunk) {
    const Tensor part = mvgpt::to(mvgpt::narrow(flat, 0, off, std::min(kChunk, flat.numel() - off)), DType::f64);
    total = total.defined() ? mvgpt::add(total, mvgpt::sum(part)) : mvgpt::sum(part);
  }
  return total.defined() ? total : mvgpt::zeros({}, DType::f64, grad.device());
}

std::string first_nonfinite_gradient(const nn::NamedTensors& params) {
  NoGradGuard no_grad;
  // Every gradient's probe summed on its device and read once (a host synchronisation on a GPU);
  // the sum is finite exactly when every probe is. Only when it is not, each probe is read in
  // turn to name the first.
  std::vector<Tensor> totals;  // () float64, one per device
  for (const auto& [name, p] : params) {
    if (!p.defined() || !p.grad().defined()) continue;
    const Tensor probe = finite_probe(p.grad());
    auto it = std::find_if(totals.begin(), totals.end(), [&](const Tensor& t) { return t.device() == probe.device(); });
    if (it == totals.end()) totals.push_back(probe);
    else *it = mvgpt::add(*it, probe);
  }
  bool finite = true;
  for (const Tensor& t : totals) finite = finite && std::isfinite(mvgpt::to(t, Device::cpu()).item<double>());
  if (finite) return "";
  for (const auto& [name, p] : params) {
    if (!p.defined() || !p.grad().defined()) continue;
    if (!std::isfinite(mvgpt::to(finite_probe(p.grad()), Device::cpu()).item<double>())) return name;
  }
  return "";
}

void poison_gradient(const Tensor& param) {
  NoGradGuard no_grad;
  mvgpt::copy_(param.grad(), mvgpt::mul(param.grad(), NAN));  // 0 * NaN is NaN too
}

}  // namespace mvgpt::apps
