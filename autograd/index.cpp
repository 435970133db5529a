// Indexing ops, forward beside backward. Index tensors are integers and get no gradient; the
// backward of a read (index_select, gather, embedding) is the matching scatter into zeros (in place:
// the zeros are its own, so no copy of them).
#include <mvgpt/autograd/op_impl.h>

namespace mvgpt {

Tensor index_select(const Tensor& x, int axis, const Tensor& index) {
  const InternalOps internal;
  Tensor y = ops::index_select(x, axis, index);
  if (!needs_grad(x)) return y;
  return record("index_select", std::move(y), {edge_to(x)},
                [axis, in = x.shape(), si = SavedTensor(index)](const Tensor& g) -> Grads {
                  Tensor dx = ops::zeros(in, g.dtype(), g.device());
                  ops::index_add_(dx, axis, si.unpack("index_select"), g);
                  return {dx};
                });
}

Tensor gather(const Tensor& x, int axis, const Tensor& index) {
  const InternalOps internal;
  Tensor y = ops::gather(x, axis, index);
  if (!needs_grad(x)) return y;
  return record("gather", std::move(y), {edge_to(x)},
                [axis, in = x.shape(), si = SavedTensor(index)](const Tensor& g) -> Grads {
                  Tensor dx = ops::zeros(in, g.dtype(), g.device());
                  ops::scatter_add_(dx, axis, si.unpack("gather"), g);
                  return {dx};
                });
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  const InternalOps internal;
  Tensor y = ops::embedding(weight, ids);  // (..., C)
  if (!needs_grad(weight)) return y;
  return record("embedding", std::move(y), {edge_to(weight)},
                [in = weight.shape(), si = SavedTensor(ids)](const Tensor& g) -> Grads {
                  // Rows of g added into the rows of dweight their ids name; repeated ids accumulate.
                  Tensor flat_ids = ops::reshape(si.unpack("embedding"), {-1});  // (N)
                  Tensor rows = ops::reshape(g, {-1, in[1]});                     // (N, C)
                  Tensor dweight = ops::zeros(in, g.dtype(), g.device());
                  ops::index_add_(dweight, 0, flat_ids, rows);
                  return {dweight};
                });
}

Tensor index_add(const Tensor& x, int axis, const Tensor& index, const Tensor& src) {
  const InternalOps internal;
  Tensor y = ops::index_add(x, axis, index, src);
  if (!needs_grad(x, src)) return y;
  bool need_src = src.requires_grad();
  return record("index_add", std::move(y), {edge_to(x), edge_to(src)},
                [axis, need_src, si = SavedTensor(index)](const Tensor& g) -> Grads {
                  return {g, need_src ? ops::index_select(g, axis, si.unpack("index_add")) : Tensor()};
                });
}

Tensor scatter_add(const Tensor& x, int axis, const Tensor& index, const Tensor& src) {
  const InternalOps internal;
  Tensor y = ops::scatter_add(x, axis, index, src);
  if (!needs_grad(x, src)) return y;
  bool need_src = src.requires_grad();
  return record("scatter_add", std::move(y), {edge_to(x), edge_to(src)},
                [axis, need_src, si = SavedTensor(index)](const Tensor& g) -> Grads {
                  return {g, need_src ? ops::gather(g, axis, si.unpack("scatter_add")) : Tensor()};
                });
}

// --- gradient checks ---

namespace autograd {

void register_index_gradchecks(OpRegistry& r) {
  using gc::indices;
  using gc::input;
  // Indices are drawn with repeats, so the scatter backward must accumulate.
  r.add("index_select", {{"axis 0 with repeats", {input({4, 3}), indices({6}, 4)},
                          [](const Inputs& x) { return index_select(x[0], 0, x[1]); }},
                         {"axis 1, transposed", {gc::transposed({3, 4}), indices({5}, 4)},
                          [](const Inputs& x) { return index_select(x[0], 1, x[1]); }}});
  r.add("gather", {{"axis 1", {input({3, 4}), indices({3, 2}, 4)}, [](const Inputs& x) { return gather(x[0], 1, x[1]); }},
                   {"axis 0, sliced", {gc::sliced({3, 2}), indices({5, 2}, 3)},
                    [](const Inputs& x) { return gather(x[0], 0, x[1]); }}});
  r.add("embedding", {{"2-d ids with repeats", {input({5, 3}), indices({2, 4}, 5)},
                       [](const Inputs& x) { return embedding(x[0], x[1]); }},
                      {"transposed weight", {gc::transposed({4, 2}), indices({6}, 4)},
                       [](const Inputs& x) { return embedding(x[0], x[1]); }}});
  r.add("index_add", {{"axis 0", {input({4, 3}), indices({5}, 4), input({5, 3})},
                       [](const Inputs& x) { return index_add(x[0], 0, x[1], x[2]); }},
                      {"axis 1, transposed source", {input({2, 4}), indices({3}, 4), gc::transposed({2, 3})},
                       [](const Inputs& x) { return index_add(x[0], 1, x[1], x[2]); }}});
  r.add("scatter_add", {{"axis 1", {input({3, 4}), indices({3, 5}, 4), input({3, 5})},
                         [](const Inputs& x) { return scatter_add(x[0], 1, x[1], x[2]); }},
                        {"axis 0, sliced source", {input({2, 3}), indices({4, 3}, 2), gc::sliced({4, 3})},
                         [](const Inputs& x) { return scatter_add(x[0], 0, x[1], x[2]); }}});
}

}  // namespace autograd
}  // namespace mvgpt
