// Dropout: a mask drawn once, saved for the backward. (The fused ops are units of autograd/fused/.)
#include <mvgpt/autograd/op_impl.h>

namespace mvgpt {

Tensor dropout(const Tensor& x, double p, Generator* gen, bool training) {
  const InternalOps internal;
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

void register_dropout_gradchecks(OpRegistry& r) {
  using gc::input;
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
