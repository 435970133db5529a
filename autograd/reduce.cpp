// Reductions and softmax, each forward beside its backward.
#include <mvgpt/autograd/op_impl.h>

namespace mvgpt {

namespace {

// x's shape with the reduced axes kept as size 1 (all axes when `axes` is empty).
Shape keepdim_shape(const Shape& in, const Axes& axes, const char* op) {
  Shape s = in;
  if (axes.empty()) {
    for (int d = 0; d < s.size(); ++d) s[d] = 1;
    return s;
  }
  for (int a : axes) s[normalize_axis(a, in.size(), op)] = 1;
  return s;
}

// A reduced tensor (keepdim or not) viewed with the reduced axes kept, then broadcast to `in`.
Tensor unreduce(const Tensor& t, const Shape& kept, const Shape& in) {
  return ops::expand(ops::reshape(t, kept), in);
}

// max/min: the gradient goes to the positions equal to the result, split evenly among ties.
Tensor record_extremum(const char* op, Tensor y, const Tensor& x, const Axes& axes) {
  Shape in = x.shape(), kept = keepdim_shape(in, axes, op);
  Tensor out = y;
  return record(op, std::move(y), {edge_to(x)},
                [op, in, kept, axes, sx = SavedTensor(x), sy = SavedTensor(out)](const Tensor& g) -> Grads {
                  Tensor x = sx.unpack(op);
                  Tensor hit = ops::to(ops::eq(x, unreduce(sy.unpack(op), kept, in)), x.dtype());
                  Tensor count = ops::sum(hit, axes, /*keepdim=*/true);
                  return {ops::mul(hit, ops::div(ops::reshape(g, kept), count))};
                });
}

}  // namespace

Tensor sum(const Tensor& x, const Axes& axes, bool keepdim) {
  const InternalOps internal;
  Tensor y = ops::sum(x, axes, keepdim);
  if (!needs_grad(x)) return y;
  Shape in = x.shape(), kept = keepdim_shape(in, axes, "sum");
  return record("sum", std::move(y), {edge_to(x)},
                [in, kept](const Tensor& g) -> Grads { return {unreduce(g, kept, in)}; });
}

Tensor mean(const Tensor& x, const Axes& axes, bool keepdim) {
  const InternalOps internal;
  Tensor y = ops::mean(x, axes, keepdim);
  if (!needs_grad(x)) return y;
  Shape in = x.shape(), kept = keepdim_shape(in, axes, "mean");
  const int64_t reduced = numel(kept) ? numel(in) / numel(kept) : 0;
  const double scale = reduced ? 1.0 / double(reduced) : 0.0;
  return record("mean", std::move(y), {edge_to(x)}, [in, kept, scale](const Tensor& g) -> Grads {
    return {unreduce(ops::mul(g, scale), kept, in)};
  });
}

Tensor max(const Tensor& x, const Axes& axes, bool keepdim) {
  const InternalOps internal;
  Tensor y = ops::max(x, axes, keepdim);
  return needs_grad(x) ? record_extremum("max", std::move(y), x, axes) : y;
}

Tensor min(const Tensor& x, const Axes& axes, bool keepdim) {
  const InternalOps internal;
  Tensor y = ops::min(x, axes, keepdim);
  return needs_grad(x) ? record_extremum("min", std::move(y), x, axes) : y;
}

Tensor logsumexp(const Tensor& x, const Axes& axes, bool keepdim) {
  const InternalOps internal;
  Tensor y = ops::logsumexp(x, axes, keepdim);
  if (!needs_grad(x)) return y;
  Shape in = x.shape(), kept = keepdim_shape(in, axes, "logsumexp");
  Tensor out = y;
  // d lse / dx = exp(x - lse) = softmax over the reduced axes.
  return record("logsumexp", std::move(y), {edge_to(x)},
                [in, kept, sx = SavedTensor(x), sy = SavedTensor(out)](const Tensor& g) -> Grads {
                  Tensor p = ops::exp(ops::sub(sx.unpack("logsumexp"), ops::reshape(sy.unpack("logsumexp"), kept)));
                  return {ops::mul(p, ops::reshape(g, kept))};
                });
}

Tensor softmax(const Tensor& x, int axis) {
  const InternalOps internal;
  Tensor y = ops::softmax(x, axis);
  if (!needs_grad(x)) return y;
  Tensor out = y;
  // dx = y (g - sum(g y))
  return record("softmax", std::move(y), {edge_to(x)}, [axis, sy = SavedTensor(out)](const Tensor& g) -> Grads {
    Tensor y = sy.unpack("softmax");
    Tensor dot = ops::sum(ops::mul(g, y), {axis}, /*keepdim=*/true);
    return {ops::mul(y, ops::sub(g, dot))};
  });
}

Tensor log_softmax(const Tensor& x, int axis) {
  const InternalOps internal;
  Tensor y = ops::log_softmax(x, axis);
  if (!needs_grad(x)) return y;
  Tensor out = y;
  // dx = g - exp(y) sum(g)
  return record("log_softmax", std::move(y), {edge_to(x)}, [axis, sy = SavedTensor(out)](const Tensor& g) -> Grads {
    Tensor total = ops::sum(g, {axis}, /*keepdim=*/true);
    return {ops::sub(g, ops::mul(ops::exp(sy.unpack("log_softmax")), total))};
  });
}

// --- gradient checks ---

namespace autograd {

void register_reduce_gradchecks(OpRegistry& r) {
  using gc::input;
  r.add("sum", {{"all", {input({2, 3})}, [](const Inputs& x) { return sum(x[0]); }},
                {"axis 1 keepdim, transposed", {gc::transposed({3, 4})},
                 [](const Inputs& x) { return sum(x[0], {1}, true); }},
                {"axes 0 and 2", {input({2, 3, 2})}, [](const Inputs& x) { return sum(x[0], {0, -1}); }}});
  r.add("mean", {{"all", {input({2, 3})}, [](const Inputs& x) { return mean(x[0]); }},
                 {"axis 0, sliced", {gc::sliced({3, 2})}, [](const Inputs& x) { return mean(x[0], {0}); }}});
  r.add("max", {{"axis 1", {gc::distinct({3, 4})}, [](const Inputs& x) { return max(x[0], {1}); }},
                {"all keepdim", {gc::distinct({2, 3})}, [](const Inputs& x) { return max(x[0], {}, true); }}});
  r.add("min", {{"axis 0, transposed", {gc::transposed({3, 4})}, [](const Inputs& x) { return min(x[0], {0}); }},
                {"axes 0 and 1", {gc::distinct({2, 2, 3})}, [](const Inputs& x) { return min(x[0], {0, 1}); }}});
  r.add("logsumexp", {{"axis -1", {input({2, 4}, -2, 2)}, [](const Inputs& x) { return logsumexp(x[0], {-1}); }},
                      {"all keepdim, transposed", {gc::transposed({3, 2})},
                       [](const Inputs& x) { return logsumexp(x[0], {}, true); }}});
  r.add("softmax", {{"last axis", {input({2, 4}, -2, 2)}, [](const Inputs& x) { return softmax(x[0], -1); }},
                    {"axis 0, transposed", {gc::transposed({3, 4})}, [](const Inputs& x) { return softmax(x[0], 0); }}});
  r.add("log_softmax", {{"last axis", {input({2, 5}, -2, 2)}, [](const Inputs& x) { return log_softmax(x[0]); }},
                        {"middle axis, sliced", {gc::sliced({2, 3, 2})},
                         [](const Inputs& x) { return log_softmax(x[0], 1); }}});
}

}  // namespace autograd
}  // namespace mvgpt
