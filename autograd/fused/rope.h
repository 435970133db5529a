#pragma once
// Rotary position embedding, as one fused unit (NOTE [ A fused op is one unit ] in unit.h): each
// pair of channels rotated by position * position_scale * base^(-2i/D), angles in float64.
#include <cstdint>
#include <vector>

#include <mvgpt/fused/rope_layout.h>
#include <mvgpt/tensor/tensor.h>

namespace mvgpt {

// Differentiable (in x). x (B, H, T, D) or (H, T, D), positions (T) or (B, T) int; the backward is
// the inverse rotation. A position_scale of 1/f is position interpolation by f.
Tensor rope(const Tensor& x, const Tensor& positions, double base = 10000,
            RopeLayout layout = RopeLayout::split_half, double position_scale = 1.0);

namespace fused {

// The raw rotation (no gradient history), by the opposite angle when inverse; any floating dtype,
// x may be a view with a unit stride on D. The result has x's dtype and shape.
Tensor rope_rotate(const Tensor& x, const Tensor& positions, double base = 10000,
                   RopeLayout layout = RopeLayout::split_half, bool inverse = false, double position_scale = 1.0);

namespace reference {
// From elementwise ops on cos/sin tables (computed in float64), narrow/cat or stack.
Tensor rope(const Tensor& x, const Tensor& positions, double base = 10000, RopeLayout layout = RopeLayout::split_half,
            bool inverse = false, double position_scale = 1.0);
}  // namespace reference

// The kernel of one device: x float32/float64 with a unit stride on D, positions contiguous int32
// or int64, out contiguous, allocated by the caller.
struct RopeKernels {
  void (*rotate)(const Tensor& x, const Tensor& positions, double base, RopeLayout layout, bool inverse,
                 double position_scale, const Tensor& out);
};
RopeKernels rope_cpu_kernels();   // rope_cpu.cpp
RopeKernels rope_cuda_kernels();  // rope.cu (only with the CUDA backend)

// The CPU kernel's angles as a table: cos and sin (positions.numel() rows of D/2, in positions'
// order) of position * position_scale * base^(-2i/D), negated when inverse, computed in float64 and
// rounded to float32, the values rope's CPU kernel multiplies by. For kernels that rotate rows as
// they read them (rotary_attention in attention.h).
struct RopeTable {
  int64_t half = 0;
  std::vector<float> cos, sin;
};
RopeTable rope_table(const Tensor& positions, int64_t D, double base, bool inverse, double position_scale);
// The table of the opposite angles, from a table without its cos and sin computed again: the same cos,
// sin negated. The values rope_table(..., !inverse, ...) gives (cos and sin are even and odd, and
// each angle is negated exactly; tested bit for bit).
RopeTable inverse_rope_table(const RopeTable& table);

}  // namespace fused
}  // namespace mvgpt
