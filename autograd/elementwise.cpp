// Elementwise ops (unary, scalar, binary with broadcasting), each forward beside its backward.
#include <cmath>

#include <mvgpt/autograd/op_impl.h>

namespace mvgpt {

namespace {

Tensor sign(const Tensor& x) { return ops::unary(UnaryOp::sign, x); }
Tensor one_minus(const Tensor& x) { return ops::unary(UnaryOp::rsub_scalar, x, 1.0); }

// A unary op whose backward needs only g and one saved tensor (the input or the output).
template <class F>
Tensor unary_saving(const char* op, Tensor y, const Tensor& x, const Tensor& saved, F grad_of) {
  return record(op, std::move(y), {edge_to(x)}, [op, s = SavedTensor(saved), grad_of](const Tensor& g) -> Grads {
    return {grad_of(g, s.unpack(op))};
  });
}

// y = raw(x), recorded with a backward that needs the output y or the input x.
enum class Saves : bool { input, output };
template <class F>
Tensor unary(const char* op, const Tensor& x, Tensor (*raw)(const Tensor&), Saves saves, F grad_of) {
  const InternalOps internal;
  Tensor y = raw(x);
  if (!needs_grad(x)) return y;
  const Tensor saved = saves == Saves::output ? y : x;
  return unary_saving(op, std::move(y), x, saved, grad_of);
}

}  // namespace

// --- unary ---

Tensor neg(const Tensor& x) {
  const InternalOps internal;
  Tensor y = ops::neg(x);
  if (!needs_grad(x)) return y;
  return record("neg", std::move(y), {edge_to(x)}, [](const Tensor& g) -> Grads { return {ops::neg(g)}; });
}

Tensor exp(const Tensor& x) {
  return unary("exp", x, ops::exp, Saves::output, [](const Tensor& g, const Tensor& y) { return ops::mul(g, y); });
}

Tensor log(const Tensor& x) {
  return unary("log", x, ops::log, Saves::input, [](const Tensor& g, const Tensor& x) { return ops::div(g, x); });
}

Tensor sqrt(const Tensor& x) {
  // d sqrt(x) = 1 / (2 sqrt(x))
  return unary("sqrt", x, ops::sqrt, Saves::output,
               [](const Tensor& g, const Tensor& y) { return ops::div(ops::mul(g, 0.5), y); });
}

Tensor rsqrt(const Tensor& x) {
  // d x^(-1/2) = -x^(-3/2) / 2 = -y^3 / 2
  return unary("rsqrt", x, ops::rsqrt, Saves::output,
               [](const Tensor& g, const Tensor& y) { return ops::mul(ops::mul(g, ops::pow(y, 3)), -0.5); });
}

Tensor tanh(const Tensor& x) {
  return unary("tanh", x, ops::tanh, Saves::output,
               [](const Tensor& g, const Tensor& y) { return ops::mul(g, one_minus(ops::square(y))); });
}

Tensor sigmoid(const Tensor& x) {
  return unary("sigmoid", x, ops::sigmoid, Saves::output,
               [](const Tensor& g, const Tensor& y) { return ops::mul(g, ops::mul(y, one_minus(y))); });
}

Tensor relu(const Tensor& x) {
  // y > 0 exactly where x > 0, so the output serves; at x = 0 the gradient is 0.
  return unary("relu", x, ops::relu, Saves::output, [](const Tensor& g, const Tensor& y) {
    return ops::masked_fill(g, ops::le(y, autograd::scalar_like(y, 0)), 0.0);
  });
}

Tensor gelu(const Tensor& x) {
  // y = x/2 (1 + tanh(u)), u = c (x + a x^3): dy/dx = (1 + t)/2 + x/2 (1 - t^2) c (1 + 3 a x^2), t = tanh(u),
  // in one fused pass (the composed form is the test's reference).
  return unary("gelu", x, ops::gelu, Saves::input,
               [](const Tensor& g, const Tensor& x) { return ops::gelu_backward(x, g); });
}

Tensor gelu_erf(const Tensor& x) {
  // y = x Phi(x): dy/dx = Phi(x) + x phi(x), fused.
  return unary("gelu_erf", x, ops::gelu_erf, Saves::input,
               [](const Tensor& g, const Tensor& x) { return ops::gelu_erf_backward(x, g); });
}

Tensor silu(const Tensor& x) {
  // y = x s(x): dy/dx = s (1 + x (1 - s)), fused.
  return unary("silu", x, ops::silu, Saves::input,
               [](const Tensor& g, const Tensor& x) { return ops::silu_backward(x, g); });
}

Tensor abs(const Tensor& x) {
  return unary("abs", x, ops::abs, Saves::input, [](const Tensor& g, const Tensor& x) { return ops::mul(g, sign(x)); });
}

Tensor square(const Tensor& x) {
  return unary("square", x, ops::square, Saves::input,
               [](const Tensor& g, const Tensor& x) { return ops::mul(ops::mul(g, x), 2.0); });
}

Tensor pow(const Tensor& x, double exponent) {
  const InternalOps internal;
  Tensor y = ops::pow(x, exponent);
  if (!needs_grad(x)) return y;
  return unary_saving("pow", std::move(y), x, x, [exponent](const Tensor& g, const Tensor& x) {
    return ops::mul(ops::mul(g, ops::pow(x, exponent - 1)), exponent);
  });
}

Tensor add(const Tensor& x, double s) {
  const InternalOps internal;
  Tensor y = ops::add(x, s);
  if (!needs_grad(x)) return y;
  return record("add", std::move(y), {edge_to(x)}, [](const Tensor& g) -> Grads { return {g}; });
}

Tensor mul(const Tensor& x, double s) {
  const InternalOps internal;
  Tensor y = ops::mul(x, s);
  if (!needs_grad(x)) return y;
  return record("mul", std::move(y), {edge_to(x)}, [s](const Tensor& g) -> Grads { return {ops::mul(g, s)}; });
}

Tensor rsub(const Tensor& x, double s) {
  const InternalOps internal;
  Tensor y = ops::unary(UnaryOp::rsub_scalar, x, s);
  if (!needs_grad(x)) return y;
  return record("rsub", std::move(y), {edge_to(x)}, [](const Tensor& g) -> Grads { return {ops::neg(g)}; });
}

Tensor rdiv(const Tensor& x, double s) {
  const InternalOps internal;
  Tensor y = ops::unary(UnaryOp::rdiv_scalar, x, s);
  if (!needs_grad(x)) return y;
  // d (s / x) = -s / x^2
  return unary_saving("rdiv", std::move(y), x, x, [s](const Tensor& g, const Tensor& x) {
    return ops::mul(ops::div(g, ops::square(x)), -s);
  });
}

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
                  Tensor s = sign(ops::sub(sa_.unpack(op), sb_.unpack(op)));  // +1 where a > b
                  Tensor wa = ops::mul(is_max ? ops::add(s, 1.0) : one_minus(s), 0.5);
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
  auto unary = [&](const char* name, Tensor (*f)(const Tensor&), InputSpec spec) {
    r.add(name, {{"contiguous", {spec}, [f](const Inputs& x) { return f(x[0]); }}});
  };
  unary("neg", neg, input({2, 3}));
  unary("exp", exp, input({2, 3}));
  unary("log", log, positive({2, 3}));
  unary("sqrt", sqrt, positive({2, 3}));
  unary("rsqrt", rsqrt, positive({2, 3}));
  unary("tanh", tanh, input({2, 3}, -2, 2));
  unary("sigmoid", sigmoid, input({2, 3}, -3, 3));
  unary("relu", relu, gc::away_from_zero({2, 3}));
  unary("gelu", gelu, input({2, 3}, -3, 3));
  unary("gelu_erf", gelu_erf, input({2, 3}, -3, 3));
  unary("silu", silu, input({2, 3}, -3, 3));
  unary("abs", abs, gc::away_from_zero({2, 3}));
  unary("square", square, input({2, 3}));
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
