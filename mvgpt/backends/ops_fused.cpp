// The fused ops: argument checks, layout and dtype preparation, allocation and dispatch for layer
// norm, RMS norm, rope, attention, cross-entropy and AdamW. Kernels compute in float32 or float64:
// bfloat16 inputs are widened to float32 here and the results that mirror an input are cast back.
// Saved statistics (mean, rstd, lse, per-row losses) stay in the compute dtype.
#include <cmath>
#include <stdexcept>
#include <string>

#include <mvgpt/backends/deferred_checks.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/backends/ops_internal.h>

namespace mvgpt::ops {
namespace {

[[noreturn]] void fail(const char* op, const std::string& msg) {
  throw std::invalid_argument(std::string(op) + ": " + msg);
}

void require_defined(const Tensor& t, const char* op, const char* what) {
  if (!t.defined()) fail(op, std::string(what) + " is undefined");
}

void require_floating(const Tensor& t, const char* op, const char* what) {
  require_defined(t, op, what);
  if (!is_floating(t.dtype()))
    fail(op, std::string(what) + " must be floating point, found " + std::string(dtype_name(t.dtype())));
}

void require_device(const Tensor& t, const Tensor& ref, const char* op, const char* what) {
  if (!(t.device() == ref.device()))
    fail(op, std::string(what) + " is on " + t.device().str() + " but the input is on " + ref.device().str());
}

void require_shape(const Tensor& t, const Shape& shape, const char* op, const char* what) {
  if (!(t.shape() == shape))
    fail(op, std::string(what) + " must have shape " + to_string(shape) + ", found " + to_string(t.shape()));
}

void require_int(const Tensor& t, const char* op, const char* what) {
  require_defined(t, op, what);
  if (t.dtype() != DType::i32 && t.dtype() != DType::i64)
    fail(op, std::string(what) + " must be int32 or int64, found " + std::string(dtype_name(t.dtype())));
}

// Kernels compute in float64 for float64 inputs, float32 otherwise.
DType compute_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// t in dtype dt, contiguous (t itself when it already is).
Tensor prepared(const Tensor& t, DType dt) {
  if (!t.defined()) return t;
  return contiguous(t.dtype() == dt ? t : to(t, dt));
}

// For the (B, H, T, D) kernels: a view is fine when D has unit stride and the rows do not overlap
// (e.g. q, k, v split out of a packed qkv); anything else is copied.
Tensor prepared_heads(const Tensor& t, DType dt) {
  Tensor r = t.dtype() == dt ? t : to(t, dt);
  const int n = r.dim();
  const int64_t D = r.size(-1);
  const bool unit_d = D <= 1 || r.strides()[n - 1] == 1;
  const bool rows_apart = r.size(-2) <= 1 || r.strides()[n - 2] >= D;
  return unit_d && rows_apart ? r : contiguous(r);
}

Tensor cast_back(const Tensor& t, DType dt) { return t.dtype() == dt ? t : to(t, dt); }

// x's shape without its last axis: the shape of per-row statistics.
Shape rows_shape(const Tensor& x) {
  Shape s = x.shape();
  s.erase(s.size() - 1);
  return s;
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

void check_grad_like(const char* op, const Tensor& grad, const Tensor& x, const char* what) {
  require_floating(grad, op, what);
  require_device(grad, x, op, what);
  require_shape(grad, x.shape(), op, what);
}

}  // namespace

// ---------------------------------------------------------------- layer norm, RMS norm

NormResult layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const char* op = "layer_norm";
  check_norm(op, x, weight, bias, eps);
  const DType cd = compute_dtype(x.dtype());
  Tensor xc = prepared(x, cd);
  NormResult r;
  Tensor y = Tensor::empty(x.shape(), cd, x.device());
  r.mean = Tensor::empty(rows_shape(x), cd, x.device());
  r.rstd = Tensor::empty(rows_shape(x), cd, x.device());
  backend_for(x.device()).layer_norm(xc, prepared(weight, cd), prepared(bias, cd), eps, y, r.mean, r.rstd);
  r.y = cast_back(y, x.dtype());
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
  backend_for(x.device())
      .layer_norm_backward(prepared(dy, cd), prepared(x, cd), prepared(weight, cd), contiguous(saved.mean),
                           contiguous(saved.rstd), dx, dw, db);
  return {cast_back(dx, x.dtype()), weight ? cast_back(dw, weight.dtype()) : Tensor(),
          bias ? cast_back(db, bias.dtype()) : Tensor()};
}

NormResult rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  const char* op = "rms_norm";
  check_norm(op, x, weight, Tensor(), eps);
  const DType cd = compute_dtype(x.dtype());
  NormResult r;
  Tensor y = Tensor::empty(x.shape(), cd, x.device());
  r.rstd = Tensor::empty(rows_shape(x), cd, x.device());
  backend_for(x.device()).rms_norm(prepared(x, cd), prepared(weight, cd), eps, y, r.rstd);
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
  backend_for(x.device())
      .rms_norm_backward(prepared(dy, cd), prepared(x, cd), prepared(weight, cd), contiguous(saved.rstd), dx, dw);
  return {cast_back(dx, x.dtype()), weight ? cast_back(dw, weight.dtype()) : Tensor()};
}

// ---------------------------------------------------------------- rope

Tensor rope(const Tensor& x, const Tensor& positions, double base, RopeLayout layout, bool inverse,
            double position_scale) {
  const char* op = "rope";
  require_floating(x, op, "x");
  if (x.dim() != 3 && x.dim() != 4)
    fail(op, "x must be (B, H, T, D) or (H, T, D), found shape " + to_string(x.shape()));
  const int64_t D = x.size(-1), T = x.size(-2);
  if (D % 2 != 0) fail(op, "head size " + std::to_string(D) + " is odd; rotary pairs need an even size");
  require_int(positions, op, "positions");
  require_device(positions, x, op, "positions");
  const bool shared = positions.dim() == 1 && positions.size(0) == T;
  const bool per_seq = x.dim() == 4 && positions.dim() == 2 && positions.size(0) == x.size(0) && positions.size(1) == T;
  if (!shared && !per_seq)
    fail(op, "positions must have shape [" + std::to_string(T) + "]" +
                 (x.dim() == 4 ? " or [" + std::to_string(x.size(0)) + ", " + std::to_string(T) + "]" : std::string()) +
                 " for x of shape " + to_string(x.shape()) + ", found " + to_string(positions.shape()));
  if (!(base > 0)) fail(op, "base must be > 0, found " + std::to_string(base));
  if (!(position_scale > 0) || !std::isfinite(position_scale))
    fail(op, "position_scale must be finite and > 0, found " + std::to_string(position_scale));
  const DType cd = compute_dtype(x.dtype());
  Tensor xc = x.dtype() == cd && (D <= 1 || x.strides()[x.dim() - 1] == 1) ? x : contiguous(to(x, cd));
  Tensor out = Tensor::empty(x.shape(), cd, x.device());
  backend_for(x.device()).rope(xc, contiguous(positions), base, layout, inverse, position_scale, out);
  return cast_back(out, x.dtype());
}

// ---------------------------------------------------------------- attention

namespace {

struct AttentionShapes {
  int64_t B, H, Hkv, Tq, Tk, D;
};

AttentionShapes check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                bool causal) {
  for (auto [t, what] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    require_floating(*t, op, what);
    if (t->dim() != 4) fail(op, std::string(what) + " must be (B, heads, T, D), found shape " + to_string(t->shape()));
    require_device(*t, q, op, what);
    if (t->dtype() != q.dtype())
      fail(op, std::string(what) + " is " + std::string(dtype_name(t->dtype())) + " but q is " +
                   std::string(dtype_name(q.dtype())));
  }
  AttentionShapes s{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3)};
  if (k.size(0) != s.B || k.size(3) != s.D)
    fail(op, "k must be [" + std::to_string(s.B) + ", Hkv, Tk, " + std::to_string(s.D) + "] to match q " +
                 to_string(q.shape()) + ", found " + to_string(k.shape()));
  require_shape(v, k.shape(), op, "v (same shape as k)");
  if (s.Hkv == 0 ? s.H != 0 : s.H % s.Hkv != 0)
    fail(op, "q has " + std::to_string(s.H) + " heads, not a multiple of the " + std::to_string(s.Hkv) +
                 " kv heads of k and v");
  if (causal && s.Tq > s.Tk)
    fail(op, "causal attention needs at least as many keys as queries (queries sit at the last Tq key "
             "positions), found Tq " + std::to_string(s.Tq) + " > Tk " + std::to_string(s.Tk));
  if (!std::isfinite(scale)) fail(op, "scale must be finite, found " + std::to_string(scale));
  return s;
}

}  // namespace

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal) {
  const char* op = "attention";
  const AttentionShapes s = check_attention(op, q, k, v, scale, causal);
  const DType cd = compute_dtype(q.dtype());
  Tensor out = Tensor::empty(q.shape(), cd, q.device());
  Tensor lse = Tensor::empty({s.B, s.H, s.Tq}, cd, q.device());
  backend_for(q.device())
      .attention(prepared_heads(q, cd), prepared_heads(k, cd), prepared_heads(v, cd), scale, causal, out, lse);
  return {cast_back(out, q.dtype()), lse};
}

std::vector<Tensor> attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const AttentionResult& saved, double scale, bool causal) {
  const char* op = "attention_backward";
  const AttentionShapes s = check_attention(op, q, k, v, scale, causal);
  check_grad_like(op, dout, q, "dout");
  check_grad_like(op, saved.out, q, "saved out");
  require_defined(saved.lse, op, "saved lse");
  require_device(saved.lse, q, op, "saved lse");
  require_shape(saved.lse, Shape{s.B, s.H, s.Tq}, op, "saved lse");
  const DType cd = compute_dtype(q.dtype());
  if (saved.lse.dtype() != cd)
    fail(op, "saved lse must be " + std::string(dtype_name(cd)) + ", found " + std::string(dtype_name(saved.lse.dtype())));
  Tensor dq = Tensor::empty(q.shape(), cd, q.device());
  Tensor dk = Tensor::empty(k.shape(), cd, q.device());
  Tensor dv = Tensor::empty(v.shape(), cd, q.device());
  backend_for(q.device())
      .attention_backward(prepared_heads(dout, cd), prepared_heads(q, cd), prepared_heads(k, cd),
                          prepared_heads(v, cd), prepared_heads(saved.out, cd), contiguous(saved.lse), scale, causal,
                          dq, dk, dv);
  return {cast_back(dq, q.dtype()), cast_back(dk, k.dtype()), cast_back(dv, v.dtype())};
}

// ---------------------------------------------------------------- cross-entropy

namespace {

// Every target on the host is a class or ignore_index.
void check_targets_on_host(const char* op, const Tensor& targets, int64_t V, int64_t ignore_index) {
  Tensor host = contiguous(targets.device().is_cpu() ? targets : to(targets, Device::cpu()));
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
  if (!range_checks_deferred(targets.device()) || targets.numel() == 0 || V == 0) {
    check_targets_on_host(op, targets, V, ignore_index);
    return contiguous(targets);
  }
  const Device d = targets.device();
  const DType it = targets.dtype();
  Tensor clamped = minimum(maximum(targets, full({}, 0, it, d)), full({}, double(V - 1), it, d));
  Tensor kept = ne(targets, full({}, double(ignore_index), it, d));  // not ignored
  Tensor bad = mul(to(ne(clamped, targets), DType::i64), to(kept, DType::i64));
  detail::defer_check(op, sum(bad), targets, [op, V, ignore_index](const Tensor& host) {
    check_targets_on_host(op, host, V, ignore_index);
  });
  return contiguous(where(kept, clamped, targets));
}

}  // namespace

CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  const char* op = "cross_entropy";
  const Tensor kernel_targets = check_cross_entropy(op, logits, targets, ignore_index);
  const DType cd = compute_dtype(logits.dtype());
  CrossEntropyResult r;
  r.losses = Tensor::empty({logits.size(0)}, cd, logits.device());
  r.lse = Tensor::empty({logits.size(0)}, cd, logits.device());
  backend_for(logits.device())
      .cross_entropy(prepared(logits, cd), kernel_targets, ignore_index, r.losses, r.lse);
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
  backend_for(logits.device())
      .cross_entropy_backward(prepared(dlosses, cd), prepared(logits, cd), kernel_targets, contiguous(saved.lse),
                              ignore_index, d);
  return cast_back(d, logits.dtype());
}

// ---------------------------------------------------------------- AdamW

void adamw_step_(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWParams& p) {
  const char* op = "adamw_step_";
  for (auto [t, what] : {std::pair{&param, "param"}, {&grad, "grad"}, {&m, "m"}, {&v, "v"}}) {
    require_floating(*t, op, what);
    if (t->dtype() != DType::f32 && t->dtype() != DType::f64)
      fail(op, std::string(what) + " must be float32 or float64 (keep master weights and moments in float32), found " +
                   std::string(dtype_name(t->dtype())));
    if (t->dtype() != param.dtype())
      fail(op, std::string(what) + " is " + std::string(dtype_name(t->dtype())) + " but param is " +
                   std::string(dtype_name(param.dtype())));
    require_device(*t, param, op, what);
    require_shape(*t, param.shape(), op, what);
    if (!t->is_contiguous()) fail(op, std::string(what) + " must be contiguous, found strides " + to_string(t->strides()));
  }
  if (p.step < 1) fail(op, "step is 1-based, found " + std::to_string(p.step));
  if (!(p.lr >= 0)) fail(op, "lr must be >= 0, found " + std::to_string(p.lr));
  if (!(p.beta1 >= 0 && p.beta1 < 1) || !(p.beta2 >= 0 && p.beta2 < 1))
    fail(op, "betas must lie in [0, 1), found " + std::to_string(p.beta1) + ", " + std::to_string(p.beta2));
  if (!(p.eps >= 0) || !(p.weight_decay >= 0))
    fail(op, "eps and weight_decay must be >= 0, found " + std::to_string(p.eps) + ", " + std::to_string(p.weight_decay));
  backend_for(param.device()).adamw_step(param, grad, m, v, p);
  param.bump_version();
  m.bump_version();
  v.bump_version();
}

}  // namespace mvgpt::ops
