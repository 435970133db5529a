#pragma once
// N same-shape strided operands (an output and its inputs) walked in row-major order by a flat
// element index. Built on the host from their merged dimensions (backends/merged_dims.h, as the
// CPU's make_layout) and passed to kernels by value; offsets() is host/device so a host test checks
// exactly the arithmetic the kernels run.
#include <array>
#include <cstdint>

#include <mvgpt/backends/elementwise_math.h>  // MVGPT_HOST_DEVICE
#include <mvgpt/backends/merged_dims.h>
#include <mvgpt/tensor/shape.h>

namespace mvgpt::cuda {

template <int N>
struct StridedIndexer : MergedDims<N> {
  bool contiguous = true;  // every operand's offset is the element index itself

  // off[k] = offset (in elements, from the first element) of row-major element i in operand k.
  MVGPT_HOST_DEVICE void offsets(int64_t i, int64_t* off) const {
    if (contiguous) {
      for (int k = 0; k < N; ++k) off[k] = i;
      return;
    }
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = this->ndim - 1; d >= 0; --d) {
      const int64_t c = i % this->shape[d];
      i /= this->shape[d];
      for (int k = 0; k < N; ++k) off[k] += c * this->strides[k][d];
    }
  }
};

template <int N>
StridedIndexer<N> make_indexer(const Shape& shape, const std::array<const Strides*, N>& strides) {
  StridedIndexer<N> ix;
  merge_dims<N>(shape, strides, ix);
  ix.contiguous = ix.ndim == 0 || ix.ndim == 1;
  for (int k = 0; k < N && ix.contiguous; ++k) ix.contiguous = ix.ndim == 0 || ix.strides[k][0] == 1;
  return ix;
}

}  // namespace mvgpt::cuda
