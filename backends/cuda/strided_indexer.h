#pragma once
// N same-shape strided operands (an output and its inputs) walked in row-major order by a flat
// element index. Built on the host (size-1 dims dropped, neighbours contiguous in every operand
// merged, as the CPU's make_layout does) and passed to kernels by value; offsets() is host/device
// so a host test checks exactly the arithmetic the kernels run.
#include <array>
#include <cstdint>

#include "backends/elementwise_math.h"  // MVGPT_HOST_DEVICE
#include "tensor/shape.h"

namespace mvgpt::cuda {

template <int N>
struct StridedIndexer {
  int ndim = 0;  // 0: one element
  bool contiguous = true;  // every operand's offset is the element index itself
  int64_t shape[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};

  // off[k] = offset (in elements, from the first element) of row-major element i in operand k.
  MVGPT_HOST_DEVICE void offsets(int64_t i, int64_t* off) const {
    if (contiguous) {
      for (int k = 0; k < N; ++k) off[k] = i;
      return;
    }
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t c = i % shape[d];
      i /= shape[d];
      for (int k = 0; k < N; ++k) off[k] += c * strides[k][d];
    }
  }
};

template <int N>
StridedIndexer<N> make_indexer(const Shape& shape, const std::array<const Strides*, N>& strides) {
  StridedIndexer<N> ix;
  for (int d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    const int nd = ix.ndim;
    bool merge = nd > 0;
    for (int k = 0; k < N && merge; ++k) merge = ix.strides[k][nd - 1] == (*strides[k])[d] * shape[d];
    if (merge) {
      ix.shape[nd - 1] *= shape[d];
      for (int k = 0; k < N; ++k) ix.strides[k][nd - 1] = (*strides[k])[d];
    } else {
      ix.shape[nd] = shape[d];
      for (int k = 0; k < N; ++k) ix.strides[k][nd] = (*strides[k])[d];
      ++ix.ndim;
    }
  }
  ix.contiguous = ix.ndim == 0 || ix.ndim == 1;
  for (int k = 0; k < N && ix.contiguous; ++k) ix.contiguous = ix.ndim == 0 || ix.strides[k][0] == 1;
  return ix;
}

}  // namespace mvgpt::cuda
