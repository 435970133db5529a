// Cross-entropy: checks (targets range-checked on the host, or deferred on a GPU) and dispatch, the
// slow reference, the backward with its reductions, and the cases that test them (NOTE [ A fused op
// is one unit ] in unit.h). Kernels: cross_entropy_cpu.cpp, cross_entropy.cu.
#include <mvgpt/fused/cross_entropy.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include <mvgpt/autograd/op_impl.h>  // record, edge_to, SavedTensor, InternalOps; the raw ops
#include <mvgpt/autograd/engine.h>
#include <mvgpt/autograd/precision.h>
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

// Every target is a class of V or ignore_index: checked on the host, or (NOTE [ Deferred range checks ])
// counted on the device, the kernel then getting a copy with the bad ones clamped into range.
Tensor checked_targets(const char* op, const Tensor& targets, int64_t V, int64_t ignore_index) {
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

// Checks logits (N, V) and targets (N), and that every target is a class or ignore_index; returns the
// contiguous targets for the kernel (checked_targets).
Tensor check_cross_entropy(const char* op, const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  require_floating(logits, op, "logits");
  if (logits.dim() != 2) fail(op, "logits must be (N, V), found shape " + to_string(logits.shape()));
  require_int(targets, op, "targets");
  require_device(targets, logits, op, "targets");
  require_shape(targets, Shape{logits.size(0)}, op, "targets");
  return checked_targets(op, targets, logits.size(1), ignore_index);
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
  Tensor d = Tensor::empty(logits.shape(), compute_dtype(logits.dtype()), logits.device());
  cross_entropy_backward_into(d, dlosses, logits, targets, saved, ignore_index);
  return cast_back(d, logits.dtype());
}

void cross_entropy_backward_into(const Tensor& out, const Tensor& dlosses, const Tensor& logits,
                                 const Tensor& targets, const CrossEntropyResult& saved, int64_t ignore_index) {
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
  require_defined(out, op, "out");
  require_device(out, logits, op, "out");
  require_shape(out, logits.shape(), op, "out");
  const bool rounded = out.dtype() == DType::bf16 && cd == DType::f32;
  if (!out.is_contiguous() || (out.dtype() != cd && !rounded))
    fail(op, "out must be contiguous " + std::string(dtype_name(cd)) + (cd == DType::f32 ? " or bfloat16" : "") +
                 ", found " + std::string(dtype_name(out.dtype())));
  // Only the CPU's kernel rounds in its own pass; elsewhere the float32 values are rounded after.
  const bool round_after = rounded && !logits.device().is_cpu();
  const Tensor into = round_after ? Tensor::empty(logits.shape(), cd, logits.device()) : out;
  {
    const profile::Span span("cross_entropy backward");
    kernels(logits.device())
        .backward(prepared(dlosses, cd), prepared(logits, cd), kernel_targets, ops::contiguous(saved.lse),
                                ignore_index, into);
  }
  if (round_after) ops::copy_(out, into);
}

bool has_loss_with_gradient(Device d) { return kernels(d).loss_with_gradient != nullptr; }

CrossEntropyResult cross_entropy_with_gradient(const Tensor& logits, const Tensor& targets, const Tensor& dlosses,
                                               const Tensor& dlogits, int64_t ignore_index) {
  const char* op = "cross_entropy_with_gradient";
  const Tensor kernel_targets = check_cross_entropy(op, logits, targets, ignore_index);
  const int64_t N = logits.size(0);
  if (logits.dtype() != DType::f32 && logits.dtype() != DType::bf16)
    fail(op, "logits must be float32 or bfloat16, found " + std::string(dtype_name(logits.dtype())));
  require_floating(dlosses, op, "dlosses");
  require_device(dlosses, logits, op, "dlosses");
  require_shape(dlosses, Shape{N}, op, "dlosses");
  require_defined(dlogits, op, "dlogits");
  require_device(dlogits, logits, op, "dlogits");
  require_shape(dlogits, logits.shape(), op, "dlogits");
  if (dlogits.dtype() != DType::bf16 || !dlogits_rows(dlogits))  // NOTE [ dlogits rows on lines ]
    fail(op, "dlogits must be bfloat16 rows of unit stride (contiguous or padded), found " +
                 std::string(dtype_name(dlogits.dtype())) +
                 (dlogits.dtype() == DType::bf16 ? " with strides " + to_string(dlogits.strides()) : ""));
  const auto kernel = kernels(logits.device()).loss_with_gradient;
  if (!kernel) fail(op, "no kernel on " + logits.device().str() + " (ask has_loss_with_gradient first)");
  CrossEntropyResult r;
  r.losses = Tensor::empty({N}, DType::f32, logits.device());
  r.lse = Tensor::empty({N}, DType::f32, logits.device());
  {
    const profile::Span span("cross_entropy with gradient");
    kernel(prepared(logits, logits.dtype()), kernel_targets, ignore_index, prepared(dlosses, DType::f32), r.losses, r.lse,
           dlogits);
  }
  return r;
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

// ---------------------------------------------------------------- the differentiable ops

namespace {

// d mean / d loss: 1 / (the targets that are not ignore_index), a () float64 tensor on the targets'
// device (no host read: a synchronisation per step on a GPU); 0 / 0 = NaN when none counts, as
// PyTorch. Callers round it to the losses' dtype before a product, as a scalar multiply would.
Tensor mean_scale(const Tensor& targets, int64_t ignore_index) {
  const Tensor ignored = ops::full(Shape{}, double(ignore_index), targets.dtype(), targets.device());
  const Tensor counted = ops::to(ops::ne(targets, ignored), DType::f64);
  return ops::unary(UnaryOp::rdiv_scalar, ops::sum(counted), 1.0);
}

}  // namespace

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
      scale = mean_scale(t2, ignore_index);
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

// NOTE [ Linear cross-entropy ]
// The series' classifier makes (B T, V) logits: 164 MB in float32 for a step of 16 x 256 tokens and
// 10,000 classes. Composed under the bf16 policy, a training step writes them (the product), reads
// them twice (the loss, then its backward), writes their float32 gradient and reads it again to round
// it for the backward's products: five passes over memory that no cache holds. Here the forward makes,
// with the losses, the gradient (softmax - onehot) * scale at once, as the loss's backward computes
// it for an upstream gradient of 1, stored in the dtype the backward's products take; the backward is
// then linear's two products over it, times the upstream gradient (skipped where that is a CPU 1,
// which changes nothing). The values are those of cross_entropy(linear(x, weight), targets) with an
// upstream gradient of 1; under a no-grad guard only the losses are made.
// Under the bf16 policy the rows go a block at a time (kLogitsBlockBytes of float32 logits) and the
// CPU's loss backward rounds its own output (other devices round it after): the float32 gradient
// never reaches memory, the block is the only float32 logits alive, and what is kept for the
// backward is the bfloat16 gradient (82 MB here) instead of the float32 logits (164 MB). On the
// 2-core AMD EPYC Zen 4 a bf16 step's peak memory went from 1,390 to 1,113 MB, its time level (the
// passes it saves were not what the step waited for). Blocks the cache would hold (8 MiB: 209 rows)
// saved 40 MB more but were multiplied at 385-415 GFLOP/s against 430-440 for 1,024 rows. In float32
// it is one block: the gradient is kept in float32 either way, and OpenBLAS multiplies 209-row blocks
// at 172 GFLOP/s against 202 for the whole.
// On the CPU under the bf16 policy one kernel makes each row's loss and rounded gradient from one set
// of exps (NOTE [ The loss and its gradient in one visit ] in cross_entropy_cpu.cpp). Elsewhere the
// loss and then its gradient go a slice of a block at a time (kLogitsSliceBytes), so that the
// gradient's pass reads logits the loss's pass just brought into the cache, not memory: in the bf16
// step on the Zen 4 the gradient's pass took 10.5-10.7 ms against 11.7-12.1. Other devices take a
// block at once (their caches are not what the passes wait for, and each call checks its targets
// again).
// NOTE [ bf16 logits ]
// Under the bf16 policy, on a device whose kernel makes the loss and its gradient in one visit (the
// CPU's), the classifier's product writes its logits in bfloat16, as autocast's linear does, and the
// loss and its gradient are computed in float32 from them, as autocast's cross_entropy upcasts: the
// loss is that of the rounded logits, with or without a graph. The product writes half the bytes and
// the loss reads half; on the 2-core AMX Xeon (family 6 model 167) see docs/performance.md.
namespace {
constexpr int64_t kLogitsBlockBytes = int64_t(40) << 20;  // 4 blocks of 1,024 rows for 16 x 256 tokens, 10,000 classes
constexpr int64_t kLogitsSliceBytes = int64_t(8) << 20;   // the loss, then its gradient: 209 rows of 10,000
// NOTE [ dlogits rows on lines ]
// The bfloat16 gradient the one-visit kernel writes is read by the backward's two products, whose
// AMX kernel reads a 64-byte-aligned operand's rows where they lie and otherwise copies each panel
// (and a transposed one's 64-byte pieces then straddle two lines). Its rows are kept a multiple of
// 32 classes apart (10,016 for 10,000): padding that nothing reads. On the 2-core AMX Xeon (family
// 6 model 167) BM_Bf16ClassifierBackwardCold: dX = dlogits W 14.4-16.4 ms against 16.9-17.6, dW
// level (17.9-18.1 against 18.0-18.5); in the step see docs/performance.md's eighth session.
constexpr int64_t kRowElems = 32;
}  // namespace

Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& targets, int64_t ignore_index) {
  const autograd::InternalOps internal;
  const char* op = "linear_cross_entropy";
  if (x.dim() < 1 || weight.dim() != 2 || x.size(-1) != weight.size(1))
    throw std::invalid_argument(std::string(op) + ": expected x (..., C) and weight (V, C), found x " +
                                to_string(x.shape()) + " and weight " + to_string(weight.shape()));
  if (!(targets.shape() == fused::rows_shape(x)))
    throw std::invalid_argument(std::string(op) + ": expected targets shaped as x without its last axis, found x " +
                                to_string(x.shape()) + " and targets " + to_string(targets.shape()));
  if (numel(fused::rows_shape(x)) == 0 || weight.size(0) == 0)  // nothing to cut into blocks
    return cross_entropy(linear(x, weight, Tensor()), targets, ignore_index, Reduction::mean);
  fused::require_int(targets, op, "targets");
  fused::require_device(targets, x, op, "targets");
  const Tensor x2 = fused::as_rows(x, op);  // (N, C)
  const int64_t N = x2.size(0), V = weight.size(0);
  // Checked once here, so that an error names the row among all N (each block's check then passes).
  const Tensor t2 = fused::checked_targets(op, ops::reshape(targets, {N}), V, ignore_index);  // (N)
  // The operands as linear multiplies them (bfloat16 copies under the bf16 policy).
  const autograd::detail::Product p(x2, weight);
  const bool bf16 = p.bf16;
  const Tensor &xa = p.a, &wa = p.b;
  const std::optional<DType> out = p.out();
  const bool bf16_logits = bf16 && fused::has_loss_with_gradient(x.device());  // NOTE [ bf16 logits ]
  const std::optional<DType> logits_dtype = bf16_logits ? std::optional<DType>(DType::bf16) : out;
  const bool grad = needs_grad(x, weight);
  const Tensor scale = mean_scale(t2, ignore_index);  // () float64
  Tensor losses, dlogits, dscale;                     // (N), (N, V), ()
  // Blocks of at most kLogitsBlockBytes, all of about the same size (a short last one multiplies
  // slower), where the gradient is stored in bfloat16; one block where it is stored as computed.
  const int64_t most = bf16 ? std::max<int64_t>(1, kLogitsBlockBytes / std::max<int64_t>(V * 4, 1)) : N;
  const int64_t nblocks = (N + most - 1) / most, block = (N + nblocks - 1) / nblocks;
  for (int64_t r0 = 0; r0 < N; r0 += block) {
    const int64_t rows = std::min(block, N - r0);
    const Tensor tb = ops::narrow(t2, 0, r0, rows);
    const Tensor logits = ops::linear(ops::narrow(xa, 0, r0, rows), wa, Tensor(), logits_dtype);  // (rows, V)
    if (grad && bf16_logits) {
      // Each row's exps made once for the loss and its rounded gradient (see the note).
      if (!losses.defined()) {
        losses = Tensor::empty({N}, DType::f32, x.device());
        // NOTE [ dlogits rows on lines ]
        const int64_t Vp = (V + kRowElems - 1) / kRowElems * kRowElems;
        dlogits = ops::narrow(Tensor::empty({N, Vp}, DType::bf16, x.device()), 1, 0, V);
        dscale = ops::to(scale, DType::f32);
      }
      const fused::CrossEntropyResult r = fused::cross_entropy_with_gradient(
          logits, tb, ops::expand(ops::reshape(dscale, {1}), {rows}), ops::narrow(dlogits, 0, r0, rows), ignore_index);
      ops::copy_(ops::narrow(losses, 0, r0, rows), r.losses);
      continue;
    }
    // The loss and then its gradient a slice of rows at a time (see the note).
    const int64_t row_bytes = std::max<int64_t>(V * int64_t(dtype_size(logits.dtype())), 1);
    const int64_t slice = x.device().is_cpu() ? std::max<int64_t>(1, kLogitsSliceBytes / row_bytes) : rows;
    for (int64_t s0 = 0; s0 < rows; s0 += slice) {
      const int64_t n = std::min(slice, rows - s0);
      const Tensor ls = ops::narrow(logits, 0, s0, n), ts = ops::narrow(tb, 0, s0, n);
      const fused::CrossEntropyResult r = fused::cross_entropy_forward(ls, ts, ignore_index);
      if (!losses.defined()) {
        losses = Tensor::empty({N}, r.losses.dtype(), x.device());
        if (grad) {
          dlogits = Tensor::empty({N, V}, bf16 ? DType::bf16 : logits.dtype(), x.device());
          dscale = ops::to(scale, r.losses.dtype());  // as the composition rounds it: to the losses' dtype
        }
      }
      ops::copy_(ops::narrow(losses, 0, r0 + s0, n), r.losses);
      if (grad)
        fused::cross_entropy_backward_into(ops::narrow(dlogits, 0, r0 + s0, n),
                                           ops::expand(ops::reshape(dscale, {1}), {n}), ls, ts, r, ignore_index);
    }
  }
  Tensor y = ops::mul(ops::sum(losses), ops::to(scale, losses.dtype()));
  if (!grad) return y;
  return record(op, std::move(y), {edge_to(x), edge_to(weight)},
                [sd = SavedTensor(dlogits), sx = SavedTensor(weight.requires_grad() ? xa : Tensor()),
                 sw = SavedTensor(x.requires_grad() ? wa : Tensor()), shape = x.shape(), out,
                 tx = x.dtype()](const Tensor& g) -> Grads {
                  const char* op = "linear_cross_entropy";
                  const Tensor d = sd.unpack(op);  // (N, V)
                  // Times the upstream gradient, but for a 1 on the CPU (reading it there costs nothing).
                  const bool one = g.device().is_cpu() && g.numel() == 1 && read_element(g, 0) == 1.0;
                  auto times_g = [&](const Tensor& t) { return one ? t : ops::mul(t, ops::to(g, t.dtype())); };
                  Tensor dx, dw;
                  if (sw.defined()) {  // (N, V) @ (V, C)
                    // A bfloat16 x's gradient rounded once: as the product writes it, or after the times g.
                    dx = one ? ops::matmul(d, sw.unpack(op), autograd::detail::gradient_dtype(tx, out))
                             : autograd::detail::in_gradient_dtype(times_g(ops::matmul(d, sw.unpack(op), out)), tx, out);
                    dx = ops::reshape(dx, shape);
                  }
                  if (sx.defined())  // (V, N) @ (N, C)
                    dw = times_g(ops::matmul(ops::transpose(d, 0, 1), sx.unpack(op), out));
                  return {dx, dw};
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
  r.add("linear_cross_entropy",
        {{"(B, T, C) with an ignored token", {gc::input({2, 3, 4}), gc::input({5, 4})}, [](const Inputs& x) {
            Tensor t = Tensor::from_vector(std::vector<int64_t>{1, 4, -100, 0, 2, 2}, Shape{2, 3});
            return mvgpt::linear_cross_entropy(x[0], x[1], t);
          }},
         {"transposed weight", {gc::input({4, 3}), gc::transposed({6, 3}), gc::indices({4}, 6)},
          [](const Inputs& x) { return mvgpt::linear_cross_entropy(x[0], x[1], x[2]); }}});
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
  // linear_cross_entropy's loss and both gradients: one block in float32; under the bf16 policy
  // 150 rows of 131,072 classes are two blocks, and a device that cannot round in its kernel rounds
  // after (its bf16 products sum in another order, so that case is compared at bf16's precision).
  // Under bf16 the CPU runs loss_with_gradient; a device without it runs the two kernels.
  for (const bool bf16 : {false, true}) {
    cases.push_back({bf16 ? "linear_cross_entropy_bf16" : "linear_cross_entropy", [bf16](Device d) {
      const autograd::PrecisionGuard precision(bf16 ? autograd::Precision::bf16 : autograd::Precision::fp32);
      const int64_t V = bf16 ? 131072 : 700, N = 150;
      std::vector<int64_t> ids(size_t(N), 0);
      for (int64_t i = 0; i < N; ++i) ids[size_t(i)] = i % 9 == 4 ? -100 : (i * 7919) % V;
      Tensor x = uniform_on(d, {3, N / 3, 16}, DType::f32, 102), w = uniform_on(d, {V, 16}, DType::f32, 103);
      x.requires_grad_(true);
      w.requires_grad_(true);
      Tensor loss = linear_cross_entropy(x, w, ops::reshape(ids_on(d, ids, DType::i32), {3, N / 3}));
      autograd::backward(loss);
      return std::vector<Tensor>{loss.detach(), x.grad(), w.grad()};
    }, bf16 ? std::vector<std::string>{"forward", "backward", "loss_with_gradient"} : std::vector<std::string>{"forward", "backward"},
       bf16 ? 2e-2 : 2e-5});
  }
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

Unit cross_entropy_unit() {
  return {"cross_entropy", {"forward", "backward", "loss_with_gradient"}, add_gradchecks, device_cases};
}

}  // namespace fused
}  // namespace mvgpt
