// Joining and splitting along an axis. split/chunk return views; cat/stack copy into a fresh tensor.
#include <stdexcept>
#include <string>

#include <mvgpt/backends/ops.h>
#include <mvgpt/backends/ops_internal.h>

namespace mvgpt::ops {

Tensor cat(const std::vector<Tensor>& tensors, int axis) {
  if (tensors.empty()) throw std::invalid_argument("cat: expected at least one tensor, found none");
  const Tensor& first = tensors[0];
  detail::check_defined(first, "cat");
  for (const Tensor& t : tensors) detail::check_no_grad("cat", {&t});
  if (first.dim() == 0) throw std::invalid_argument("cat: cannot concatenate scalars (use stack)");
  const int ax = normalize_axis(axis, first.dim(), "cat");
  Shape shape = first.shape();
  shape[ax] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    check_same_device(first, t, "cat");
    check_same_dtype(first, t, "cat");
    bool ok = t.dim() == first.dim();
    for (int d = 0; ok && d < t.dim(); ++d) ok = d == ax || t.shape()[d] == first.shape()[d];
    if (!ok)
      throw std::invalid_argument("cat: tensor " + std::to_string(i) + " has shape " + to_string(t.shape()) +
                                  ", which differs from " + to_string(first.shape()) + " outside axis " +
                                  std::to_string(ax));
    shape[ax] += t.shape()[ax];
  }
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  Backend& be = detail::backend_of(first);
  const profile::Span span("concat");
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    int64_t n = t.shape()[ax];
    if (n > 0 && t.numel() > 0) be.copy(t, views::narrow(out, ax, offset, n));
    offset += n;
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int axis) {
  if (tensors.empty()) throw std::invalid_argument("stack: expected at least one tensor, found none");
  detail::check_defined(tensors[0], "stack");
  const int ax = normalize_axis(axis, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    detail::check_defined(tensors[i], "stack");
    if (!(tensors[i].shape() == tensors[0].shape()))
      throw std::invalid_argument("stack: tensor " + std::to_string(i) + " has shape " +
                                  to_string(tensors[i].shape()) + ", expected " + to_string(tensors[0].shape()));
    parts.push_back(views::unsqueeze(tensors[i], ax));
  }
  return cat(parts, ax);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int axis) {
  detail::check_defined(x, "split");
  const int ax = normalize_axis(axis, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) throw std::invalid_argument("split: negative size " + std::to_string(s));
    total += s;
  }
  if (total != x.shape()[ax])
    throw std::invalid_argument("split: sizes add up to " + std::to_string(total) + " but axis " + std::to_string(ax) +
                                " has size " + std::to_string(x.shape()[ax]));
  std::vector<Tensor> out;
  int64_t offset = 0;
  for (int64_t s : sizes) {
    out.push_back(views::narrow(x, ax, offset, s));
    offset += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& x, int chunks, int axis) {
  detail::check_defined(x, "chunk");
  if (chunks <= 0) throw std::invalid_argument("chunk: chunks must be positive, found " + std::to_string(chunks));
  const int ax = normalize_axis(axis, x.dim(), "chunk");
  const int64_t n = x.shape()[ax];
  // As PyTorch: pieces of ceil(n / chunks), the last one smaller, possibly fewer than `chunks`.
  const int64_t step = std::max<int64_t>(1, (n + chunks - 1) / chunks);
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < n; start += step) sizes.push_back(std::min(step, n - start));
  if (sizes.empty()) sizes.push_back(0);
  return split(x, sizes, ax);
}

}  // namespace mvgpt::ops
