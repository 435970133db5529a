#pragma once
// Host-side planning of the indexing kernels, shared by the CPU and CUDA backends: index_select
// and index_add are gather and scatter_add with the index expanded (stride 0 off the axis), a
// gather reads the source with its axis stride zeroed (the index supplies that coordinate), and a
// scatter_add walks the positions off the axis, each along the whole axis in index order.
// Header-only, no allocation.
#include <cstdint>
#include <stdexcept>
#include <string>

#include <mvgpt/tensor/shape.h>
#include <mvgpt/tensor/tensor.h>

namespace mvgpt::index_plan {

// Calls f(int64_t{}) or f(int32_t{}) for an index of that dtype. Others never get here (the ops
// layer checks): a logic error whose message starts with `who`.
template <typename F>
void dispatch_index(const Tensor& index, const char* who, F&& f) {
  if (index.dtype() == DType::i64) f(int64_t{});
  else if (index.dtype() == DType::i32) f(int32_t{});
  else
    throw std::logic_error(std::string(who) + ": index dtype " + std::string(dtype_name(index.dtype())) +
                           " reached the kernel");
}

// Strides of a 1-d `index` seen over an ndim-d shape along `axis` (0 elsewhere).
inline Strides along_axis(const Tensor& index, int axis, int ndim) {
  Strides s;
  s.resize(ndim, 0);
  s[axis] = index.dim() == 0 ? 0 : index.strides()[0];
  return s;
}

// The source of a gather: its strides with the axis one zeroed, and that stride for index * stride.
struct GatherSource {
  Strides strides;
  int64_t axis_stride = 0;
};

inline GatherSource gather_source(const Tensor& src, int axis) {
  GatherSource g;
  g.strides = src.strides();
  g.axis_stride = g.strides[axis];
  g.strides[axis] = 0;
  return g;
}

// dst[pos with axis coordinate index[pos]] += src[pos] over src's shape, split into the positions
// off the axis (the operands' shape and strides without it) and the strides along it.
struct ScatterAddPlan {
  Shape positions;          // src's shape without the axis
  Strides dst, src, index;  // strides over `positions`
  int64_t length = 0;       // src's extent along the axis
  int64_t dst_axis = 0, src_axis = 0, index_axis = 0;  // strides along the axis
};

inline ScatterAddPlan plan_scatter_add(const Tensor& dst, int axis, const Strides& index_strides, const Tensor& src) {
  ScatterAddPlan p;
  p.positions = src.shape();
  p.dst = dst.strides(), p.src = src.strides(), p.index = index_strides;
  p.length = src.shape()[axis];
  p.dst_axis = p.dst[axis], p.src_axis = p.src[axis], p.index_axis = p.index[axis];
  p.positions.erase(axis);
  p.dst.erase(axis);
  p.src.erase(axis);
  p.index.erase(axis);
  return p;
}

}  // namespace mvgpt::index_plan
