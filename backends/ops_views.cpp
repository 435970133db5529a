// Views: layout changes that share storage. reshape copies only when no strides can express it.
#include <stdexcept>
#include <string>

#include <mvgpt/backends/ops.h>
#include <mvgpt/backends/ops_internal.h>

namespace mvgpt::ops {

Tensor reshape(const Tensor& t, const Shape& shape) {
  detail::check_no_grad("reshape", {&t});
  detail::check_defined(t, "reshape");
  if (auto v = views::try_reshape(t, shape)) return *v;
  return *views::try_reshape(clone(t), shape);  // a contiguous copy always reshapes
}

Tensor flatten(const Tensor& t, int start_axis, int end_axis) {
  detail::check_no_grad("flatten", {&t});
  detail::check_defined(t, "flatten");
  if (t.dim() == 0) return reshape(t, {1});
  int s = normalize_axis(start_axis, t.dim(), "flatten");
  int e = normalize_axis(end_axis, t.dim(), "flatten");
  if (s > e)
    throw std::invalid_argument("flatten: start axis " + std::to_string(s) + " comes after end axis " +
                                std::to_string(e));
  Shape out;
  for (int d = 0; d < s; ++d) out.push_back(t.shape()[d]);
  int64_t n = 1;
  for (int d = s; d <= e; ++d) n *= t.shape()[d];
  out.push_back(n);
  for (int d = e + 1; d < t.dim(); ++d) out.push_back(t.shape()[d]);
  return reshape(t, out);
}

Tensor permute(const Tensor& t, const std::vector<int>& axes) {
  detail::check_no_grad("permute", {&t});
  detail::check_defined(t, "permute");
  return views::permute(t, axes);
}
Tensor transpose(const Tensor& t, int axis0, int axis1) {
  detail::check_no_grad("transpose", {&t});
  detail::check_defined(t, "transpose");
  return views::transpose(t, axis0, axis1);
}
Tensor narrow(const Tensor& t, int axis, int64_t start, int64_t length) {
  detail::check_no_grad("narrow", {&t});
  detail::check_defined(t, "narrow");
  return views::narrow(t, axis, start, length);
}
Tensor select(const Tensor& t, int axis, int64_t index) {
  detail::check_no_grad("select", {&t});
  detail::check_defined(t, "select");
  return views::select(t, axis, index);
}
Tensor expand(const Tensor& t, const Shape& shape) {
  detail::check_no_grad("expand", {&t});
  detail::check_defined(t, "expand");
  return views::expand(t, shape);
}
Tensor squeeze(const Tensor& t, int axis) {
  detail::check_no_grad("squeeze", {&t});
  detail::check_defined(t, "squeeze");
  return views::squeeze(t, axis);
}
Tensor unsqueeze(const Tensor& t, int axis) {
  detail::check_no_grad("unsqueeze", {&t});
  detail::check_defined(t, "unsqueeze");
  return views::unsqueeze(t, axis);
}

}  // namespace mvgpt::ops
