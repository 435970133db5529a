// AdamW: checks and dispatch, the slow reference, and the unit's device case (NOTE [ A fused op is
// one unit ] in unit.h). Kernels: adamw_cpu.cpp, adamw.cu.
#include <mvgpt/fused/adamw.h>

#include <cmath>
#include <string>

#include <mvgpt/backends/ops.h>
#include <mvgpt/fused/unit.h>

namespace mvgpt::fused {
namespace {

const AdamWKernels& kernels(Device d) {
  static const KernelsByDevice<AdamWKernels> table{"adamw", adamw_cpu_kernels(), MVGPT_FUSED_CUDA_KERNELS(adamw)};
  return table.on(d);
}

}  // namespace

void check_adamw_step(const char* op, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                      const AdamWParams& p) {
  for (auto [t, what] : {std::pair{&param, "param"}, {&grad, "grad"}, {&m, "m"}, {&v, "v"}}) {
    require_floating(*t, op, what);
    if (t->dtype() != DType::f32 && t->dtype() != DType::f64)
      fail(op, std::string(what) + " must be float32 or float64 (keep master weights and moments in float32), found " +
                   std::string(dtype_name(t->dtype())));
    if (t->dtype() != param.dtype())
      fail(op, std::string(what) + " is " + std::string(dtype_name(t->dtype())) + " but param is " +
                   std::string(dtype_name(param.dtype())));
    require_device(*t, param, op, what);
    require_shape(*t, param.shape(), op, what);
    if (!t->is_contiguous()) fail(op, std::string(what) + " must be contiguous, found strides " + to_string(t->strides()));
  }
  if (p.step < 1) fail(op, "step is 1-based, found " + std::to_string(p.step));
  if (!(p.lr >= 0)) fail(op, "lr must be >= 0, found " + std::to_string(p.lr));
  if (!(p.beta1 >= 0 && p.beta1 < 1) || !(p.beta2 >= 0 && p.beta2 < 1))
    fail(op, "betas must lie in [0, 1), found " + std::to_string(p.beta1) + ", " + std::to_string(p.beta2));
  if (!(p.eps >= 0) || !(p.weight_decay >= 0))
    fail(op, "eps and weight_decay must be >= 0, found " + std::to_string(p.eps) + ", " + std::to_string(p.weight_decay));
}

void adamw_step_(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWParams& p) {
  check_adamw_step("adamw_step_", param, grad, m, v, p);
  {
    const profile::Span span("adamw");
    kernels(param.device()).step(param, grad, m, v, p, nullptr);
  }
  param.bump_version();
  m.bump_version();
  v.bump_version();
}

namespace reference {

std::vector<Tensor> adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                               const AdamWParams& p) {
  const double bias1 = 1 - std::pow(p.beta1, double(p.step)), bias2 = 1 - std::pow(p.beta2, double(p.step));
  Tensor decayed = ops::mul(param, 1 - p.lr * p.weight_decay);
  Tensor m1 = ops::add(ops::mul(m, p.beta1), ops::mul(grad, 1 - p.beta1));
  Tensor v1 = ops::add(ops::mul(v, p.beta2), ops::mul(ops::square(grad), 1 - p.beta2));
  Tensor denom = ops::add(ops::mul(ops::sqrt(v1), 1 / std::sqrt(bias2)), p.eps);
  Tensor p1 = ops::sub(decayed, ops::div(ops::mul(m1, p.lr / bias1), denom));
  return {p1, m1, v1};
}

}  // namespace reference

namespace {

std::vector<DeviceCase> device_cases() {
  // Bit for bit: both devices round after every operation and contract nothing (adamw_math.h).
  return {{"adamw", [](Device d) {
    std::vector<Tensor> r;
    for (DType dt : {DType::f32, DType::f64}) {
      Tensor p = uniform_on(d, {1000}, dt, 77), g = uniform_on(d, {1000}, dt, 78);
      Tensor m = uniform_on(d, {1000}, dt, 79, -0.1, 0.1), v = uniform_on(d, {1000}, dt, 80, 0, 0.1);
      AdamWParams params;
      params.lr = 3e-3, params.weight_decay = 0.1, params.step = 7;
      for (int s = 0; s < 3; ++s, ++params.step) adamw_step_(p, g, m, v, params);
      r.insert(r.end(), {p, m, v});
    }
    return r;
  }, {"step"}, 0, 0}};
}

}  // namespace

Unit adamw_unit() { return {"adamw", {"step"}, nullptr, device_cases}; }

}  // namespace mvgpt::fused
