#pragma once
// NOTE [ Column sum order ]
// The CPU sums the columns of rows (x (R, L) over R: a bias gradient) in blocks of
// kColumnSumRowBlock rows; a block is the double sum of groups of kColumnSumRowGroup rows, each
// group added in float left to right; the block sums are then added in block order. The grouping
// depends only on R. ops::sum follows it (cpu_reduce.cpp, sum_columns_by_row_blocks), and so do the
// fused kernels that make a bias gradient in their own pass (autograd/fused/bias_gelu_cpu.cpp), so
// that their sums are ops::sum's bits.
#include <cstdint>

namespace mvgpt::cpu {

inline constexpr int64_t kColumnSumRowBlock = 64;
inline constexpr int64_t kColumnSumRowGroup = 8;

}  // namespace mvgpt::cpu
