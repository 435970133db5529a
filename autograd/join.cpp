// Joining and splitting, forward beside backward. split and chunk are narrows (one node per piece),
// so each piece's gradient flows back on its own, into its block of one buffer (NOTE [ Gradient blocks ]
// in engine.cpp).
#include <mvgpt/autograd/op_impl.h>

namespace mvgpt {

namespace {

std::vector<autograd::Edge> edges_to(const std::vector<Tensor>& tensors) {
  std::vector<autograd::Edge> edges;
  edges.reserve(tensors.size());
  for (const Tensor& t : tensors) edges.push_back(edge_to(t));
  return edges;
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int axis) {
  const InternalOps internal;
  Tensor y = ops::cat(tensors, axis);
  if (!needs_grad(tensors)) return y;
  const int ax = normalize_axis(axis, y.dim(), "cat");
  std::vector<int64_t> sizes;
  std::vector<bool> wanted;
  for (const Tensor& t : tensors) {
    sizes.push_back(t.size(ax));
    wanted.push_back(t.requires_grad());
  }
  // Input i's gradient is the slice of g it filled.
  return record("cat", std::move(y), edges_to(tensors), [ax, sizes, wanted](const Tensor& g) -> Grads {
    Grads grads(sizes.size());
    int64_t start = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (wanted[i]) grads[i] = ops::narrow(g, ax, start, sizes[i]);
      start += sizes[i];
    }
    return grads;
  });
}

Tensor stack(const std::vector<Tensor>& tensors, int axis) {
  const InternalOps internal;
  Tensor y = ops::stack(tensors, axis);
  if (!needs_grad(tensors)) return y;
  const int ax = normalize_axis(axis, y.dim(), "stack");
  std::vector<bool> wanted;
  for (const Tensor& t : tensors) wanted.push_back(t.requires_grad());
  return record("stack", std::move(y), edges_to(tensors), [ax, wanted](const Tensor& g) -> Grads {
    Grads grads(wanted.size());
    for (size_t i = 0; i < wanted.size(); ++i)
      if (wanted[i]) grads[i] = ops::select(g, ax, int64_t(i));
    return grads;
  });
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int axis) {
  const InternalOps internal;
  const int ax = normalize_axis(axis, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) throw std::invalid_argument("split: negative size " + std::to_string(s));
    total += s;
  }
  if (total != x.size(ax))
    throw std::invalid_argument("split: sizes add up to " + std::to_string(total) + ", but axis " + std::to_string(ax) +
                                " of " + to_string(x.shape()) + " has size " + std::to_string(x.size(ax)));
  std::vector<Tensor> pieces;
  pieces.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t s : sizes) {
    pieces.push_back(narrow(x, ax, start, s));
    start += s;
  }
  return pieces;
}

std::vector<Tensor> chunk(const Tensor& x, int chunks, int axis) {
  const InternalOps internal;
  if (chunks <= 0) throw std::invalid_argument("chunk: chunks must be positive, found " + std::to_string(chunks));
  const int ax = normalize_axis(axis, x.dim(), "chunk");
  // As PyTorch: pieces of ceil(n / chunks), the last one smaller (fewer pieces when n is small).
  const int64_t n = x.size(ax), piece = (n + chunks - 1) / chunks;
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < n; start += piece) sizes.push_back(std::min(piece, n - start));
  if (n == 0) sizes.assign(size_t(chunks), 0);
  return split(x, sizes, ax);
}

// --- gradient checks ---

namespace autograd {

void register_join_gradchecks(OpRegistry& r) {
  using gc::input;
  r.add("cat", {{"axis 1, three inputs", {input({2, 1}), gc::transposed({2, 3}), input({2, 2})},
                 [](const Inputs& x) { return cat({x[0], x[1], x[2]}, 1); }},
                {"axis 0, one constant", {input({1, 3}), gc::constant(input({2, 3}))},
                 [](const Inputs& x) { return cat({x[0], x[1]}, 0); }}});
  r.add("stack", {{"new middle axis", {input({2, 3}), gc::sliced({2, 3})},
                   [](const Inputs& x) { return stack({x[0], x[1]}, 1); }}});
  // split and chunk return several tensors: the check weighs them into one.
  r.add("split", {{"uneven sizes", {input({2, 6})}, [](const Inputs& x) {
                     auto p = split(x[0], {1, 3, 2}, 1);
                     return cat({p[2] * 3.0, p[0], p[1] * 2.0}, 1);
                   }}});
  r.add("chunk", {{"5 rows in 2 pieces, one unused", {gc::transposed({5, 2})}, [](const Inputs& x) {
                     auto p = chunk(x[0], 2, 0);
                     return p[1] * 2.0;
                   }}});
}

}  // namespace autograd
}  // namespace mvgpt
