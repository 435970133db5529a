// Copies and conversions between layouts, dtypes and devices.
#include <stdexcept>
#include <string>
#include <utility>

#include <mvgpt/backends/deferred_checks.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/backends/ops_internal.h>
#include <mvgpt/tensor/grad_state.h>

namespace mvgpt::ops {

Tensor clone(const Tensor& t) {
  detail::check_no_grad("clone", {&t});
  detail::check_defined(t, "clone");
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  const profile::Span span = detail::copy_span(t, out);
  detail::backend_of(t).copy(t, out);
  return out;
}

Tensor contiguous(const Tensor& t) {
  detail::check_no_grad("contiguous", {&t});
  detail::check_defined(t, "contiguous");
  return t.is_contiguous() ? t : clone(t);
}

Tensor to(const Tensor& t, DType dtype) {
  detail::check_no_grad("to", {&t});
  detail::check_defined(t, "to");
  if (t.dtype() == dtype) return t;
  Tensor out = Tensor::empty(t.shape(), dtype, t.device());
  const profile::Span span = detail::copy_span(t, out);
  detail::backend_of(t).copy(t, out);
  return out;
}

Tensor to(const Tensor& t, Device device) {
  detail::check_no_grad("to", {&t});
  detail::check_defined(t, "to");
  if (t.device() == device) return t;
  // Nothing computed past an out-of-range index reaches the host (NOTE [ Deferred range checks ]).
  if (device.is_cpu()) check_deferred_errors();
  // The device that is not the host does the transfer (and throws when it is not built in).
  Backend& be = backend_for(device.is_cpu() ? t.device() : device);
  Tensor src = contiguous(t);
  Tensor out = Tensor::empty(t.shape(), t.dtype(), device);
  const profile::Span span("copy between devices");
  be.copy_between_devices(src, out);
  return out;
}

static bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.storage() != b.storage() || a.numel() == 0 || b.numel() == 0) return false;
  // Conservative: compare the byte ranges each view can touch.
  auto range = [](const Tensor& t) {
    int64_t lo = t.offset(), hi = t.offset();
    for (int d = 0; d < t.dim(); ++d) {
      int64_t ext = (t.shape()[d] - 1) * t.strides()[d];
      if (ext < 0) lo += ext;
      else hi += ext;
    }
    size_t es = dtype_size(t.dtype());
    return std::pair<int64_t, int64_t>(lo * int64_t(es), (hi + 1) * int64_t(es));
  };
  auto [alo, ahi] = range(a);
  auto [blo, bhi] = range(b);
  return alo < bhi && blo < ahi;
}

}  // namespace mvgpt::ops

namespace mvgpt {

namespace detail = ops::detail;
using ops::to;

// An in-place write records nothing: with grad mode on (outside a differentiable op's own forward)
// a tensor that requires grad is refused, in every build.
static void refuse_grad(const char* op, std::initializer_list<const Tensor*> tensors) {
  if (!autograd::detail::grad_mode_flag() || autograd::detail::internal_ops_depth() > 0) return;
  for (const Tensor* t : tensors)
    if (t->defined() && t->requires_grad())
      throw std::logic_error(std::string(op) + ": an in-place write to or from a tensor that requires grad records no "
                             "gradient; run it under NoGradGuard (as param.copy_() under torch.no_grad())");
}

void copy_(const Tensor& dst, const Tensor& src) {
  detail::check_defined(dst, "copy_", "dst");
  detail::check_defined(src, "copy_", "src");
  refuse_grad("copy_", {&dst, &src});
  Tensor s = src.device() == dst.device() ? src : to(src, dst.device());
  bool fits = s.dim() <= dst.dim();
  for (int d = 1; fits && d <= s.dim(); ++d)
    fits = s.shape()[s.dim() - d] == 1 || s.shape()[s.dim() - d] == dst.shape()[dst.dim() - d];
  if (!fits)
    throw std::invalid_argument("copy_: src of shape " + to_string(src.shape()) + " does not broadcast to dst shape " +
                                to_string(dst.shape()));
  // Reading what we write (x[1:] <- x[:-1]) would see half-updated values: copy the source first.
  if (ops::overlaps(dst, s)) s = ops::clone(s);
  const profile::Span span = detail::copy_span(s, dst);
  detail::backend_of(dst).copy(detail::expand_to(s, dst.shape()), dst);
  dst.bump_version();
}

void fill_(const Tensor& dst, double value) {
  detail::check_defined(dst, "fill_", "dst");
  refuse_grad("fill_", {&dst});
  const profile::Span span("fill");
  detail::backend_of(dst).fill(dst, value);
  dst.bump_version();
}

}  // namespace mvgpt
