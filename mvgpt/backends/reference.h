#pragma once
// Slow references for the fused kernels, composed only of the basic ops in backends/ops.h
// (matmul, softmax, reductions, elementwise, where, narrow, cat, gather ...). They define what the
// fused kernels must compute; tests/backends/fused_reference_test.cpp compares the two. Never on a
// hot path: they materialise every intermediate (e.g. the (T, T) score matrix).
#include <mvgpt/backends/ops.h>

namespace mvgpt::reference {

// x (B, H, T, D) or (H, T, D); positions (T) or (B, T) int; angle position * position_scale * base^(-2i/D).
Tensor rope(const Tensor& x, const Tensor& positions, double base = 10000, RopeLayout layout = RopeLayout::split_half,
            bool inverse = false, double position_scale = 1.0);
}  // namespace mvgpt::reference
