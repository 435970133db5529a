// Fused ops (their forward and backward are kernels of their own) and dropout.
#include <mvgpt/autograd/op_impl.h>

namespace mvgpt {

Tensor rope(const Tensor& x, const Tensor& positions, double base, RopeLayout layout, double position_scale) {
  Tensor y = ops::rope(x, positions, base, layout, /*inverse=*/false, position_scale);
  if (!needs_grad(x)) return y;
  // A rotation's transpose is the rotation by the opposite angle.
  return record("rope", std::move(y), {edge_to(x)},
                [sp = SavedTensor(positions), base, layout, position_scale](const Tensor& g) -> Grads {
                  return {ops::rope(g, sp.unpack("rope"), base, layout, /*inverse=*/true, position_scale)};
                });
}

Tensor dropout(const Tensor& x, double p, Generator* gen, bool training) {
  if (!(p >= 0 && p <= 1)) throw std::invalid_argument("dropout: p must be in [0, 1], found " + std::to_string(p));
  if (!training || p == 0) return x;
  ops::check_floating(x, "dropout");
  // keep / (1 - p) for each element, with the input's dtype; all zeros when p = 1.
  DType draw = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor u = ops::rand(x.shape(), draw, x.device(), gen);
  Tensor keep = ops::to(ops::ge(u, ops::full(Shape{}, p, draw, x.device())), x.dtype());
  Tensor scale = p < 1 ? ops::mul(keep, 1.0 / (1.0 - p)) : keep;
  Tensor y = ops::mul(x, scale);
  if (!needs_grad(x)) return y;
  return record("dropout", std::move(y), {edge_to(x)},
                [sm = SavedTensor(scale)](const Tensor& g) -> Grads { return {ops::mul(g, sm.unpack("dropout"))}; });
}

// --- gradient checks ---

namespace autograd {

namespace {
Tensor positions(std::vector<int64_t> p) { return Tensor::from_vector(p); }
}  // namespace

void register_fused_gradchecks(OpRegistry& r) {
  using gc::indices;
  using gc::input;
  r.add("rope", {{"split half (B, H, T, D)", {input({1, 2, 3, 4})},
                  [](const Inputs& x) { return rope(x[0], positions({0, 1, 5}), 10000, RopeLayout::split_half); }},
                 {"interleaved (H, T, D), weighted", {input({2, 3, 4})}, [](const Inputs& x) {
                    return rope(x[0], positions({2, 3, 4}), 100, RopeLayout::interleaved) * gc::fixed({2, 3, 4});
                  }},
                 {"position interpolation (scale 1/4), per-sequence positions", {input({2, 1, 3, 4})},
                  [](const Inputs& x) {
                    Tensor p = Tensor::from_vector(std::vector<int64_t>{0, 3, 9, 1, 2, 700}, Shape{2, 3});
                    return rope(x[0], p, 10000, RopeLayout::split_half, 0.25) * gc::fixed({2, 1, 3, 4});
                  }}});
  r.add("dropout", {{"p = 0.4, fixed generator", {input({3, 4})}, [](const Inputs& x) {
                       Generator g(7);
                       return dropout(x[0], 0.4, &g, true);
                     }},
                    {"eval mode is the identity", {input({3})}, [](const Inputs& x) {
                       return dropout(x[0] * 2.0, 0.5, nullptr, false);
                     }}});
}

}  // namespace autograd
}  // namespace mvgpt
