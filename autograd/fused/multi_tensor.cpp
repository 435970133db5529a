// The multi-tensor unit: checks, the split by device, and the unit's device cases (NOTE [ A fused op
// is one unit ] in unit.h). Kernels: multi_tensor_cpu.cpp, multi_tensor.cu.
#include <mvgpt/fused/multi_tensor.h>

#include <algorithm>
#include <string>
#include <utility>

#include <mvgpt/backends/ops.h>
#include <mvgpt/fused/unit.h>

namespace mvgpt::fused {
namespace {

const MultiTensorKernels& kernels(Device d) {
  static const KernelsByDevice<MultiTensorKernels> table{"multi_tensor", multi_tensor_cpu_kernels(),
                                                         MVGPT_FUSED_CUDA_KERNELS(multi_tensor)};
  return table.on(d);
}

// The items of v split by device, in the order each device first appears (what is summed across
// devices is then added in a fixed order).
template <typename Item, typename DeviceOf>
std::vector<std::pair<Device, std::vector<Item>>> by_device(const std::vector<Item>& v, DeviceOf device_of) {
  std::vector<std::pair<Device, std::vector<Item>>> parts;
  for (const Item& x : v) {
    const Device d = device_of(x);
    auto it = std::find_if(parts.begin(), parts.end(), [&](const auto& p) { return p.first == d; });
    if (it == parts.end()) parts.push_back({d, {x}});
    else it->second.push_back(x);
  }
  return parts;
}

// The kernels outside the CPU take contiguous float32 or float64 tensors.
bool kernel_ready(const Tensor& x) {
  return (x.dtype() == DType::f32 || x.dtype() == DType::f64) && x.is_contiguous();
}

}  // namespace

double sum_squares(const std::vector<Tensor>& xs) {
  for (size_t i = 0; i < xs.size(); ++i) require_floating(xs[i], "sum_squares", ("tensor " + std::to_string(i)).c_str());
  double total = 0;
  const profile::Span span("sum_squares");
  for (auto& [device, part] : by_device(xs, [](const Tensor& x) { return x.device(); })) {
    if (!device.is_cpu())  // bfloat16 widens exactly; a view is packed
      for (Tensor& x : part)
        if (!kernel_ready(x)) x = ops::contiguous(x.dtype() == DType::f64 ? x : ops::to(x, DType::f32));
    total += kernels(device).sum_squares(part);
  }
  return total;
}

void scale_(const std::vector<Tensor>& xs, double factor) {
  for (size_t i = 0; i < xs.size(); ++i) require_floating(xs[i], "scale_", ("tensor " + std::to_string(i)).c_str());
  const profile::Span span("scale_");
  for (auto& [device, part] : by_device(xs, [](const Tensor& x) { return x.device(); })) {
    std::vector<Tensor> ready;
    for (const Tensor& x : part)
      if (device.is_cpu() || kernel_ready(x)) ready.push_back(x);
      else ops::copy_(x, ops::mul(x, factor));  // the rare view or bfloat16 tensor: ops::mul's rounding too
    kernels(device).scale(ready, factor);
  }
  for (const Tensor& x : xs) x.bump_version();
}

void adamw_step_many_(const std::vector<AdamWSlot>& slots) {
  for (const AdamWSlot& s : slots) {
    check_adamw_step("adamw_step_many_", s.param, s.grad, s.m, s.v, s.hp);
    if (s.rounded.defined() && (s.rounded.dtype() != DType::bf16 || !s.rounded.is_contiguous() ||
                                s.rounded.numel() != s.param.numel() || s.param.dtype() != DType::f32 ||
                                !s.param.device().is_cpu() || s.rounded.device() != s.param.device()))
      fail("adamw_step_many_", "a rounded copy is a contiguous bfloat16 tensor of a float32 param's size, on the CPU; found " +
                                   s.rounded.describe() + " for param " + s.param.describe());
  }
  {
    const profile::Span span("adamw");
    for (auto& [device, part] : by_device(slots, [](const AdamWSlot& s) { return s.param.device(); }))
      kernels(device).adamw(part);
  }
  for (const AdamWSlot& s : slots) {
    s.param.bump_version();
    s.m.bump_version();
    s.v.bump_version();
    if (s.rounded.defined()) s.rounded.bump_version();
  }
}

namespace {

// Tensors of many sizes (empty, below one chunk, several chunks) in float32 and float64, and more
// of them than one launch's table holds.
std::vector<Tensor> many_tensors(Device d, uint64_t seed) {
  std::vector<Tensor> xs;
  const int64_t sizes[] = {0, 1, 1000, 70000, 3, 16384, 16385};
  for (int i = 0; i < 90; ++i)
    xs.push_back(uniform_on(d, {sizes[i % 7]}, i % 3 == 2 ? DType::f64 : DType::f32, seed + uint64_t(i)));
  return xs;
}

std::vector<DeviceCase> device_cases() {
  std::vector<DeviceCase> cases;
  // The sum in float64 in another order on each device: the f64 tolerance.
  cases.push_back({"sum_squares", [](Device d) {
    std::vector<Tensor> xs = many_tensors(d, 100);
    xs.push_back(ops::to(uniform_on(d, {300}, DType::f32, 99), DType::bf16));         // widened
    xs.push_back(ops::transpose(uniform_on(d, {40, 30}, DType::f32, 98), 0, 1));      // packed
    return std::vector<Tensor>{Tensor::from_vector(std::vector<double>{sum_squares(xs)})};
  }, {"sum_squares"}, 1e-12, 1e-12});
  // scale_ and the AdamW step: the same rounding on both devices, bit for bit.
  cases.push_back({"scale_", [](Device d) {
    std::vector<Tensor> xs = many_tensors(d, 200);
    scale_(xs, 0.3712);
    return xs;
  }, {"scale"}, 0, 0});
  cases.push_back({"adamw_step_many_", [](Device d) {
    std::vector<Tensor> ps = many_tensors(d, 300), gs = many_tensors(d, 400);
    std::vector<AdamWSlot> slots;
    for (size_t i = 0; i < ps.size(); ++i) {
      const DType dt = ps[i].dtype();
      const Shape& s = ps[i].shape();
      AdamWParams hp;
      // Five groups' rates and decays (more than one launch's scalars table holds).
      hp.lr = 1e-3 * double(1 + i % 5), hp.weight_decay = i % 2 ? 0.1 : 0.0, hp.step = 7;
      slots.push_back({ps[i], gs[i], uniform_on(d, s, dt, 500 + i, -0.1, 0.1), uniform_on(d, s, dt, 600 + i, 0, 0.1), hp});
    }
    for (int step = 0; step < 3; ++step) {
      adamw_step_many_(slots);
      for (AdamWSlot& s : slots) ++s.hp.step;
    }
    std::vector<Tensor> r;
    for (const AdamWSlot& s : slots) r.insert(r.end(), {s.param, s.m, s.v});
    return r;
  }, {"adamw"}, 0, 0});
  return cases;
}

}  // namespace

Unit multi_tensor_unit() { return {"multi_tensor", {"sum_squares", "scale", "adamw"}, nullptr, device_cases}; }

}  // namespace mvgpt::fused
