// Reductions, softmax and sum_to. The reduced axes are permuted to the end (a view) so the backend
// sees one layout: out's shape followed by the reduced dims.
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include <mvgpt/backends/ops.h>
#include <mvgpt/backends/ops_internal.h>

namespace mvgpt::ops {

namespace {

// Sorted, normalized, de-duplicated axes; empty means all of them.
std::vector<bool> reduced_mask(const Axes& axes, int ndim, const char* op) {
  std::vector<bool> mask(size_t(ndim), axes.empty());
  for (int a : axes) {
    int ax = normalize_axis(a, ndim, op);
    if (mask[size_t(ax)])
      throw std::invalid_argument(std::string(op) + ": axis " + std::to_string(ax) + " appears twice");
    mask[size_t(ax)] = true;
  }
  return mask;
}

Shape kept_shape(const Shape& s, const std::vector<bool>& mask, bool keepdim) {
  Shape out;
  for (int d = 0; d < s.size(); ++d) {
    if (!mask[size_t(d)]) out.push_back(s[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// Runs `op` over the masked axes of x (already in a dtype the backend reduces) into `out_dtype`.
Tensor reduce_impl(ReduceOp op, const Tensor& x, const std::vector<bool>& mask, bool keepdim, DType out_dtype,
                   const char* name) {
  if (op != ReduceOp::argmax) detail::check_no_grad(name, {&x});  // indices lose nothing
  std::vector<int> perm;
  int64_t reduced = 1;
  for (int d = 0; d < x.dim(); ++d)
    if (!mask[size_t(d)]) perm.push_back(d);
  for (int d = 0; d < x.dim(); ++d)
    if (mask[size_t(d)]) perm.push_back(d), reduced *= x.shape()[d];
  Shape out_shape = kept_shape(x.shape(), mask, false);
  if (op != ReduceOp::sum && reduced == 0 && numel(out_shape) > 0)
    throw std::invalid_argument(std::string(name) + ": cannot reduce over zero elements (input shape " +
                                to_string(x.shape()) + ")");
  Tensor out = Tensor::empty(out_shape, out_dtype, x.device());
  const profile::Span span(name);
  detail::backend_of(x).reduce(op, views::permute(x, perm), out);
  if (keepdim) return *views::try_reshape(out, kept_shape(x.shape(), mask, true));
  return out;
}

void check_reducible(const Tensor& x, const char* op) {
  detail::check_defined(x, op);
  if (x.dtype() == DType::boolean)
    throw std::invalid_argument(std::string(op) + ": not defined for dtype bool (convert with to(x, DType::i64))");
}

Tensor scalar_like(double v, const Tensor& t) { return full({}, v, t.dtype(), t.device()); }

}  // namespace

Tensor sum(const Tensor& x, const Axes& axes, bool keepdim) {
  detail::check_defined(x, "sum");
  auto mask = reduced_mask(axes, x.dim(), "sum");
  // Integer and bool sums accumulate and return int64, as in PyTorch.
  Tensor in = is_floating(x.dtype()) ? detail::widen(x) : to(x, DType::i64);
  Tensor out = reduce_impl(ReduceOp::sum, in, mask, keepdim, in.dtype(), "sum");
  return detail::narrow_result(out, x.dtype());
}

Tensor mean(const Tensor& x, const Axes& axes, bool keepdim) {
  check_floating(x, "mean");
  auto mask = reduced_mask(axes, x.dim(), "mean");
  int64_t count = 1;
  for (int d = 0; d < x.dim(); ++d)
    if (mask[size_t(d)]) count *= x.shape()[d];
  Tensor in = detail::widen(x);
  Tensor s = reduce_impl(ReduceOp::sum, in, mask, keepdim, in.dtype(), "mean");
  // count == 0 gives 0 * inf = NaN, as PyTorch's mean of nothing.
  Tensor out = mul(s, count == 0 ? INFINITY : 1.0 / double(count));
  return detail::narrow_result(out, x.dtype());
}

static Tensor extreme(ReduceOp op, const Tensor& x, const Axes& axes, bool keepdim, const char* name) {
  check_reducible(x, name);
  auto mask = reduced_mask(axes, x.dim(), name);
  Tensor in = detail::widen(x);
  return detail::narrow_result(reduce_impl(op, in, mask, keepdim, in.dtype(), name), x.dtype());
}

Tensor max(const Tensor& x, const Axes& axes, bool keepdim) { return extreme(ReduceOp::max, x, axes, keepdim, "max"); }
Tensor min(const Tensor& x, const Axes& axes, bool keepdim) { return extreme(ReduceOp::min, x, axes, keepdim, "min"); }

Tensor argmax_impl(const Tensor& x, int axis, bool keepdim) {
  check_reducible(x, "argmax");
  int ax = normalize_axis(axis, std::max(x.dim(), 1), "argmax");
  if (x.dim() == 0) return zeros({}, DType::i64, x.device());
  return reduce_impl(ReduceOp::argmax, detail::widen(x), reduced_mask({ax}, x.dim(), "argmax"), keepdim, DType::i64,
                     "argmax");
}

Tensor logsumexp(const Tensor& x, const Axes& axes, bool keepdim) {
  check_floating(x, "logsumexp");
  auto mask = reduced_mask(axes, x.dim(), "logsumexp");
  Tensor in = detail::widen(x);
  int64_t count = 1;
  for (int d = 0; d < x.dim(); ++d)
    if (mask[size_t(d)]) count *= x.shape()[d];
  if (count == 0)  // log(0) = -inf, as PyTorch
    return detail::narrow_result(full(kept_shape(x.shape(), mask, keepdim), -INFINITY, in.dtype(), x.device()),
                                 x.dtype());
  // Shift by the max; an infinite max (all -inf, or +inf present) shifts by 0 instead, so that
  // -inf rows give log(0) = -inf and +inf gives +inf rather than inf - inf = NaN.
  Tensor m = reduce_impl(ReduceOp::max, in, mask, true, in.dtype(), "logsumexp");
  Tensor shift = where(lt(abs(m), scalar_like(INFINITY, m)), m, scalar_like(0, m));
  Tensor s = reduce_impl(ReduceOp::sum, exp(sub(in, shift)), mask, keepdim, in.dtype(), "logsumexp");
  Tensor out = add(log(s), keepdim ? shift : *views::try_reshape(shift, s.shape()));
  return detail::narrow_result(out, x.dtype());
}

static Tensor softmax_impl(const Tensor& x, int axis, bool log, const char* name) {
  detail::check_no_grad(name, {&x});
  check_floating(x, name);
  if (x.dim() == 0) return log ? zeros_like(x) : ones_like(x);
  int ax = normalize_axis(axis, x.dim(), name);
  Tensor in = detail::widen(x);
  const int last = x.dim() - 1;
  Tensor src = ax == last ? in : views::transpose(in, ax, last);
  Tensor out = Tensor::empty(src.shape(), in.dtype(), x.device());
  const profile::Span span(log ? "log_softmax" : "softmax");
  detail::backend_of(x).softmax(src, out, log);
  if (ax != last) out = contiguous(views::transpose(out, ax, last));
  return detail::narrow_result(out, x.dtype());
}

Tensor softmax(const Tensor& x, int axis) { return softmax_impl(x, axis, false, "softmax"); }
Tensor log_softmax(const Tensor& x, int axis) { return softmax_impl(x, axis, true, "log_softmax"); }

Tensor sum_to(const Tensor& x, const Shape& shape) {
  detail::check_defined(x, "sum_to");
  if (x.shape() == shape) return x;
  const int n = x.dim(), k = shape.size();
  bool ok = k <= n;
  Axes axes;
  for (int d = 0; ok && d < n; ++d) {
    int j = d - (n - k);
    if (j < 0) axes.push_back(d);  // leading dims broadcast from nothing
    else if (shape[j] == 1 && x.shape()[d] != 1) axes.push_back(d);
    else ok = shape[j] == x.shape()[d];
  }
  if (!ok)
    throw std::invalid_argument("sum_to: shape " + to_string(shape) + " does not broadcast to the input's shape " +
                                to_string(x.shape()));
  Tensor s = sum(x, axes, true);
  return *views::try_reshape(s, shape);  // drops the leading size-1 dims; s is contiguous
}

std::pair<Tensor, Tensor> to_bf16_with_column_sums(const Tensor& x) {
  const char* op = "to_bf16_with_column_sums";
  detail::check_no_grad(op, {&x});
  detail::check_defined(x, op);
  if (x.dim() != 2 || x.dtype() != DType::f32)
    throw std::invalid_argument(std::string(op) + ": x must be a float32 matrix (R, C), found " +
                                std::string(dtype_name(x.dtype())) + " of shape " + to_string(x.shape()));
  // A strided x takes the two ops themselves: their values are what the pass must give.
  if (!x.is_contiguous()) return {to(x, DType::bf16), sum(x, {0})};
  Tensor out = Tensor::empty(x.shape(), DType::bf16, x.device());
  Tensor sums = Tensor::empty({x.size(1)}, DType::f32, x.device());
  const profile::Span span("convert", [] { return profile::Detail{"float32->bfloat16 with column sums"}; });
  detail::backend_of(x).convert_with_column_sums(x, out, sums);
  return {out, sums};
}

}  // namespace mvgpt::ops

namespace mvgpt {

Tensor argmax(const Tensor& x, int axis, bool keepdim) { return ops::argmax_impl(x, axis, keepdim); }

}  // namespace mvgpt
