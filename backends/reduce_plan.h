#pragma once
// Host-side planning of reductions and softmax, shared by the CPU and CUDA backends: the input's
// dims split into the kept (outer) ones and the reduced (inner) ones. Header-only, no allocation.
#include <cstdint>

#include <mvgpt/tensor/shape.h>
#include <mvgpt/tensor/tensor.h>

namespace mvgpt::reduce_plan {

// x's dims [0, k) (outer: one output element each) and [k, ndim) (inner: reduced), with x's strides.
struct DimSplit {
  Shape outer_shape, inner_shape;
  Strides outer_strides, inner_strides;
  int64_t outer_numel = 1, inner_numel = 1;
};

inline DimSplit split_dims(const Tensor& x, int k) {
  DimSplit s;
  for (int d = 0; d < x.dim(); ++d) {
    (d < k ? s.outer_shape : s.inner_shape).push_back(x.shape()[d]);
    (d < k ? s.outer_strides : s.inner_strides).push_back(x.strides()[d]);
  }
  s.outer_numel = numel(s.outer_shape);
  s.inner_numel = numel(s.inner_shape);
  return s;
}

}  // namespace mvgpt::reduce_plan
