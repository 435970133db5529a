// Cross-entropy: checks (targets range-checked on the host, or deferred on a GPU) and dispatch, the
// slow reference, the backward with its reductions, and the cases that test them (NOTE [ A fused op
// is one unit ] in unit.h). Kernels: cross_entropy_cpu.cpp, cross_entropy.cu.
#include <mvgpt/fused/cross_entropy.h>

#include <cmath>
#include <string>

#include <mvgpt/autograd/op_impl.h>  // record, edge_to, SavedTensor, InternalOps; the raw ops
#include <mvgpt/backends/deferred_checks.h>
#include <mvgpt/backends/ops_internal.h>
#include <mvgpt/fused/unit.h>

namespace mvgpt {
namespace fused {
namespace {

const CrossEntropyKernels& kernels(Device d) {
  static const KernelsByDevice<CrossEntropyKernels> table{"cross_entropy", cross_entropy_cpu_kernels(), MVGPT_FUSED_CUDA_KERNELS(cross_entropy)};
  return table.on(d);
}

// Every target on the host is a class or ignore_index.
void check_targets_on_host(const char* op, const Tensor& targets, int64_t V, int64_t ignore_index) {
  Tensor host = ops::contiguous(targets.device().is_cpu() ? targets : ops::to(targets, Device::cpu()));
  auto check = [&](const auto* p) {
    for (int64_t n = 0; n < host.numel(); ++n) {
      const int64_t t = int64_t(p[n]);
      if (t != ignore_index && (t < 0 || t >= V))
        fail(op, "target " + std::to_string(t) + " at row " + std::to_string(n) + " is out of range for " +
                     std::to_string(V) + " classes (ignore_index is " + std::to_string(ignore_index) + ")");
    }
  };
  if (host.dtype() == DType::i64) check(host.data<int64_t>());
  else check(host.data<int32_t>());
}

// Checks logits (N, V) and targets (N), and that every target is a class or ignore_index; returns the
// contiguous targets for the kernel. Where range checks are deferred (NOTE [ Deferred range checks ]),
// counts the bad targets on the device and hands the kernel a copy with them clamped into range.
Tensor check_cross_entropy(const char* op, const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  require_floating(logits, op, "logits");
  if (logits.dim() != 2) fail(op, "logits must be (N, V), found shape " + to_string(logits.shape()));
  require_int(targets, op, "targets");
  require_device(targets, logits, op, "targets");
  require_shape(targets, Shape{logits.size(0)}, op, "targets");
  const int64_t V = logits.size(1);
  if (!ops::range_checks_deferred(targets.device()) || targets.numel() == 0 || V == 0) {
    check_targets_on_host(op, targets, V, ignore_index);
    return ops::contiguous(targets);
  }
  const Device d = targets.device();
  const DType it = targets.dtype();
  Tensor clamped = ops::minimum(ops::maximum(targets, ops::full({}, 0, it, d)), ops::full({}, double(V - 1), it, d));
  Tensor kept = ops::ne(targets, ops::full({}, double(ignore_index), it, d));  // not ignored
  Tensor bad = ops::mul(ops::to(ops::ne(clamped, targets), DType::i64), ops::to(kept, DType::i64));
  ops::detail::defer_check(op, ops::sum(bad), targets, [op, V, ignore_index](const Tensor& host) {
    check_targets_on_host(op, host, V, ignore_index);
  });
  return ops::contiguous(ops::where(kept, clamped, targets));
}

}  // namespace

CrossEntropyResult cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  const char* op = "cross_entropy";
  const Tensor kernel_targets = check_cross_entropy(op, logits, targets, ignore_index);
  const DType cd = compute_dtype(logits.dtype());
  CrossEntropyResult r;
  r.losses = Tensor::empty({logits.size(0)}, cd, logits.device());
  r.lse = Tensor::empty({logits.size(0)}, cd, logits.device());
  {
    const profile::Span span("cross_entropy");
    kernels(logits.device())
        .forward(prepared(logits, cd), kernel_targets, ignore_index, r.losses, r.lse);
  }
  return r;
}

Tensor cross_entropy_backward(const Tensor& dlosses, const Tensor& logits, const Tensor& targets,
                              const CrossEntropyResult& saved, int64_t ignore_index) {
  const char* op = "cross_entropy_backward";
  const Tensor kernel_targets = check_cross_entropy(op, logits, targets, ignore_index);
  const int64_t N = logits.size(0);
  require_floating(dlosses, op, "dlosses");
  require_device(dlosses, logits, op, "dlosses");
  require_shape(dlosses, Shape{N}, op, "dlosses");
  const DType cd = compute_dtype(logits.dtype());
  require_defined(saved.lse, op, "saved lse");
  require_device(saved.lse, logits, op, "saved lse");
  require_shape(saved.lse, Shape{N}, op, "saved lse");
  if (saved.lse.dtype() != cd)
    fail(op, "saved lse must be " + std::string(dtype_name(cd)) + ", found " + std::string(dtype_name(saved.lse.dtype())));
  Tensor d = Tensor::empty(logits.shape(), cd, logits.device());
  {
    const profile::Span span("cross_entropy backward");
    kernels(logits.device())
        .backward(prepared(dlosses, cd), prepared(logits, cd), kernel_targets, ops::contiguous(saved.lse),
                                ignore_index, d);
  }
  return cast_back(d, logits.dtype());
}

// ---------------------------------------------------------------- the slow reference

namespace reference {

CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  Tensor ignored = ops::eq(targets, ops::full_like(targets, double(ignore_index)));
  Tensor safe = ops::where(ignored, ops::zeros_like(targets), targets);  // any valid class for ignored rows
  Tensor picked = ops::squeeze(ops::gather(ops::log_softmax(logits, -1), 1, ops::unsqueeze(safe, 1)), 1);
  Tensor losses = ops::where(ignored, ops::zeros_like(picked), ops::neg(picked));
  return {losses, ops::logsumexp(logits, {-1})};
}

}  // namespace reference
}  // namespace fused

// ---------------------------------------------------------------- the differentiable op

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Reduction reduction) {
  const autograd::InternalOps internal;
  Shape want = logits.dim() >= 1 ? logits.shape() : Shape{};
  if (logits.dim() >= 1) want.erase(want.size() - 1);
  if (logits.dim() < 1 || !(targets.shape() == want))
    throw std::invalid_argument("cross_entropy: expected logits (..., V) and targets (...), found logits " +
                                to_string(logits.shape()) + " and targets " + to_string(targets.shape()));
  Tensor l2 = fused::as_rows(logits, "cross_entropy");  // (N, V)
  Tensor t2 = ops::reshape(targets, {l2.size(0)});      // (N)
  fused::CrossEntropyResult r = fused::cross_entropy_forward(l2, t2, ignore_index);
  const int64_t n = l2.size(0);
  // d out / d sum(losses): 1 / count for the mean, as a () float64 tensor on the device, so the mean
  // needs no host read (a synchronisation per step on a GPU); undefined (1) for none and sum.
  Tensor scale;
  Tensor y;
  switch (reduction) {
    case Reduction::none: y = ops::reshape(r.losses, targets.shape()); break;
    case Reduction::sum: y = ops::sum(r.losses); break;
    case Reduction::mean: {
      // Mean over the tokens that count; 0 / 0 = NaN when none does, as PyTorch. The scale is
      // rounded to the losses' dtype before the product, as a scalar multiply would.
      Tensor counted = ops::to(ops::ne(t2, ops::full(Shape{}, double(ignore_index), t2.dtype(), t2.device())), DType::f64);
      scale = ops::unary(UnaryOp::rdiv_scalar, ops::sum(counted), 1.0);
      y = ops::mul(ops::sum(r.losses), ops::to(scale, r.losses.dtype()));
      break;
    }
  }
  if (!needs_grad(logits)) return y;
  return record("cross_entropy", std::move(y), {edge_to(logits)},
                [sl = SavedTensor(l2), st = SavedTensor(t2), slse = SavedTensor(r.lse), ignore_index, reduction, scale,
                 n, in = logits.shape()](const Tensor& g) -> Grads {
                  const char* op = "cross_entropy";
                  Tensor scaled = scale.defined() ? ops::mul(g, ops::to(scale, g.dtype())) : g;
                  Tensor dlosses = reduction == Reduction::none ? ops::reshape(g, {n})
                                                                : ops::expand(ops::reshape(scaled, {1}), {n});
                  fused::CrossEntropyResult saved{Tensor(), slse.unpack(op)};
                  Tensor d = fused::cross_entropy_backward(dlosses, sl.unpack(op), st.unpack(op), saved, ignore_index);
                  return {ops::reshape(d, in)};
                });
}

// ---------------------------------------------------------------- the unit's cases

namespace fused {
namespace {

void add_gradchecks(autograd::OpRegistry& r) {
  using autograd::Inputs;
  namespace gc = autograd::gc;
  r.add("cross_entropy",
        {{"mean with an ignored token", {gc::input({2, 3, 5}, -2, 2)}, [](const Inputs& x) {
            Tensor t = Tensor::from_vector(std::vector<int64_t>{1, 4, -100, 0, 2, 2}, Shape{2, 3});
            return mvgpt::cross_entropy(x[0], t, -100, Reduction::mean);
          }},
         {"sum, transposed logits", {gc::transposed({4, 3}), gc::indices({4}, 3)},
          [](const Inputs& x) { return mvgpt::cross_entropy(x[0], x[1], -100, Reduction::sum); }},
         {"none, ignore index 0", {gc::input({4, 3}), gc::indices({4}, 3)},
          [](const Inputs& x) { return mvgpt::cross_entropy(x[0], x[1], 0, Reduction::none); }}});
}

std::vector<DeviceCase> device_cases() {
  std::vector<DeviceCase> cases;
  cases.push_back({"cross_entropy", [](Device d) {
    std::vector<Tensor> r;
    for (DType dt : {DType::f32, DType::f64})
      for (DType idt : {DType::i64, DType::i32}) {
        Tensor logits = uniform_on(d, {6, 700}, dt, 75, -8, 8);
        Tensor targets = ids_on(d, {3, 699, -100, 0, 350, 12}, idt);
        CrossEntropyResult c = cross_entropy_forward(logits, targets, -100);
        r.insert(r.end(), {c.losses, c.lse});
        r.push_back(cross_entropy_backward(uniform_on(d, {6}, dt, 76, -2, 2), logits, targets, c, -100));
      }
    return r;
  }, {"forward", "backward"}, 2e-5});
  // Rows of -inf (a fully masked row), with a NaN, or with +inf: the same NaN/inf pattern as the CPU.
  cases.push_back({"cross_entropy_nonfinite_rows", [](Device d) {
    const float inf = INFINITY;
    // Rows: all -inf (fully masked), a NaN, a +inf, one masked entry.
    Tensor x = Tensor::from_vector(std::vector<float>{-inf, -inf, -inf, -inf, 1, NAN,  2, 0, inf, -1,
                                                      0,    -inf, 3,    1,    2, -2},
                                   Shape{4, 4});
    CrossEntropyResult c = cross_entropy_forward(ops::to(x, d), ids_on(d, {0, 2, 1, 3}));
    return std::vector<Tensor>{c.losses, c.lse};
  }, {"forward"}});
  // More rows than a CUDA grid holds (65535 * 4 blocks): the kernel strides over rows.
  cases.push_back({"cross_entropy_past_grid_limits", [](Device d) {
    const int64_t N = 65535 * 4 + 77;
    CrossEntropyResult c = cross_entropy_forward(uniform_on(d, {N, 3}, DType::f32, 101, -2, 2),
                                                 ops::full({N}, 2, DType::i64, d), -100);
    return std::vector<Tensor>{c.losses, c.lse};
  }, {"forward"}, 1e-5});
  return cases;
}

}  // namespace

Unit cross_entropy_unit() { return {"cross_entropy", {"forward", "backward"}, add_gradchecks, device_cases}; }

}  // namespace fused
}  // namespace mvgpt
