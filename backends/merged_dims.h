#pragma once
// N same-shape strided operands (an output and its inputs) reduced to their fewest dimensions:
// size-1 dims are dropped and neighbours that are contiguous in every operand are merged, so a
// contiguous tensor becomes one flat dim and a broadcast row (stride 0) stays one cheap inner dim.
// The CPU's Layout (cpu/strided.h) and CUDA's StridedIndexer (cuda/strided_indexer.h) are built on
// it, and so is the matmul plan (are a batch's rows one evenly strided run?). Host code only.
#include <array>
#include <cstdint>

#include <mvgpt/tensor/shape.h>

namespace mvgpt {

template <int N>
struct MergedDims {
  int ndim = 0;  // 0: a single element
  int64_t shape[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};
};

// Fills `m` (freshly made: ndim 0) from shape and the N operands' strides over it.
template <int N>
void merge_dims(const Shape& shape, const std::array<const Strides*, N>& strides, MergedDims<N>& m) {
  for (int d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    const int nd = m.ndim;
    bool merge = nd > 0;
    for (int k = 0; k < N && merge; ++k) merge = m.strides[k][nd - 1] == (*strides[k])[d] * shape[d];
    if (merge) {
      m.shape[nd - 1] *= shape[d];
      for (int k = 0; k < N; ++k) m.strides[k][nd - 1] = (*strides[k])[d];
    } else {
      m.shape[nd] = shape[d];
      for (int k = 0; k < N; ++k) m.strides[k][nd] = (*strides[k])[d];
      ++m.ndim;
    }
  }
}

}  // namespace mvgpt
