// Layer norm and RMS norm: checks and dispatch, the slow reference, the backward, and the cases
// that test them (NOTE [ A fused op is one unit ] in unit.h). Kernels: norms_cpu.cpp, norms.cu.
#include <mvgpt/fused/norms.h>

#include <string>

#include <mvgpt/autograd/op_impl.h>  // record, edge_to, SavedTensor, InternalOps; the raw ops
#include <mvgpt/autograd/precision.h>
#include <mvgpt/fused/unit.h>

namespace mvgpt {
namespace fused {
namespace {

const NormKernels& kernels(Device d) {
  static const KernelsByDevice<NormKernels> table{"norms", norms_cpu_kernels(), MVGPT_FUSED_CUDA_KERNELS(norms)};
  return table.on(d);
}

// Checks x (..., C) and optional weight/bias (C) of a norm; returns C.
int64_t check_norm(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  require_floating(x, op, "x");
  if (x.dim() < 1) fail(op, "x must have at least one dimension, found a scalar");
  const int64_t C = x.size(-1);
  for (auto [t, what] : {std::pair{&weight, "weight"}, {&bias, "bias"}}) {
    if (!t->defined()) continue;
    require_floating(*t, op, what);
    require_device(*t, x, op, what);
    require_shape(*t, Shape{C}, op, what);
  }
  if (!(eps >= 0)) fail(op, "eps must be >= 0, found " + std::to_string(eps));
  return C;
}

void check_saved_stat(const char* op, const Tensor& stat, const Tensor& x, const char* what) {
  require_defined(stat, op, what);
  require_device(stat, x, op, what);
  require_shape(stat, rows_shape(x), op, what);
  if (stat.dtype() != compute_dtype(x.dtype()))
    fail(op, std::string("saved ") + what + " must be " + std::string(dtype_name(compute_dtype(x.dtype()))) +
                 ", found " + std::string(dtype_name(stat.dtype())));
}

}  // namespace

// ---------------------------------------------------------------- the raw ops

namespace {
// The layer norm kernel on x (checked) in its compute dtype, y written in y_dtype (the compute dtype,
// or bfloat16 for float32 x on a kernel that rounds).
NormResult layer_norm_kernel(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, DType y_dtype) {
  const DType cd = compute_dtype(x.dtype());
  NormResult r;
  r.y = Tensor::empty(x.shape(), y_dtype, x.device());
  r.mean = Tensor::empty(rows_shape(x), cd, x.device());
  r.rstd = Tensor::empty(rows_shape(x), cd, x.device());
  const profile::Span span("layer_norm");
  kernels(x.device()).layer_norm(prepared(x, cd), prepared(weight, cd), prepared(bias, cd), eps, r.y, r.mean, r.rstd);
  return r;
}
}  // namespace

NormResult layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  check_norm("layer_norm", x, weight, bias, eps);
  NormResult r = layer_norm_kernel(x, weight, bias, eps, compute_dtype(x.dtype()));
  r.y = cast_back(r.y, x.dtype());
  return r;
}

NormResult layer_norm_forward_rounded(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const char* op = "layer_norm";
  check_norm(op, x, weight, bias, eps);
  if (x.dtype() != DType::f32) fail(op, "a rounded output needs float32 x, found " + std::string(dtype_name(x.dtype())));
  if (x.device().is_cpu()) return layer_norm_kernel(x, weight, bias, eps, DType::bf16);
  NormResult r = layer_norm_kernel(x, weight, bias, eps, DType::f32);  // other devices' kernels write float32
  r.y = ops::to(r.y, DType::bf16);
  return r;
}

std::vector<Tensor> layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& bias,
                                        const NormResult& saved) {
  const char* op = "layer_norm_backward";
  const int64_t C = check_norm(op, x, weight, bias, 0);
  check_grad_like(op, dy, x, "dy");
  check_saved_stat(op, saved.mean, x, "mean");
  check_saved_stat(op, saved.rstd, x, "rstd");
  const DType cd = compute_dtype(x.dtype());
  Tensor dx = Tensor::empty(x.shape(), cd, x.device());
  Tensor dw = weight ? Tensor::empty({C}, cd, x.device()) : Tensor();
  Tensor db = bias ? Tensor::empty({C}, cd, x.device()) : Tensor();
  // A bfloat16 dy of float32 x goes to the CPU's kernel as it is (widened row by row there).
  const bool as_is = dy.dtype() == DType::bf16 && cd == DType::f32 && x.device().is_cpu();
  {
    const profile::Span span("layer_norm backward");
    kernels(x.device())
        .layer_norm_backward(as_is ? ops::contiguous(dy) : prepared(dy, cd), prepared(x, cd), prepared(weight, cd),
                             ops::contiguous(saved.mean), ops::contiguous(saved.rstd), dx, dw, db);
  }
  return {cast_back(dx, x.dtype()), weight ? cast_back(dw, weight.dtype()) : Tensor(),
          bias ? cast_back(db, bias.dtype()) : Tensor()};
}

NormResult rms_norm_forward(const Tensor& x, const Tensor& weight, double eps) {
  const char* op = "rms_norm";
  check_norm(op, x, weight, Tensor(), eps);
  const DType cd = compute_dtype(x.dtype());
  NormResult r;
  Tensor y = Tensor::empty(x.shape(), cd, x.device());
  r.rstd = Tensor::empty(rows_shape(x), cd, x.device());
  {
    const profile::Span span("rms_norm");
    kernels(x.device()).rms_norm(prepared(x, cd), prepared(weight, cd), eps, y, r.rstd);
  }
  r.y = cast_back(y, x.dtype());
  return r;
}

std::vector<Tensor> rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                      const NormResult& saved) {
  const char* op = "rms_norm_backward";
  const int64_t C = check_norm(op, x, weight, Tensor(), 0);
  check_grad_like(op, dy, x, "dy");
  check_saved_stat(op, saved.rstd, x, "rstd");
  const DType cd = compute_dtype(x.dtype());
  Tensor dx = Tensor::empty(x.shape(), cd, x.device());
  Tensor dw = weight ? Tensor::empty({C}, cd, x.device()) : Tensor();
  {
    const profile::Span span("rms_norm backward");
    kernels(x.device())
        .rms_norm_backward(prepared(dy, cd), prepared(x, cd), prepared(weight, cd), ops::contiguous(saved.rstd), dx, dw);
  }
  return {cast_back(dx, x.dtype()), weight ? cast_back(dw, weight.dtype()) : Tensor()};
}

// ---------------------------------------------------------------- the slow reference

namespace reference {

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  Tensor centred = ops::sub(x, ops::mean(x, {-1}, true));
  Tensor var = ops::mean(ops::square(centred), {-1}, true);  // biased, as PyTorch
  Tensor y = ops::mul(centred, ops::rsqrt(ops::add(var, eps)));
  if (weight) y = ops::mul(y, weight);
  if (bias) y = ops::add(y, bias);
  return y;
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  Tensor y = ops::mul(x, ops::rsqrt(ops::add(ops::mean(ops::square(x), {-1}, true), eps)));
  return weight ? ops::mul(y, weight) : y;
}

}  // namespace reference
}  // namespace fused

// ---------------------------------------------------------------- the differentiable ops

namespace {

// layer_norm's forward (float32 y, or rounded to bfloat16 for a product) and its recorded backward,
// which takes the gradient in y's dtype.
Tensor layer_norm_of(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, bool rounded) {
  const autograd::InternalOps internal;
  Tensor x2 = fused::as_rows(x, "layer_norm");  // (N, C)
  fused::NormResult r = rounded ? fused::layer_norm_forward_rounded(x2, weight, bias, eps)
                                : fused::layer_norm_forward(x2, weight, bias, eps);
  Tensor y = ops::reshape(r.y, x.shape());
  if (!needs_grad(x, weight, bias)) return y;
  return record("layer_norm", std::move(y), {edge_to(x), edge_to(weight), edge_to(bias)},
                [sx = SavedTensor(x2), sw = SavedTensor(weight), sb = SavedTensor(bias), smean = SavedTensor(r.mean),
                 srstd = SavedTensor(r.rstd), in = x.shape()](const Tensor& g) -> Grads {
                  const char* op = "layer_norm";
                  Tensor x2 = sx.unpack(op);
                  fused::NormResult saved{Tensor(), smean.unpack(op), srstd.unpack(op)};
                  auto d = fused::layer_norm_backward(ops::reshape(g, x2.shape()), x2, sw.unpack(op), sb.unpack(op), saved);
                  return {ops::reshape(d[0], in), d[1], d[2]};
                });
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  return layer_norm_of(x, weight, bias, eps, /*rounded=*/false);
}

Tensor layer_norm_for_product(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  // NOTE [ Norms made for products ] (norms.h)
  // On the CPU, whose products write a bfloat16 result and whose kernel reads a bfloat16 gradient
  // (elsewhere the gradient would be narrowed after its product and widened again here).
  const bool rounded = autograd::product_precision() == autograd::Precision::bf16 && x.dtype() == DType::f32 &&
                       x.device().is_cpu() &&
                       (!weight.defined() || weight.dtype() == DType::f32) &&
                       (!bias.defined() || bias.dtype() == DType::f32);
  return layer_norm_of(x, weight, bias, eps, rounded);
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  const autograd::InternalOps internal;
  Tensor x2 = fused::as_rows(x, "rms_norm");  // (N, C)
  fused::NormResult r = fused::rms_norm_forward(x2, weight, eps);
  Tensor y = ops::reshape(r.y, x.shape());
  if (!needs_grad(x, weight)) return y;
  return record("rms_norm", std::move(y), {edge_to(x), edge_to(weight)},
                [sx = SavedTensor(x2), sw = SavedTensor(weight), srstd = SavedTensor(r.rstd),
                 in = x.shape()](const Tensor& g) -> Grads {
                  const char* op = "rms_norm";
                  Tensor x2 = sx.unpack(op);
                  fused::NormResult saved{Tensor(), Tensor(), srstd.unpack(op)};
                  auto d = fused::rms_norm_backward(ops::reshape(g, x2.shape()), x2, sw.unpack(op), saved);
                  return {ops::reshape(d[0], in), d[1]};
                });
}

// ---------------------------------------------------------------- the unit's cases

namespace fused {
namespace {

void add_gradchecks(autograd::OpRegistry& r) {
  using autograd::Inputs;
  namespace gc = autograd::gc;
  r.add("layer_norm", {{"3-d with weight and bias", {gc::input({2, 3, 4}), gc::input({4}), gc::input({4})},
                        [](const Inputs& x) { return mvgpt::layer_norm(x[0], x[1], x[2], 1e-5); }},
                       {"no affine, transposed", {gc::transposed({3, 5})},
                        [](const Inputs& x) { return mvgpt::layer_norm(x[0], Tensor(), Tensor(), 1e-5); }}});
  r.add("rms_norm", {{"3-d with weight", {gc::input({2, 2, 4}), gc::input({4})},
                      [](const Inputs& x) { return mvgpt::rms_norm(x[0], x[1], 1e-6); }},
                     {"sliced, no weight", {gc::sliced({3, 4})},
                      [](const Inputs& x) { return mvgpt::rms_norm(x[0], Tensor(), 1e-6); }}});
}

// Seeded uniform values in [-2, 2) on dev; `transposed`/`sliced` make the same values a view.
Tensor input(Device dev, const Shape& shape, DType dt, uint64_t seed, int layout = 0) {
  Shape base = shape;
  if (layout == 1) std::swap(base[base.size() - 1], base[base.size() - 2]);
  if (layout == 2) base[base.size() - 1] += 3;
  Tensor t = uniform_on(dev, base, dt, seed);
  if (layout == 1) return ops::transpose(t, -1, -2);
  if (layout == 2) return ops::narrow(t, -1, 1, shape.back());
  return t;
}
constexpr int kTransposed = 1, kSliced = 2;

std::vector<DeviceCase> device_cases() {
  std::vector<DeviceCase> cases;
  cases.push_back({"layer_norm", [](Device d) {
    std::vector<Tensor> r;
    for (DType dt : {DType::f32, DType::f64}) {
      Tensor x = input(d, {300, 70}, dt, 62, kTransposed);  // 300 rows: several row chunks in backward
      Tensor w = input(d, {70}, dt, 63), b = input(d, {70}, dt, 64), dy = input(d, {300, 70}, dt, 65);
      for (int affine = 0; affine < 3; ++affine) {
        Tensor ww = affine > 0 ? w : Tensor(), bb = affine > 1 ? b : Tensor();
        NormResult s = layer_norm_forward(x, ww, bb, 1e-5);
        r.insert(r.end(), {s.y, s.mean, s.rstd});
        for (const Tensor& g : layer_norm_backward(dy, x, ww, bb, s))
          if (g.defined()) r.push_back(g);
      }
    }
    return r;
  }, {"layer_norm", "layer_norm_backward"}, 5e-5});
  cases.push_back({"rms_norm", [](Device d) {
    std::vector<Tensor> r;
    for (DType dt : {DType::f32, DType::f64}) {
      Tensor x = input(d, {2, 150, 40}, dt, 66, kSliced);
      Tensor w = input(d, {40}, dt, 67), dy = input(d, {2, 150, 40}, dt, 68);
      for (bool affine : {false, true}) {
        NormResult s = rms_norm_forward(x, affine ? w : Tensor(), 1e-6);
        r.insert(r.end(), {s.y, s.rstd});
        for (const Tensor& g : rms_norm_backward(dy, x, affine ? w : Tensor(), s))
          if (g.defined()) r.push_back(g);
      }
    }
    return r;
  }, {"rms_norm", "rms_norm_backward"}, 5e-5});
  // Rows wider than one block of threads (C > 256), including odd widths.
  cases.push_back({"norms_wide", [](Device d) {
    std::vector<Tensor> r;
    for (int64_t C : {257, 768, 2051}) {
      Tensor x = input(d, {33, C}, DType::f32, 97), w = input(d, {C}, DType::f32, 98), b = input(d, {C}, DType::f32, 99);
      Tensor dy = input(d, {33, C}, DType::f32, 100);
      NormResult ln = layer_norm_forward(x, w, b, 1e-5);
      r.insert(r.end(), {ln.y, ln.mean, ln.rstd});
      for (const Tensor& g : layer_norm_backward(dy, x, w, b, ln)) r.push_back(g);
      NormResult rms = rms_norm_forward(x, w, 1e-6);
      r.insert(r.end(), {rms.y, rms.rstd});
      for (const Tensor& g : rms_norm_backward(dy, x, w, rms))
        if (g.defined()) r.push_back(g);
    }
    return r;
  }, {"layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward"}, 1e-4});
  // More rows than a CUDA grid holds (65535 * 4): the kernels stride over rows.
  cases.push_back({"norms_past_grid_limits", [](Device d) {
    const int64_t N = 65535 * 4 + 77;
    Tensor x = input(d, {N, 3}, DType::f32, 101), w = input(d, {3}, DType::f32, 102);
    NormResult ln = layer_norm_forward(x, w, Tensor(), 1e-5);
    return std::vector<Tensor>{ln.y, ln.rstd, rms_norm_forward(x, w, 1e-6).y};
  }, {"layer_norm", "rms_norm"}, 1e-5});
  return cases;
}

}  // namespace

Unit norms_unit() {
  return {"norms", {"layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward"}, add_gradchecks,
          device_cases};
}

}  // namespace fused
}  // namespace mvgpt
