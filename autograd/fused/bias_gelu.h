#pragma once
// GELU (the tanh approximation, GPT-2's) of x plus a bias over the last axis, as one fused unit (NOTE
// [ A fused op is one unit ] in unit.h): the MLP's first layer where the device's GEMM does not fold
// the bias (CUDA), one pass over the (N, 4C) activations forward and one backward, where a bias add
// and a GELU took two launches and four passes forward. linear_gelu makes the choice per device;
// gelu_linear hands the GELU to a bf16 product already rounded.
#include <mvgpt/tensor/tensor.h>

namespace mvgpt {

// Differentiable. x (..., C), bias (C) -> gelu_tanh(x + bias), rounded as the add and then the GELU.
Tensor bias_gelu(const Tensor& x, const Tensor& bias);

// Differentiable: gelu(linear(x, weight, bias)), with the bias inside the GEMM where the device's
// linear folds it (the CPU: the composition itself, bit for bit) and in bias_gelu's pass elsewhere.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias);

// Differentiable: linear(gelu(x), weight, bias), the MLP's activation and second layer. Under bf16
// products (NOTE [ Precision policy ] in autograd/precision.h) the GELU's pass writes its result
// already rounded to bfloat16, the operand the product multiplies, and no float32 copy that only
// the rounding would read; the values and every gradient are the composition's, bit for bit.
// Elsewhere it is the composition.
Tensor gelu_linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

namespace fused {

// The raw passes (no gradient history): x (..., C) any floating dtype and layout, bias (C).
// forward: gelu_tanh(x + bias) in x's dtype; backward: grad * gelu_tanh'(x + bias), the gradient of
// x (and, summed over the rows, of the bias).
Tensor bias_gelu_forward(const Tensor& x, const Tensor& bias);
Tensor bias_gelu_backward(const Tensor& grad, const Tensor& x, const Tensor& bias);
// gelu_tanh(x) rounded to bfloat16, for x float32 (any layout): bfloat16(gelu(x)) in one pass.
Tensor gelu_rounded(const Tensor& x);

namespace reference {
// From primitives: ops::gelu(ops::add(x, bias)).
Tensor bias_gelu(const Tensor& x, const Tensor& bias);
}  // namespace reference

// The kernels of one device: x and grad contiguous (N, C), bias (C), out and dx contiguous (N, C),
// all float32 or all float64 (gelu_rounded: x float32, out bfloat16, both contiguous).
// bias_in_product: this device's linear folds the bias into its GEMM, so linear_gelu keeps the bias
// there (a separate pass would only add one).
struct BiasGeluKernels {
  bool bias_in_product;
  void (*forward)(const Tensor& x, const Tensor& bias, const Tensor& out);
  void (*backward)(const Tensor& grad, const Tensor& x, const Tensor& bias, const Tensor& dx);
  void (*gelu_rounded)(const Tensor& x, const Tensor& out);
};
BiasGeluKernels bias_gelu_cpu_kernels();   // bias_gelu_cpu.cpp
BiasGeluKernels bias_gelu_cuda_kernels();  // bias_gelu.cu (only with the CUDA backend)

}  // namespace fused
}  // namespace mvgpt
