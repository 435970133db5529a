// Copies, conversions and views, each forward beside its backward.
#include <numeric>

#include <mvgpt/autograd/op_impl.h>

namespace mvgpt {

Tensor parameter(const Tensor& t) {
  const InternalOps internal;
  Tensor p = t.detach();
  p.requires_grad_(true);
  return p;
}

Tensor detach(const Tensor& t) { return t.detach(); }

Tensor contiguous(const Tensor& x) {
  const InternalOps internal;
  if (x.is_contiguous()) return x;  // the same tensor, with its own history
  Tensor y = ops::contiguous(x);
  if (!needs_grad(x)) return y;
  return record("contiguous", std::move(y), {edge_to(x)}, [](const Tensor& g) -> Grads { return {g}; });
}

Tensor clone(const Tensor& x) {
  const InternalOps internal;
  Tensor y = ops::clone(x);
  if (!needs_grad(x)) return y;
  return record("clone", std::move(y), {edge_to(x)}, [](const Tensor& g) -> Grads { return {g}; });
}

Tensor to(const Tensor& x, DType dtype) {
  const InternalOps internal;
  if (x.dtype() == dtype) return x;
  Tensor y = ops::to(x, dtype);
  // A cast to an integer type ends the gradient.
  if (!is_floating(dtype) || !needs_grad(x)) return y;
  DType from = x.dtype();
  return record("to", std::move(y), {edge_to(x)}, [from](const Tensor& g) -> Grads { return {ops::to(g, from)}; });
}

Tensor to(const Tensor& x, Device device) {
  const InternalOps internal;
  if (x.device() == device) return x;
  Tensor y = ops::to(x, device);
  if (!needs_grad(x)) return y;
  Device from = x.device();
  return record("to_device", std::move(y), {edge_to(x)},
                [from](const Tensor& g) -> Grads { return {ops::to(g, from)}; });
}

// The gradient of any reshaping view is the gradient reshaped back.
static Tensor record_reshape_like(const char* op, Tensor y, const Tensor& x) {
  Shape in = x.shape();
  return record(op, std::move(y), {edge_to(x)}, [in](const Tensor& g) -> Grads { return {ops::reshape(g, in)}; });
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  const InternalOps internal;
  Tensor y = ops::reshape(x, shape);
  return needs_grad(x) ? record_reshape_like("reshape", std::move(y), x) : y;
}

Tensor flatten(const Tensor& x, int start_axis, int end_axis) {
  const InternalOps internal;
  Tensor y = ops::flatten(x, start_axis, end_axis);
  return needs_grad(x) ? record_reshape_like("flatten", std::move(y), x) : y;
}

Tensor squeeze(const Tensor& x, int axis) {
  const InternalOps internal;
  Tensor y = ops::squeeze(x, axis);
  return needs_grad(x) ? record_reshape_like("squeeze", std::move(y), x) : y;
}

Tensor unsqueeze(const Tensor& x, int axis) {
  const InternalOps internal;
  Tensor y = ops::unsqueeze(x, axis);
  return needs_grad(x) ? record_reshape_like("unsqueeze", std::move(y), x) : y;
}

Tensor permute(const Tensor& x, const std::vector<int>& axes) {
  const InternalOps internal;
  Tensor y = ops::permute(x, axes);
  if (!needs_grad(x)) return y;
  // y's axis i is x's axis axes[i], so x's axis axes[i] is y's axis i.
  std::vector<int> inverse(axes.size());
  for (size_t i = 0; i < axes.size(); ++i) inverse[size_t(normalize_axis(axes[i], x.dim(), "permute"))] = int(i);
  return record("permute", std::move(y), {edge_to(x)},
                [inverse](const Tensor& g) -> Grads { return {ops::permute(g, inverse)}; });
}

Tensor transpose(const Tensor& x, int axis0, int axis1) {
  const InternalOps internal;
  Tensor y = ops::transpose(x, axis0, axis1);
  if (!needs_grad(x)) return y;
  return record("transpose", std::move(y), {edge_to(x)},
                [axis0, axis1](const Tensor& g) -> Grads { return {ops::transpose(g, axis0, axis1)}; });
}

namespace {

// The backward of narrow and select: the gradient of the block they read, which the engine writes
// into that block of the input's gradient (NOTE [ Gradient blocks ] in autograd/engine.cpp).
class BlockBackward final : public autograd::Node {
 public:
  // squeezed: the output lost the block's axis (select), so the gradient gets it back.
  BlockBackward(const char* name, autograd::GradientBlock block, bool squeezed)
      : name_(name), block_(block), squeezed_(squeezed) {}
  const char* name() const override { return name_; }
  std::vector<Tensor> backward(const Tensor& g) override { return {squeezed_ ? ops::unsqueeze(g, block_.axis) : g}; }
  std::optional<autograd::GradientBlock> gradient_block(size_t) const override { return block_; }

 private:
  const char* name_;
  autograd::GradientBlock block_;
  bool squeezed_;
};

Tensor record_block(const char* op, Tensor y, const Tensor& x, int axis, int64_t start, bool squeezed) {
  auto node = std::make_shared<BlockBackward>(op, autograd::GradientBlock{axis, start}, squeezed);
  node->set_next_edges({edge_to(x)});
  return autograd::attach(std::move(y), std::move(node));
}

}  // namespace

Tensor narrow(const Tensor& x, int axis, int64_t start, int64_t length) {
  const InternalOps internal;
  Tensor y = ops::narrow(x, axis, start, length);
  if (!needs_grad(x)) return y;
  const int ax = normalize_axis(axis, x.dim(), "narrow");
  if (start < 0) start += x.size(ax);
  return record_block("narrow", std::move(y), x, ax, start, false);
}

Tensor select(const Tensor& x, int axis, int64_t index) {
  const InternalOps internal;
  Tensor y = ops::select(x, axis, index);
  if (!needs_grad(x)) return y;
  const int ax = normalize_axis(axis, x.dim(), "select");
  if (index < 0) index += x.size(ax);
  return record_block("select", std::move(y), x, ax, index, true);
}

Tensor expand(const Tensor& x, const Shape& shape) {
  const InternalOps internal;
  Tensor y = ops::expand(x, shape);
  if (!needs_grad(x)) return y;
  Shape in = x.shape();
  return record("expand", std::move(y), {edge_to(x)}, [in](const Tensor& g) -> Grads { return {ops::sum_to(g, in)}; });
}

// --- gradient checks ---

namespace autograd {

void register_view_gradchecks(OpRegistry& r) {
  using gc::input;
  r.add("contiguous", {{"transposed", {gc::transposed({3, 4})}, [](const Inputs& x) { return contiguous(x[0]); }},
                       {"already contiguous", {input({2, 3})}, [](const Inputs& x) { return contiguous(x[0]) * 2.0; }}});
  r.add("clone", {{"sliced", {gc::sliced({4, 5})}, [](const Inputs& x) { return clone(x[0]); }}});
  r.add("to", {{"f64 to f32 and back", {input({2, 3})},
                [](const Inputs& x) { return to(square(to(x[0], DType::f32)), DType::f64); },
                /*tolerance=*/1e-3, /*eps=*/1e-3},
               {"same device", {input({3})}, [](const Inputs& x) { return to(x[0], Device::cpu()) * 3.0; }}});
  r.add("reshape", {{"contiguous", {input({2, 3, 2})}, [](const Inputs& x) { return reshape(x[0], {3, -1}); }},
                    {"transposed (copies)", {gc::transposed({3, 4})},
                     [](const Inputs& x) { return reshape(x[0], {2, 6}); }}});
  r.add("flatten", {{"middle axes", {input({2, 3, 2})}, [](const Inputs& x) { return flatten(x[0], 1, 2); }}});
  r.add("permute", {{"3-d", {input({2, 3, 4})}, [](const Inputs& x) { return permute(x[0], {2, 0, 1}); }}});
  r.add("transpose", {{"negative axes", {input({2, 3, 4})}, [](const Inputs& x) { return transpose(x[0], -1, 0); }}});
  r.add("narrow", {{"middle", {input({3, 5})}, [](const Inputs& x) { return narrow(x[0], 1, 1, 3); }},
                   {"negative start", {gc::transposed({4, 3})}, [](const Inputs& x) { return narrow(x[0], 0, -2, 2); }}});
  r.add("select", {{"axis 1", {input({3, 4})}, [](const Inputs& x) { return select(x[0], 1, 2); }},
                   {"negative index", {input({3, 4})}, [](const Inputs& x) { return select(x[0], 0, -1); }}});
  r.add("expand", {{"broadcast rows and a new axis", {input({3, 1})},
                    [](const Inputs& x) { return mul(expand(x[0], {2, 3, 4}), gc::fixed({2, 3, 4})); }}});
  r.add("squeeze", {{"axis 1", {input({3, 1, 2})}, [](const Inputs& x) { return squeeze(x[0], 1); }}});
  r.add("unsqueeze", {{"last", {input({3, 2})}, [](const Inputs& x) { return unsqueeze(x[0], -1); }}});
}

}  // namespace autograd
}  // namespace mvgpt
