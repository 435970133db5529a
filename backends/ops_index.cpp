// Indexing ops: argument and range checks, then one backend call on fresh outputs.
#include <stdexcept>
#include <string>

#include <mvgpt/backends/ops.h>
#include <mvgpt/backends/ops_internal.h>

namespace mvgpt::ops {

namespace {

int check_axis_input(const Tensor& x, const Tensor& index, int axis, const char* op) {
  detail::check_defined(x, op);
  detail::check_defined(index, op, "index");
  check_same_device(x, index, op);
  if (x.dim() == 0)
    throw std::invalid_argument(std::string(op) + ": the input must have at least 1 dimension, found a scalar");
  return normalize_axis(axis, x.dim(), op);
}

void check_vector_index(const Tensor& index, const char* op) {
  if (index.dim() > 1)
    throw std::invalid_argument(std::string(op) + ": index must be 1-d, found shape " + to_string(index.shape()));
}

// gather/scatter_add: index has x's rank and fits in `other` off the axis (and in `all` everywhere).
void check_index_fits(const Tensor& index, const Tensor& other, int axis, bool including_axis, const char* op,
                      const char* what) {
  if (index.dim() != other.dim())
    throw std::invalid_argument(std::string(op) + ": index has " + std::to_string(index.dim()) + " dimensions but " +
                                what + " has " + std::to_string(other.dim()) + " (shapes " +
                                to_string(index.shape()) + " and " + to_string(other.shape()) + ")");
  for (int d = 0; d < index.dim(); ++d)
    if ((d != axis || including_axis) && index.shape()[d] > other.shape()[d])
      throw std::invalid_argument(std::string(op) + ": index of shape " + to_string(index.shape()) +
                                  " is larger than " + what + " of shape " + to_string(other.shape()) +
                                  " in dimension " + std::to_string(d));
}

}  // namespace

Tensor index_select(const Tensor& x, int axis, const Tensor& index) {
  detail::check_no_grad("index_select", {&x});
  int ax = check_axis_input(x, index, axis, "index_select");
  check_vector_index(index, "index_select");
  const Tensor idx = detail::kernel_indices(index, x.shape()[ax], "index_select", ax);
  Shape shape = x.shape();
  shape[ax] = index.numel();
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  const profile::Span span("index_select");
  detail::backend_of(x).index_select(x, ax, idx, out);
  return out;
}

Tensor gather(const Tensor& x, int axis, const Tensor& index) {
  detail::check_no_grad("gather", {&x});
  int ax = check_axis_input(x, index, axis, "gather");
  check_index_fits(index, x, ax, false, "gather", "the input");
  const Tensor idx = detail::kernel_indices(index, x.shape()[ax], "gather", ax);
  Tensor out = Tensor::empty(index.shape(), x.dtype(), x.device());
  const profile::Span span("gather");
  detail::backend_of(x).gather(x, ax, idx, out);
  return out;
}

namespace {
using ScatterInPlace = void (*)(const Tensor&, int, const Tensor&, const Tensor&);

// The out-of-place op: its in-place one on a copy of x (x checked first, so that an error names the op).
Tensor on_a_copy(const char* op, ScatterInPlace in_place, const Tensor& x, int axis, const Tensor& index,
                 const Tensor& src) {
  detail::check_no_grad(op, {&x, &src});
  detail::check_defined(x, op);
  Tensor out = clone(x);
  in_place(out, axis, index, src);
  return out;
}

// An in-place op's own checks of x: defined, and contiguous (an expanded x would add twice into one element).
void check_in_place_target(const char* op, const std::string& name, const Tensor& x, const Tensor& src) {
  detail::check_no_grad(op, {&x, &src});
  detail::check_defined(x, name.c_str());
  if (!x.is_contiguous()) throw std::invalid_argument(name + ": x of shape " + to_string(x.shape()) + " is not contiguous");
}
}  // namespace

Tensor index_add(const Tensor& x, int axis, const Tensor& index, const Tensor& src) {
  return on_a_copy("index_add", index_add_, x, axis, index, src);
}

void index_add_(const Tensor& x, int axis, const Tensor& index, const Tensor& src) {
  check_in_place_target("index_add", "index_add_", x, src);
  int ax = check_axis_input(x, index, axis, "index_add");
  check_same_device(x, src, "index_add");
  check_same_dtype(x, src, "index_add");
  check_vector_index(index, "index_add");
  Shape expected = x.shape();
  expected[ax] = index.numel();
  if (!(src.shape() == expected))
    throw std::invalid_argument("index_add: src of shape " + to_string(src.shape()) + " does not match " +
                                to_string(expected) + " (the input's shape with axis " + std::to_string(ax) +
                                " of the index's length)");
  const Tensor idx = detail::kernel_indices(index, x.shape()[ax], "index_add", ax);
  const profile::Span span("index_add");
  detail::backend_of(x).index_add(x, ax, idx, src);
  x.bump_version();
}

Tensor scatter_add(const Tensor& x, int axis, const Tensor& index, const Tensor& src) {
  return on_a_copy("scatter_add", scatter_add_, x, axis, index, src);
}

void scatter_add_(const Tensor& x, int axis, const Tensor& index, const Tensor& src) {
  check_in_place_target("scatter_add", "scatter_add_", x, src);
  int ax = check_axis_input(x, index, axis, "scatter_add");
  check_same_device(x, src, "scatter_add");
  check_same_dtype(x, src, "scatter_add");
  check_index_fits(index, src, ax, true, "scatter_add", "src");
  check_index_fits(index, x, ax, false, "scatter_add", "the input");
  const Tensor idx = detail::kernel_indices(index, x.shape()[ax], "scatter_add", ax);
  // Only the part of src that the index covers takes part.
  Tensor s = src;
  for (int d = 0; d < src.dim(); ++d) s = views::narrow(s, d, 0, index.shape()[d]);
  const profile::Span span("scatter_add");
  detail::backend_of(x).scatter_add(x, ax, idx, s);
  x.bump_version();
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  check_dim(weight, 2, "embedding", "weight");
  detail::check_defined(ids, "embedding", "ids");
  Tensor rows = index_select(weight, 0, reshape(ids, {ids.numel()}));  // (N, C)
  Shape shape = ids.shape();
  shape.push_back(weight.shape()[1]);
  return *views::try_reshape(rows, shape);
}

}  // namespace mvgpt::ops
