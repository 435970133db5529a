// One AdamW step, in place, elementwise over contiguous param, grad, m, v. The arithmetic follows
// torch.optim.AdamW (single-tensor path) operation by operation, with no FMA contraction across
// them, so float32 results are bitwise those of PyTorch (checked against torch 1.13):
//   p *= 1 - lr * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
// (PyTorch 2 writes the m update as a lerp, which can differ from this in the last bit.)
#include <cmath>
#include <type_traits>

#include <mvgpt/backends/cpu/cpu_backend.h>
#include <mvgpt/backends/cpu/fused_common.h>
#include <mvgpt/backends/cpu/parallel.h>

namespace mvgpt::cpu {
namespace {

template <typename T>
void adamw_impl(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWParams& p) {
  // Scalars in double, as Python computes them, then cast once.
  const double bias1 = 1 - std::pow(p.beta1, double(p.step));
  const double bias2 = 1 - std::pow(p.beta2, double(p.step));
  const T decay = T(1 - p.lr * p.weight_decay);
  const T b1 = T(p.beta1), one_minus_b1 = T(1 - p.beta1), b2 = T(p.beta2), one_minus_b2 = T(1 - p.beta2);
  const T step_size = T(p.lr / bias1), bias2_sqrt = T(std::sqrt(bias2)), eps = T(p.eps);
  T* pp = param.data<T>();
  const T* gp = grad.data<T>();
  T* mp = m.data<T>();
  T* vp = v.data<T>();
  parallel_for(param.numel(), kElementwiseGrain, [&](int64_t i0, int64_t i1) {
    int64_t i = i0;
    if constexpr (std::is_same_v<T, float>) {
      // Explicit vectors: the scalar loop does not vectorize because of std::sqrt (errno).
      using fused::f32x8;
      for (; i + fused::kVec <= i1; i += fused::kVec) {
        const f32x8 g = fused::load8(gp + i), m0 = fused::load8(mp + i), v0 = fused::load8(vp + i);
        const f32x8 pi = fused::no_contract(fused::load8(pp + i) * decay);
        const f32x8 mi = fused::no_contract(m0 * b1) + one_minus_b1 * g;
        const f32x8 vi = fused::no_contract(v0 * b2) + one_minus_b2 * g * g;
        fused::store8(mp + i, mi);
        fused::store8(vp + i, vi);
        fused::store8(pp + i, pi - step_size * mi / (fused::sqrt8(vi) / bias2_sqrt + eps));
      }
    }
    for (; i < i1; ++i) {
      const T g = gp[i];
      const T pi = fused::no_contract(pp[i] * decay);
      const T mi = fused::no_contract(mp[i] * b1) + one_minus_b1 * g;
      const T vi = fused::no_contract(vp[i] * b2) + one_minus_b2 * g * g;
      mp[i] = mi;
      vp[i] = vi;
      pp[i] = pi - step_size * mi / (std::sqrt(vi) / bias2_sqrt + eps);  // addcdiv: (value * m) / denom
    }
  });
}

}  // namespace

void CpuBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                            const AdamWParams& p) {
  const char* op = "CpuBackend::adamw_step";
  fused::require_float(param, op, "param");
  for (const Tensor* t : {&param, &grad, &m, &v}) {
    fused::require_contiguous(*t, op, "every tensor");
    if (t->dtype() != param.dtype() || t->numel() != param.numel())
      throw std::logic_error("CpuBackend::adamw_step: param, grad, m, v must share dtype and size");
  }
  if (param.dtype() == DType::f64) adamw_impl<double>(param, grad, m, v, p);
  else adamw_impl<float>(param, grad, m, v, p);
}

}  // namespace mvgpt::cpu
