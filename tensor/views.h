#pragma once
// Views: new layouts on the same storage. Pure layout arithmetic, no data moves and no gradient
// is recorded here (autograd/ops.h wraps these with their backward).
#include <optional>
#include <vector>

#include <mvgpt/tensor/tensor.h>

namespace mvgpt::views {

// Resolves one -1 in `shape` so that it holds `numel` elements; throws naming `op` when impossible.
Shape infer_shape(const Shape& shape, int64_t numel, const char* op);
// Strides that let `shape`'s layout be read as `new_shape` without a copy, if any exist.
std::optional<Strides> reshape_strides(const Shape& shape, const Strides& strides, const Shape& new_shape);
// A view with `new_shape`, or nullopt when the layout needs a copy first.
std::optional<Tensor> try_reshape(const Tensor& t, const Shape& new_shape);

Tensor permute(const Tensor& t, const std::vector<int>& axes);
Tensor transpose(const Tensor& t, int axis0, int axis1);
// Elements [start, start + length) along axis.
Tensor narrow(const Tensor& t, int axis, int64_t start, int64_t length);
// Removes `axis` by picking one index along it.
Tensor select(const Tensor& t, int axis, int64_t index);
// Broadcasts size-1 (or missing leading) dimensions to `shape` with stride 0.
Tensor expand(const Tensor& t, const Shape& shape);
Tensor squeeze(const Tensor& t, int axis);
Tensor unsqueeze(const Tensor& t, int axis);

}  // namespace mvgpt::views
