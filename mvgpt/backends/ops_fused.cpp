// The fused ops not yet moved to units of mvgpt/fused/: argument checks, layout and dtype
// preparation, allocation and dispatch for rope, attention and cross-entropy. Kernels compute in float32 or float64:
// bfloat16 inputs are widened to float32 here and the results that mirror an input are cast back.
// Saved statistics (mean, rstd, lse, per-row losses) stay in the compute dtype.
#include <cmath>
#include <stdexcept>
#include <string>

#include <mvgpt/backends/deferred_checks.h>
#include <mvgpt/backends/fused_checks.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/backends/ops_internal.h>

namespace mvgpt::ops {
namespace {

using fused::cast_back;
using fused::check_grad_like;
using fused::compute_dtype;
using fused::fail;
using fused::prepared;
using fused::prepared_heads;
using fused::require_defined;
using fused::require_device;
using fused::require_floating;
using fused::require_int;
using fused::require_shape;
using fused::rows_shape;

}  // namespace

// ---------------------------------------------------------------- rope

Tensor rope(const Tensor& x, const Tensor& positions, double base, RopeLayout layout, bool inverse) {
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
  const DType cd = compute_dtype(x.dtype());
  Tensor xc = x.dtype() == cd && (D <= 1 || x.strides()[x.dim() - 1] == 1) ? x : contiguous(to(x, cd));
  Tensor out = Tensor::empty(x.shape(), cd, x.device());
  backend_for(x.device()).rope(xc, contiguous(positions), base, layout, inverse, out);
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

}  // namespace mvgpt::ops
