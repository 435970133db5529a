// Elementwise ops (unary, scalar, binary with broadcasting), each forward beside its backward.
#include <cmath>

#include <mvgpt/autograd/op_impl.h>
#include <mvgpt/backends/elementwise_math.h>

namespace mvgpt {

namespace {

// y = f(x) for a row of backends/unary_ops.h, recorded with the row's derivative: grad * f'(x) in one
// fused pass, or, when f' is a constant, grad times that constant with nothing saved.
Tensor unary_op(UnaryOp op, const Tensor& x, double s) {
  const InternalOps internal;
  Tensor y = ops::unary(op, x, s);
  if (!needs_grad(x)) return y;
  const char* name = unary_op_name(op);
  if (unary_op_info(op).grad == UnaryGrad::constant) {
    const double d = math::unary_derivative(op, 0.0, s);
    return record(name, std::move(y), {edge_to(x)}, [d](const Tensor& g) -> Grads {
      return {d == 1 ? g : ops::mul(g, d)};
    });
  }
  return record(name, std::move(y), {edge_to(x)}, [op, s, name, saved = SavedTensor(x)](const Tensor& g) -> Grads {
    return {ops::unary_backward(op, saved.unpack(name), g, s)};
  });
}

}  // namespace

// --- unary: neg, exp, ... one per row of backends/unary_ops.h called with x alone ---
#define MVGPT_UNARY_FUNCTION(name) \
  Tensor name(const Tensor& x) { return unary_op(UnaryOp::name, x, 0); }
MVGPT_UNARY_FUNCTIONS()
#undef MVGPT_UNARY_FUNCTION

// --- the rows that take a scalar, under their PyTorch-style names ---
Tensor pow(const Tensor& x, double exponent) { return unary_op(UnaryOp::pow_scalar, x, exponent); }
Tensor add(const Tensor& x, double s) { return unary_op(UnaryOp::add_scalar, x, s); }
Tensor mul(const Tensor& x, double s) { return unary_op(UnaryOp::mul_scalar, x, s); }
Tensor rsub(const Tensor& x, double s) { return unary_op(UnaryOp::rsub_scalar, x, s); }
Tensor rdiv(const Tensor& x, double s) { return unary_op(UnaryOp::rdiv_scalar, x, s); }

// --- binary: gradients are computed at the broadcast shape and summed back to each input's ---

Tensor add(const Tensor& a, const Tensor& b) {
  const InternalOps internal;
  Tensor y = ops::add(a, b);
  if (!needs_grad(a, b)) return y;
  return record("add", std::move(y), {edge_to(a), edge_to(b)},
                [sa = a.shape(), sb = b.shape()](const Tensor& g) -> Grads {
                  return {ops::sum_to(g, sa), ops::sum_to(g, sb)};
                });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  const InternalOps internal;
  Tensor y = ops::sub(a, b);
  if (!needs_grad(a, b)) return y;
  bool need_b = b.requires_grad();
  return record("sub", std::move(y), {edge_to(a), edge_to(b)},
                [sa = a.shape(), sb = b.shape(), need_b](const Tensor& g) -> Grads {
                  return {ops::sum_to(g, sa), need_b ? ops::neg(ops::sum_to(g, sb)) : Tensor()};
                });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  const InternalOps internal;
  Tensor y = ops::mul(a, b);
  if (!needs_grad(a, b)) return y;
  // Each input's gradient needs the other input; save only what will be used.
  SavedTensor saved_a(b.requires_grad() ? a : Tensor()), saved_b(a.requires_grad() ? b : Tensor());
  return record("mul", std::move(y), {edge_to(a), edge_to(b)},
                [saved_a, saved_b, sa = a.shape(), sb = b.shape()](const Tensor& g) -> Grads {
                  Tensor da, db;
                  if (saved_b.defined()) da = ops::sum_to(ops::mul(g, saved_b.unpack("mul")), sa);
                  if (saved_a.defined()) db = ops::sum_to(ops::mul(g, saved_a.unpack("mul")), sb);
                  return {da, db};
                });
}

Tensor div(const Tensor& a, const Tensor& b) {
  const InternalOps internal;
  Tensor y = ops::div(a, b);
  if (!needs_grad(a, b)) return y;
  bool need_a = a.requires_grad();
  SavedTensor saved_a(b.requires_grad() ? a : Tensor()), saved_b(b);
  // d(a/b)/da = 1/b, d(a/b)/db = -a/b^2
  return record("div", std::move(y), {edge_to(a), edge_to(b)},
                [saved_a, saved_b, need_a, sa = a.shape(), sb = b.shape()](const Tensor& g) -> Grads {
                  Tensor b = saved_b.unpack("div");
                  Tensor da, db;
                  if (need_a) da = ops::sum_to(ops::div(g, b), sa);
                  if (saved_a.defined())
                    db = ops::sum_to(ops::neg(ops::div(ops::mul(g, saved_a.unpack("div")), ops::square(b))), sb);
                  return {da, db};
                });
}

// maximum/minimum: a gets weight 1 where it wins, 0 where it loses and 1/2 on ties; b the rest.
static Tensor extremum(const char* op, Tensor y, const Tensor& a, const Tensor& b, bool is_max) {
  return record(op, std::move(y), {edge_to(a), edge_to(b)},
                [op, is_max, sa_ = SavedTensor(a), sb_ = SavedTensor(b), sa = a.shape(), sb = b.shape()](
                    const Tensor& g) -> Grads {
                  Tensor s = ops::sign(ops::sub(sa_.unpack(op), sb_.unpack(op)));  // +1 where a > b
                  Tensor wa = ops::mul(is_max ? ops::add(s, 1.0) : ops::unary(UnaryOp::rsub_scalar, s, 1.0), 0.5);
                  Tensor ga = ops::mul(g, wa);
                  return {ops::sum_to(ga, sa), ops::sum_to(ops::sub(g, ga), sb)};
                });
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  const InternalOps internal;
  Tensor y = ops::maximum(a, b);
  return needs_grad(a, b) ? extremum("maximum", std::move(y), a, b, true) : y;
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  const InternalOps internal;
  Tensor y = ops::minimum(a, b);
  return needs_grad(a, b) ? extremum("minimum", std::move(y), a, b, false) : y;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const InternalOps internal;
  Tensor y = ops::where(cond, a, b);
  if (!needs_grad(a, b)) return y;
  return record("where", std::move(y), {edge_to(a), edge_to(b)},
                [c = SavedTensor(cond), sa = a.shape(), sb = b.shape()](const Tensor& g) -> Grads {
                  Tensor cond = c.unpack("where"), zero = autograd::scalar_like(g, 0);
                  return {ops::sum_to(ops::where(cond, g, zero), sa), ops::sum_to(ops::where(cond, zero, g), sb)};
                });
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  const InternalOps internal;
  Tensor y = ops::masked_fill(x, mask, value);
  if (!needs_grad(x)) return y;
  return record("masked_fill", std::move(y), {edge_to(x)},
                [m = SavedTensor(mask), sx = x.shape()](const Tensor& g) -> Grads {
                  return {ops::sum_to(ops::masked_fill(g, m.unpack("masked_fill"), 0.0), sx)};
                });
}

// --- operators ---

Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& x, double s) { return add(x, s); }
Tensor operator-(const Tensor& x, double s) { return add(x, -s); }
Tensor operator*(const Tensor& x, double s) { return mul(x, s); }
Tensor operator/(const Tensor& x, double s) { return mul(x, 1.0 / s); }
Tensor operator+(double s, const Tensor& x) { return add(x, s); }
Tensor operator-(double s, const Tensor& x) { return rsub(x, s); }
Tensor operator*(double s, const Tensor& x) { return mul(x, s); }
Tensor operator/(double s, const Tensor& x) { return rdiv(x, s); }

// --- gradient checks ---

namespace autograd {

void register_elementwise_gradchecks(OpRegistry& r) {
  using gc::input;
  using gc::positive;
  // Every row of unary_ops.h called with x alone, sampled where the row says (its domain).
  for (const UnaryOpInfo& info : kUnaryOps) {
    if (info.call != UnaryCall::x) continue;
    const InputSpec spec = info.domain == UnaryDomain::positive  ? positive({2, 3})
                           : info.domain == UnaryDomain::nonzero ? gc::away_from_zero({2, 3})
                                                                 : input({2, 3}, -2, 2);
    r.add(info.name, {{"contiguous", {spec}, [op = info.op](const Inputs& x) { return unary_op(op, x[0], 0); }}});
  }
  // The same ops on non-contiguous inputs.
  r.add("exp", {{"transposed", {gc::transposed({3, 4})}, [](const Inputs& x) { return exp(x[0]); }}});
  r.add("relu", {{"sliced", {gc::sliced({2, 4})}, [](const Inputs& x) { return relu(x[0] * 2.0 + 0.05); }}});
  r.add("gelu", {{"transposed", {gc::transposed({3, 2})}, [](const Inputs& x) { return gelu(x[0]); }}});
  r.add("gelu_erf", {{"transposed", {gc::transposed({3, 2})}, [](const Inputs& x) { return gelu_erf(x[0]); }}});
  r.add("pow", {{"cube", {input({2, 3})}, [](const Inputs& x) { return pow(x[0], 3.0); }},
                {"fractional, sliced", {gc::sliced({2, 3}, 0.5, 2)}, [](const Inputs& x) { return pow(x[0], 1.5); }}});
  r.add("add", {{"tensor + scalar", {input({2, 3})}, [](const Inputs& x) { return x[0] + 1.5; }},
                {"tensor + tensor, broadcast", {input({2, 3}), input({3})}, [](const Inputs& x) { return x[0] + x[1]; }},
                {"scalar + transposed, both broadcast", {gc::transposed({3, 1}), input({1, 4})},
                 [](const Inputs& x) { return add(x[0], x[1]) + 2.0; }}});
  r.add("sub", {{"broadcast", {input({2, 1, 3}), input({4, 1})}, [](const Inputs& x) { return x[0] - x[1]; }},
                {"same tensor", {input({3})}, [](const Inputs& x) { return (x[0] * 3.0) - x[0]; }}});
  r.add("mul", {{"tensor * scalar", {gc::transposed({2, 3})}, [](const Inputs& x) { return 2.5 * x[0]; }},
                {"broadcast", {input({2, 3}), gc::sliced({2, 1})}, [](const Inputs& x) { return x[0] * x[1]; }},
                {"x * x", {input({4})}, [](const Inputs& x) { return x[0] * x[0]; }}});
  r.add("div", {{"broadcast", {input({2, 3}), positive({3})}, [](const Inputs& x) { return x[0] / x[1]; }},
                {"by scalar", {input({3})}, [](const Inputs& x) { return x[0] / 4.0 - 1.0; }}});
  r.add("rsub", {{"scalar - tensor", {input({2, 2})}, [](const Inputs& x) { return 3.0 - x[0]; }}});
  r.add("rdiv", {{"scalar / tensor", {positive({2, 2})}, [](const Inputs& x) { return 3.0 / x[0]; }}});
  r.add("maximum", {{"broadcast, no ties", {gc::distinct({2, 3}), gc::distinct({3}, 0.03)},
                     [](const Inputs& x) { return maximum(x[0], x[1]); }}});
  r.add("minimum", {{"no ties", {gc::distinct({2, 3}), gc::transposed({2, 3})},
                     [](const Inputs& x) { return minimum(x[0], x[1] * 0.5); }}});
  r.add("where", {{"broadcast", {input({2, 3}), input({3})}, [](const Inputs& x) {
                     Tensor cond = ops::gt(gc::fixed({2, 3}), autograd::scalar_like(x[0], 0));
                     return where(cond, x[0], x[1]);
                   }}});
  r.add("masked_fill", {{"broadcast mask", {gc::transposed({3, 2})}, [](const Inputs& x) {
                           Tensor mask = ops::gt(gc::fixed({2}), autograd::scalar_like(x[0], 0));
                           return masked_fill(x[0], mask, -7.0);
                         }}});
}

}  // namespace autograd
}  // namespace mvgpt
