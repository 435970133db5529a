#pragma once
// Slow references for the fused kernels, composed only of the basic ops in backends/ops.h
// (matmul, softmax, reductions, elementwise, where, narrow, cat, gather ...). They define what the
// fused kernels must compute; tests/backends/fused_reference_test.cpp compares the two. Never on a
// hot path: they materialise every intermediate (e.g. the (T, T) score matrix).
#include <mvgpt/backends/ops.h>

namespace mvgpt::reference {

// Over the last axis: (x - mean) / sqrt(biased var + eps) * weight + bias (weight/bias optional).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
// x / sqrt(mean(x^2) + eps) * weight (weight optional).
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps);
// x (B, H, T, D) or (H, T, D); positions (T) or (B, T) int; angle position * position_scale * base^(-2i/D).
Tensor rope(const Tensor& x, const Tensor& positions, double base = 10000, RopeLayout layout = RopeLayout::split_half,
            bool inverse = false, double position_scale = 1.0);
// q (B, H, Tq, D), k and v (B, Hkv, Tk, D): {out (B, H, Tq, D), lse (B, H, Tq)}.
ops::AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal);
// logits (N, V), targets (N): {losses (N), lse (N)}.
ops::CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);

}  // namespace mvgpt::reference
