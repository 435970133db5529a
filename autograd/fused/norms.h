#pragma once
// Layer norm and RMS norm over the last axis, as one fused unit (NOTE [ A fused op is one unit ]).
#include <vector>

#include <mvgpt/tensor/tensor.h>

namespace mvgpt {

// Differentiable, over the last axis of x (..., C); weight and bias (C) may be undefined.
// layer_norm: (x - mean) / sqrt(biased var + eps) * weight + bias.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// rms_norm: x / sqrt(mean(x^2) + eps) * weight.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);

namespace fused {

// The raw kernels (no gradient history). x (..., C) any layout and floating dtype; y has x's dtype,
// the saved statistics (per row: x's shape without C) the compute dtype (float64 for float64 x,
// float32 otherwise).
struct NormResult {
  Tensor y, mean, rstd;  // mean undefined for RMS norm
};
NormResult layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
NormResult rms_norm_forward(const Tensor& x, const Tensor& weight, double eps);
// {dx, dweight, dbias} / {dx, dweight}: undefined where the parameter is.
std::vector<Tensor> layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& bias,
                                        const NormResult& saved);
std::vector<Tensor> rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                      const NormResult& saved);

// What the kernels must compute, from primitives (slow: every intermediate is materialised).
namespace reference {
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps);
}  // namespace reference

// The kernels of one device, on contiguous tensors of one float dtype (f32 or f64), allocated by
// the caller: y (N, C), mean/rstd (N); gradients written fresh, undefined ones skipped.
struct NormKernels {
  void (*layer_norm)(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                     const Tensor& mean, const Tensor& rstd);
  void (*layer_norm_backward)(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                              const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias);
  void (*rms_norm)(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd);
  void (*rms_norm_backward)(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                            const Tensor& dx, const Tensor& dweight);
};
NormKernels norms_cpu_kernels();   // norms_cpu.cpp
NormKernels norms_cuda_kernels();  // norms.cu (only in builds with the CUDA backend)

}  // namespace fused
}  // namespace mvgpt
