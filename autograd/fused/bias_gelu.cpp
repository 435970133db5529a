// Bias + GELU: checks and dispatch, the slow reference, the backward, linear_gelu's choice, and the
// unit's cases (NOTE [ A fused op is one unit ] in unit.h). Kernels: bias_gelu_cpu.cpp, bias_gelu.cu.
#include <mvgpt/fused/bias_gelu.h>

#include <string>

#include <mvgpt/autograd/op_impl.h>  // record, edge_to, SavedTensor, InternalOps; the raw ops
#include <mvgpt/autograd/ops.h>      // gelu, linear: linear_gelu's and gelu_linear's compositions
#include <mvgpt/autograd/precision.h>  // gelu_linear's bf16 products
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

Tensor gelu_rounded(const Tensor& x) {
  const char* op = "gelu_rounded";
  require_floating(x, op, "x");
  if (x.dtype() != DType::f32) fail(op, std::string("x must be float32, found ") + std::string(dtype_name(x.dtype())));
  Tensor out = Tensor::empty(x.shape(), DType::bf16, x.device());
  if (out.numel() > 0) {
    const profile::Span span("gelu_rounded");
    kernels(x.device()).gelu_rounded(ops::contiguous(x), out);
  }
  return out;
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

Tensor gelu_linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  // Shapes linear would refuse take the composition, for its message.
  const bool fits = x.dim() >= 1 && weight.dim() == 2 && x.size(-1) == weight.size(1) && x.device() == weight.device();
  if (!fits || !autograd::detail::bf16_products(x, weight)) return linear(gelu(x), weight, bias);
  const autograd::InternalOps internal;
  Tensor h = fused::gelu_rounded(x);                             // (..., in) bfloat16
  Tensor w = autograd::detail::product_operand(weight);        // (out, in) bfloat16
  Tensor y = ops::linear(h, w, bias, DType::f32);               // (..., out)
  if (!needs_grad(x, weight, bias)) return y;
  // The backward of linear and then of gelu, as the composition runs them (autograd/linalg.cpp).
  return record("gelu_linear", std::move(y), {edge_to(x), edge_to(weight), edge_to(bias)},
                [sx = SavedTensor(x.requires_grad() ? x : Tensor()), sh = SavedTensor(weight.requires_grad() ? h : Tensor()),
                 sw = SavedTensor(x.requires_grad() ? w : Tensor()), need_bias = bias.defined() && bias.requires_grad(),
                 shape = x.shape(), out = weight.size(0), in = weight.size(1)](const Tensor& grad) -> Grads {
                  const int64_t rows = numel(fused::rows_shape(grad));
                  Tensor g = ops::reshape(grad, {rows, out});  // (N, out)
                  Tensor gp = ops::to(g, DType::bf16);
                  Tensor dx, dw, db;
                  if (need_bias) db = ops::sum(g, {0});
                  if (sw.defined()) {
                    Tensor dh = ops::matmul(gp, sw.unpack("gelu_linear"), DType::f32);  // (N, in)
                    dx = ops::unary_backward(UnaryOp::gelu, ops::reshape(sx.unpack("gelu_linear"), {rows, in}), dh);
                    dx = ops::reshape(dx, shape);
                  }
                  if (sh.defined())  // (out, N) @ (N, in)
                    dw = ops::matmul(ops::transpose(gp, 0, 1), ops::reshape(sh.unpack("gelu_linear"), {rows, in}),
                                     DType::f32);
                  return {dx, dw, db};
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
  r.add("gelu_linear", {{"(B, T, C) with bias", {gc::input({2, 3, 4}), gc::input({5, 4}), gc::input({5})},
                         [](const Inputs& x) { return mvgpt::gelu_linear(x[0], x[1], x[2]); }},
                        {"no bias, transposed input", {gc::transposed({3, 4}), gc::input({2, 4})},
                         [](const Inputs& x) { return mvgpt::gelu_linear(x[0], x[1], Tensor()); }}});
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
  }, {"gelu_rounded"}, 8e-3}};
}

}  // namespace

Unit bias_gelu_unit() { return {"bias_gelu", {"forward", "backward", "gelu_rounded"}, add_gradchecks, device_cases}; }

}  // namespace fused
}  // namespace mvgpt
