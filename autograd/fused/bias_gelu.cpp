// Bias + GELU: checks and dispatch, the slow reference, the backward, linear_gelu's choice, and the
// unit's cases (NOTE [ A fused op is one unit ] in unit.h). Kernels: bias_gelu_cpu.cpp, bias_gelu.cu.
#include <mvgpt/fused/bias_gelu.h>

#include <string>

#include <mvgpt/autograd/op_impl.h>  // record, edge_to, SavedTensor, InternalOps; the raw ops
#include <mvgpt/autograd/ops.h>        // gelu, linear: linear_gelu's and linear_gelu_linear's compositions
#include <mvgpt/autograd/precision.h>  // linear_gelu_linear's bf16 products
#include <mvgpt/fused/unit.h>

namespace mvgpt {
namespace fused {
namespace {

const BiasGeluKernels& kernels(Device d) {
  static const KernelsByDevice<BiasGeluKernels> table{"bias_gelu", bias_gelu_cpu_kernels(),
                                                      MVGPT_FUSED_CUDA_KERNELS(bias_gelu)};
  return table.on(d);
}

void check_bias_gelu(const char* op, const Tensor& x, const Tensor& bias) {
  require_floating(x, op, "x");
  require_defined(bias, op, "bias");
  require_floating(bias, op, "bias");
  require_device(bias, x, op, "bias");
  if (x.dim() < 1) fail(op, "x must have at least one axis, found a scalar");
  require_shape(bias, Shape{x.size(-1)}, op, "bias");
}

}  // namespace

Tensor bias_gelu_forward(const Tensor& x, const Tensor& bias) {
  const char* op = "bias_gelu";
  check_bias_gelu(op, x, bias);
  const DType cd = compute_dtype(x.dtype());
  Tensor out = Tensor::empty(x.shape(), cd, x.device());
  if (out.numel() > 0) {
    const profile::Span span("bias_gelu");
    kernels(x.device()).forward(prepared(x, cd), prepared(bias, cd), out);
  }
  return cast_back(out, x.dtype());
}

Tensor bias_gelu_backward(const Tensor& grad, const Tensor& x, const Tensor& bias) {
  const char* op = "bias_gelu_backward";
  check_bias_gelu(op, x, bias);
  check_grad_like(op, grad, x, "grad");
  const DType cd = compute_dtype(x.dtype());
  Tensor dx = Tensor::empty(x.shape(), cd, x.device());
  if (dx.numel() > 0) {
    const profile::Span span("bias_gelu backward");
    kernels(x.device()).backward(prepared(grad, cd), prepared(x, cd), prepared(bias, cd), dx);
  }
  return cast_back(dx, x.dtype());
}

namespace {
// x, or grad, as a kernel reads it: float32 or bfloat16 on the CPU; the CUDA kernels read float32,
// so a bfloat16 tensor is widened for them first (exact: the same values).
Tensor kernel_input(const Tensor& t, const char* op, const char* what) {
  if (t.dtype() != DType::f32 && t.dtype() != DType::bf16)
    fail(op, std::string(what) + " must be float32 or bfloat16, found " + std::string(dtype_name(t.dtype())));
  if (t.dtype() == DType::bf16 && !t.device().is_cpu()) return ops::to(t, DType::f32);
  return ops::contiguous(t);
}
}  // namespace

Tensor gelu_rounded(const Tensor& x) {
  const char* op = "gelu_rounded";
  require_defined(x, op, "x");
  Tensor out = Tensor::empty(x.shape(), DType::bf16, x.device());
  const Tensor xin = kernel_input(x, op, "x");
  if (out.numel() > 0) {
    const profile::Span span("gelu_rounded");
    kernels(x.device()).gelu_rounded(xin, out);
  }
  return out;
}

std::pair<Tensor, Tensor> gelu_backward_rounded(const Tensor& x, const Tensor& grad) {
  const char* op = "gelu_backward_rounded";
  require_defined(x, op, "x");
  const Tensor xin = kernel_input(x, op, "x");
  if (x.dim() != 2) fail(op, "x must be (N, C), found shape " + to_string(x.shape()));
  require_defined(grad, op, "grad");
  if (grad.shape() != x.shape() || grad.device() != x.device())
    fail(op, "grad must have x's shape " + to_string(x.shape()) + " and device, found " + to_string(grad.shape()) +
                 " on " + grad.device().str());
  const Tensor gin = kernel_input(grad, op, "grad");
  Tensor dx = Tensor::empty(x.shape(), DType::bf16, x.device());
  Tensor sums = Tensor::empty({x.size(1)}, DType::f32, x.device());
  if (x.size(1) > 0) {
    const profile::Span span("gelu_backward_rounded");
    kernels(x.device()).gelu_backward_rounded(xin, gin, dx, sums);
  }
  return {dx, sums};
}

namespace reference {
Tensor bias_gelu(const Tensor& x, const Tensor& bias) { return ops::gelu(ops::add(x, bias)); }
}  // namespace reference
}  // namespace fused

// ---------------------------------------------------------------- the differentiable ops

Tensor bias_gelu(const Tensor& x, const Tensor& bias) {
  const autograd::InternalOps internal;
  Tensor y = fused::bias_gelu_forward(x, bias);
  if (!needs_grad(x, bias)) return y;
  return record("bias_gelu", std::move(y), {edge_to(x), edge_to(bias)},
                [sx = SavedTensor(x), sb = SavedTensor(bias), bias_grad = bias.requires_grad()](const Tensor& g) -> Grads {
                  const Tensor x = sx.unpack("bias_gelu"), b = sb.unpack("bias_gelu");
                  Tensor dx = fused::bias_gelu_backward(g, x, b);
                  Tensor db;
                  if (bias_grad) {  // summed over every axis but the last (rows counted: C may be 0)
                    const int64_t rows = numel(fused::rows_shape(dx));
                    db = ops::to(ops::sum(ops::reshape(dx, {rows, b.numel()}), {0}), b.dtype());
                  }
                  return {dx, db};
                });
}

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (!bias.defined() || fused::kernels(x.device()).bias_in_product) return gelu(linear(x, weight, bias));
  return bias_gelu(linear(x, weight, Tensor()), bias);
}

Tensor mlp_hidden_gelu(const Tensor& pre, const Tensor& weight) {
  if (!autograd::detail::bf16_products(pre, weight)) return gelu(pre);
  const auto r = [](const Tensor& t) { return to(to(t, DType::bf16), t.dtype()); };
  return r(gelu(r(pre)));
}

Tensor linear_gelu_linear(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2) {
  // Shapes the layers would refuse take the composition, for its messages; so does a hidden width of
  // 1, whose bias sum ops::sum adds in another order (as a row, not columns).
  const bool fits = x.dim() >= 1 && w1.dim() == 2 && w2.dim() == 2 && x.size(-1) == w1.size(1) &&
                    w2.size(1) == w1.size(0) && w1.size(0) > 1 && x.device() == w1.device() &&
                    x.device() == w2.device();
  if (!autograd::detail::bf16_products(x, w1) || !autograd::detail::bf16_products(x, w2))
    return linear(linear_gelu(x, w1, b1), w2, b2);
  if (!fits) return linear(mlp_hidden_gelu(linear(x, w1, b1), w1), w2, b2);
  const autograd::InternalOps internal;
  const int64_t in = w1.size(1), hidden = w1.size(0), out = w2.size(0);
  // The forward of linear, gelu and linear under bf16 products (autograd/linalg.cpp), with the hidden
  // activations in bfloat16 as autocast keeps them (NOTE [ The MLP's activations in bf16 ] in
  // bias_gelu.h): the first product writes its result rounded, the GELU reads and rounds it.
  Tensor xb = autograd::detail::product_operand(x);     // (..., in) bfloat16
  Tensor w1b = autograd::detail::product_operand(w1);   // (hidden, in)
  Tensor w2b = autograd::detail::product_operand(w2);   // (out, hidden)
  Tensor pre = ops::linear(xb, w1b, b1, DType::bf16);     // (..., hidden) bfloat16
  Tensor h = fused::gelu_rounded(pre);                    // (..., hidden) bfloat16
  Tensor y = ops::linear(h, w2b, b2, DType::f32);         // (..., out)
  if (!needs_grad(x, w1, b1, w2, b2)) return y;
  const bool need_w1 = w1.requires_grad(), need_x = x.requires_grad();
  const bool need_b1 = b1.defined() && b1.requires_grad(), need_b2 = b2.defined() && b2.requires_grad();
  // Below the first layer's outputs a gradient is needed for x, w1 or b1.
  const bool below = need_x || need_w1 || need_b1;
  return record(
      "linear_gelu_linear", std::move(y), {edge_to(x), edge_to(w1), edge_to(b1), edge_to(w2), edge_to(b2)},
      [sx = SavedTensor(need_w1 ? xb : Tensor()), sw1 = SavedTensor(need_x ? w1b : Tensor()),
       spre = SavedTensor(below ? pre : Tensor()), sh = SavedTensor(w2.requires_grad() ? h : Tensor()),
       sw2 = SavedTensor(below ? w2b : Tensor()), need_b1, need_b2, shape = x.shape(), in, hidden, out,
       dx_dtype = autograd::detail::gradient_dtype(x.dtype(), DType::f32)](const Tensor& grad) -> Grads {
        const int64_t rows = numel(fused::rows_shape(grad));
        // The second layer: as linear's backward.
        Tensor g = ops::reshape(grad, {rows, out});  // (N, out)
        auto [gp, db2] = autograd::detail::linear_gradient(g, /*bf16=*/true, sh.defined() || spre.defined(), need_b2);
        Tensor dx, dw1, db1, dw2;
        if (!gp.defined()) return {dx, dw1, db1, dw2, db2};
        if (sh.defined())  // (out, N) @ (N, hidden)
          dw2 = ops::matmul(ops::transpose(gp, 0, 1), ops::reshape(sh.unpack("linear_gelu_linear"), {rows, hidden}),
                            DType::f32);
        if (!spre.defined()) return {dx, dw1, db1, dw2, db2};
        Tensor dh = ops::matmul(gp, sw2.unpack("linear_gelu_linear"), DType::bf16);  // (N, hidden) bfloat16
        // The GELU's backward, already the first layer's rounded operand, and its bias gradient.
        auto [dpre, sums] =
            fused::gelu_backward_rounded(ops::reshape(spre.unpack("linear_gelu_linear"), {rows, hidden}), dh);
        if (need_b1) db1 = sums;
        if (sw1.defined())  // (N, hidden) @ (hidden, in)
          dx = ops::reshape(ops::matmul(dpre, sw1.unpack("linear_gelu_linear"), dx_dtype), shape);  // x's dtype
        if (sx.defined())  // (hidden, N) @ (N, in)
          dw1 = ops::matmul(ops::transpose(dpre, 0, 1), ops::reshape(sx.unpack("linear_gelu_linear"), {rows, in}),
                            DType::f32);
        return {dx, dw1, db1, dw2, db2};
      });
}

// ---------------------------------------------------------------- the unit's cases

namespace fused {
namespace {

void add_gradchecks(autograd::OpRegistry& r) {
  using autograd::Inputs;
  namespace gc = autograd::gc;
  r.add("bias_gelu", {{"(B, T, C) and a bias", {gc::input({2, 3, 4}), gc::input({4})},
                       [](const Inputs& x) { return mvgpt::bias_gelu(x[0], x[1]); }},
                      {"transposed rows, sliced bias", {gc::transposed({3, 5}), gc::sliced({5})},
                       [](const Inputs& x) { return mvgpt::bias_gelu(x[0], x[1]); }}});
  r.add("linear_gelu", {{"with bias", {gc::input({2, 3}), gc::input({4, 3}), gc::input({4})},
                         [](const Inputs& x) { return mvgpt::linear_gelu(x[0], x[1], x[2]); }},
                        {"no bias", {gc::input({2, 3}), gc::input({4, 3})},
                         [](const Inputs& x) { return mvgpt::linear_gelu(x[0], x[1], Tensor()); }}});
  r.add("linear_gelu_linear",
        {{"(B, T, C) with biases",
          {gc::input({2, 3, 4}), gc::input({5, 4}), gc::input({5}), gc::input({3, 5}), gc::input({3})},
          [](const Inputs& x) { return mvgpt::linear_gelu_linear(x[0], x[1], x[2], x[3], x[4]); }},
         {"no biases, transposed input", {gc::transposed({3, 4}), gc::input({6, 4}), gc::input({2, 6})},
          [](const Inputs& x) { return mvgpt::linear_gelu_linear(x[0], x[1], Tensor(), x[2], Tensor()); }}});
}

std::vector<DeviceCase> device_cases() {
  return {{"bias_gelu", [](Device d) {
    std::vector<Tensor> r;
    for (DType dt : {DType::f32, DType::f64}) {
      // Rows of the MLP's width, and a 3-d view with gaps (transposed).
      Tensor x = uniform_on(d, {37, 96}, dt, 81, -4, 4), b = uniform_on(d, {96}, dt, 82);
      Tensor xv = ops::transpose(uniform_on(d, {5, 2, 12}, dt, 83, -4, 4), 0, 1), bv = uniform_on(d, {12}, dt, 84);
      for (auto [xi, bi] : {std::pair{x, b}, std::pair{xv, bv}}) {
        r.push_back(bias_gelu_forward(xi, bi));
        r.push_back(bias_gelu_backward(uniform_on(d, xi.shape(), dt, 85), xi, bi));
      }
    }
    return r;
  }, {"forward", "backward"}, 2e-6},
          // bfloat16 results widened to compare: a GELU one float32 ulp apart may round a bfloat16 ulp apart.
          {"gelu_rounded", [](Device d) {
    Tensor x = uniform_on(d, {37, 96}, DType::f32, 86, -6, 6);
    Tensor xv = ops::transpose(uniform_on(d, {5, 2, 12}, DType::f32, 87, -6, 6), 0, 1);
    return std::vector<Tensor>{ops::to(gelu_rounded(x), DType::f32), ops::to(gelu_rounded(xv), DType::f32)};
  }, {"gelu_rounded"}, 8e-3},
          // Rows over several of the CPU's sum blocks, columns with a tail; sums of up to 150 terms.
          {"gelu_backward_rounded", [](Device d) {
    Tensor x = uniform_on(d, {150, 37}, DType::f32, 88, -6, 6), g = uniform_on(d, {150, 37}, DType::f32, 89);
    auto [dx, sums] = gelu_backward_rounded(x, g);
    return std::vector<Tensor>{ops::to(dx, DType::f32), sums};
  }, {"gelu_backward_rounded"}, 8e-3}};
}

}  // namespace

Unit bias_gelu_unit() {
  return {"bias_gelu", {"forward", "backward", "gelu_rounded", "gelu_backward_rounded"}, add_gradchecks, device_cases};
}

}  // namespace fused
}  // namespace mvgpt
