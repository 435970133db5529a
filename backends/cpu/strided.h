#pragma once
// Iterating N same-shape strided operands (an output and its inputs) in row-major order.
// make_layout merges their dimensions (backends/merged_dims.h), so contiguous tensors become one
// flat run and broadcast rows (stride 0) stay cheap inner loops. Kernels then see runs along the
// innermost dimension: (offsets per operand, count, inner strides).
#include <algorithm>
#include <array>
#include <cstdint>

#include <mvgpt/backends/cpu/parallel.h>
#include <mvgpt/backends/merged_dims.h>
#include <mvgpt/tensor/shape.h>

namespace mvgpt::cpu {

template <int N>
struct Layout : MergedDims<N> {
  int64_t numel = 1;
};

template <int N>
Layout<N> make_layout(const Shape& shape, const std::array<const Strides*, N>& strides) {
  Layout<N> l;
  merge_dims<N>(shape, strides, l);
  l.numel = mvgpt::numel(shape);
  return l;
}

// Visits elements [begin, end) as runs along the innermost dimension:
// run(const int64_t* offsets, int64_t count, const int64_t* inner_strides), offsets in elements.
template <int N, typename Run>
void for_each_run(const Layout<N>& l, int64_t begin, int64_t end, Run&& run) {
  if (begin >= end) return;
  if (l.ndim == 0) {
    int64_t offs[N] = {}, inner[N] = {};
    run(offs, int64_t(1), inner);
    return;
  }
  const int last = l.ndim - 1;
  const int64_t n = l.shape[last];
  int64_t coord[kMaxDims] = {};
  int64_t offs[N] = {}, inner[N];
  for (int k = 0; k < N; ++k) inner[k] = l.strides[k][last];
  // Decompose `begin` into coordinates and starting offsets.
  int64_t rest = begin;
  for (int d = last; d >= 0; --d) {
    coord[d] = rest % l.shape[d];
    rest /= l.shape[d];
    for (int k = 0; k < N; ++k) offs[k] += coord[d] * l.strides[k][d];
  }
  int64_t pos = begin;
  while (pos < end) {
    int64_t count = std::min(n - coord[last], end - pos);
    run(offs, count, inner);
    pos += count;
    if (pos >= end) break;
    // Step to the start of the next row: undo the inner advance, then carry through outer dims.
    for (int k = 0; k < N; ++k) offs[k] -= coord[last] * inner[k];
    coord[last] = 0;
    for (int d = last - 1; d >= 0; --d) {
      ++coord[d];
      for (int k = 0; k < N; ++k) offs[k] += l.strides[k][d];
      if (coord[d] < l.shape[d]) break;
      for (int k = 0; k < N; ++k) offs[k] -= coord[d] * l.strides[k][d];
      coord[d] = 0;
    }
  }
}

// for_each_run over all elements, split across threads in chunks of at least `grain` elements.
template <int N, typename Run>
void parallel_runs(const Layout<N>& l, int64_t grain, Run&& run) {
  parallel_for(l.numel, grain, [&](int64_t b, int64_t e) { for_each_run(l, b, e, run); });
}

}  // namespace mvgpt::cpu
