#pragma once
// NOTE [ Column sum order ]
// The CPU sums the columns of rows (x (R, L) over R: a bias gradient) in blocks of
// kColumnSumRowBlock rows; a block is the double sum of groups of kColumnSumRowGroup rows, each
// group added in float left to right; the block sums are then added in block order. The grouping
// depends only on R. ops::sum follows it (cpu_reduce.cpp, sum_columns_by_row_blocks), and so do the
// passes that make a bias gradient as they visit each row for something else (sum_columns_row_by_row
// below: the GELU's backward, a linear layer's gradient conversion), so that their sums are
// ops::sum's bits.
#include <algorithm>
#include <cstdint>
#include <vector>

#include <mvgpt/backends/cpu/parallel.h>
#include <mvgpt/tensor/tensor.h>

namespace mvgpt::cpu {

inline constexpr int64_t kColumnSumRowBlock = 64;
inline constexpr int64_t kColumnSumRowGroup = 8;

// out[j] = the blocks' double sums part (blocks, C) of column j added in block order, rounded to T
// once: the last step of the order above. part's first row is overwritten.
template <typename T>
void add_block_sums(double* part, int64_t blocks, int64_t C, T* out) {
  parallel_for(C, 2048, [&](int64_t j0, int64_t j1) {
    for (int64_t b = 1; b < blocks; ++b)
      for (int64_t j = j0; j < j1; ++j) part[j] += part[b * C + j];
    for (int64_t j = j0; j < j1; ++j) out[j] = T(part[j]);
  });
}

// out[j] = the sum over R rows of column j (C > 1: ops::sum adds one column as a row, in another
// order), in the order above, from a pass that visits each row once, a row at a time (each row
// streams through memory in order; a group's rows side by side would be many streams the
// prefetchers lose): row(r, s, first) does its pass's work on row r and adds the row's values into
// the group's float sums s[0, C), s[j] = first ? value : s[j] + value.
template <typename Row>
void sum_columns_row_by_row(int64_t R, int64_t C, float* out, Row&& row) {
  if (C == 0) return;
  if (R == 0) {  // no rows: every sum is 0
    std::fill(out, out + C, 0.0f);
    return;
  }
  const int64_t blocks = (R + kColumnSumRowBlock - 1) / kColumnSumRowBlock;
  Tensor scratch = Tensor::empty({blocks, C}, DType::f64);  // each block's sums
  double* part = scratch.data<double>();
  parallel_for(blocks, std::max<int64_t>(1, kElementwiseGrain / (kColumnSumRowBlock * C)), [&](int64_t b0, int64_t b1) {
    std::vector<float> group(static_cast<size_t>(C));
    float* s = group.data();
    for (int64_t b = b0; b < b1; ++b) {
      double* acc = part + b * C;
      std::fill(acc, acc + C, 0.0);
      const int64_t r0 = b * kColumnSumRowBlock, r1 = std::min(R, r0 + kColumnSumRowBlock);
      for (int64_t g0 = r0; g0 < r1; g0 += kColumnSumRowGroup) {
        for (int64_t r = g0; r < std::min(r1, g0 + kColumnSumRowGroup); ++r) row(r, s, r == g0);
        for (int64_t j = 0; j < C; ++j) acc[j] += double(s[j]);
      }
    }
  });
  add_block_sums(part, blocks, C, out);
}

}  // namespace mvgpt::cpu
