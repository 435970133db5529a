// Matrix multiplication, forward beside backward. Under the bf16 policy (NOTE [ Precision policy ]
// in precision.h) both passes multiply bfloat16 operands and sum in float32.
#include <mvgpt/autograd/op_impl.h>
#include <mvgpt/autograd/precision.h>

namespace mvgpt {
namespace {

using autograd::detail::gradient_dtype;
using autograd::detail::in_gradient_dtype;
using autograd::detail::Product;

// The incoming gradient as the backward's products take it.
Tensor gradient_operand(const Tensor& g, bool bf16) { return bf16 ? ops::to(g, DType::bf16) : g; }

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  const InternalOps internal;
  const Product p(a, b);
  Tensor y = ops::matmul(p.a, p.b, p.out());
  if (!needs_grad(a, b)) return y;
  // Each input's gradient needs the other input.
  SavedTensor saved_a(b.requires_grad() ? p.a : Tensor()), saved_b(a.requires_grad() ? p.b : Tensor());
  return record("matmul", std::move(y), {edge_to(a), edge_to(b)},
                [saved_a, saved_b, sa = a.shape(), sb = b.shape(), bf16 = p.bf16, out = p.out(), ta = a.dtype(),
                 tb = b.dtype()](const Tensor& grad) -> Grads {
                  // Work with the 2-d-or-more forms: a (..., M, K), b (..., K, N), g (..., M, N); a 1-d
                  // a is (1, K) and a 1-d b is (K, 1), their added axis missing from g.
                  Tensor g = gradient_operand(grad, bf16);
                  if (sa.size() == 1) g = ops::unsqueeze(g, g.dim() - (sb.size() == 1 ? 0 : 1));
                  if (sb.size() == 1) g = ops::unsqueeze(g, -1);
                  Tensor da, db;
                  if (saved_b.defined()) {
                    Tensor b = saved_b.unpack("matmul");
                    if (b.dim() == 1) b = ops::unsqueeze(b, -1);
                    Tensor d = ops::matmul(g, ops::transpose(b, -1, -2), out);  // (..., M, K)
                    if (sa.size() == 1) d = ops::squeeze(d, -2);
                    da = in_gradient_dtype(ops::sum_to(d, sa), ta, out);  // rounded after the broadcast sum
                  }
                  if (saved_a.defined()) {
                    Tensor a = saved_a.unpack("matmul");
                    if (a.dim() == 1) a = ops::unsqueeze(a, 0);
                    Tensor d = ops::matmul(ops::transpose(a, -1, -2), g, out);  // (..., K, N)
                    if (sb.size() == 1) d = ops::squeeze(d, -1);
                    db = in_gradient_dtype(ops::sum_to(d, sb), tb, out);
                  }
                  return {da, db};
                });
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const InternalOps internal;
  const Product p(x, weight);
  Tensor y = ops::linear(p.a, p.b, bias, p.out());
  if (!needs_grad(x, weight, bias)) return y;
  SavedTensor saved_x(weight.requires_grad() ? p.a : Tensor()), saved_w(x.requires_grad() ? p.b : Tensor());
  const bool need_bias = bias.defined() && bias.requires_grad();
  return record("linear", std::move(y), {edge_to(x), edge_to(weight), edge_to(bias)},
                [saved_x, saved_w, need_bias, sx = x.shape(), out = weight.size(0), in = weight.size(1),
                 bf16 = p.bf16, dx_dtype = gradient_dtype(x.dtype(), p.out()),
                 dw_dtype = gradient_dtype(weight.dtype(), p.out())](const Tensor& grad) -> Grads {
                  int64_t rows = 1;
                  for (int d = 0; d + 1 < sx.size(); ++d) rows *= sx[d];
                  Tensor g = ops::reshape(grad, {rows, out});  // (N, out)
                  auto [gp, db] = autograd::detail::linear_gradient(g, bf16, saved_w.defined() || saved_x.defined(),
                                                                    need_bias);
                  Tensor dx, dw;
                  if (saved_w.defined())  // (N, out) @ (out, in)
                    dx = ops::reshape(ops::matmul(gp, saved_w.unpack("linear"), dx_dtype), sx);
                  if (saved_x.defined())  // (out, N) @ (N, in)
                    dw = ops::matmul(ops::transpose(gp, 0, 1), ops::reshape(saved_x.unpack("linear"), {rows, in}),
                                     dw_dtype);
                  return {dx, dw, db};
                });
}

// --- gradient checks ---

namespace autograd {

void register_linalg_gradchecks(OpRegistry& r) {
  using gc::input;
  auto mm = [](const Inputs& x) { return matmul(x[0], x[1]); };
  r.add("matmul", {{"2-d", {input({2, 3}), input({3, 4})}, mm},
                   {"transposed operands", {gc::transposed({2, 3}), gc::transposed({3, 2})}, mm},
                   {"batched with broadcast batch", {input({2, 1, 2, 3}), input({3, 3, 2})}, mm},
                   {"matrix @ vector", {input({2, 2, 3}), gc::sliced({3})}, mm},
                   {"vector @ batched matrix", {input({3}), input({2, 3, 2})}, mm},
                   {"vector @ vector", {input({4}), input({4})}, mm}});
  r.add("linear", {{"3-d input with bias", {input({2, 3, 4}), input({5, 4}), input({5})},
                    [](const Inputs& x) { return linear(x[0], x[1], x[2]); }},
                   {"no bias, transposed weight", {input({3, 4}), gc::transposed({2, 4})},
                    [](const Inputs& x) { return linear(x[0], x[1], Tensor()); }},
                   {"1-d input, sliced", {gc::sliced({4}), input({3, 4}), input({3})},
                    [](const Inputs& x) { return linear(x[0], x[1], x[2]); }}});
}

}  // namespace autograd
}  // namespace mvgpt
