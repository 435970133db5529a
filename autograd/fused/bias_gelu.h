#pragma once
// GELU (the tanh approximation, GPT-2's) of x plus a bias over the last axis, as one fused unit (NOTE
// [ A fused op is one unit ] in unit.h): the MLP's first layer where the device's GEMM does not fold
// the bias (CUDA), one pass over the (N, 4C) activations forward and one backward, where a bias add
// and a GELU took two launches and four passes forward. linear_gelu makes the choice per device;
// linear_gelu_linear, the whole MLP, hands bf16 products their operands already rounded.
#include <utility>

#include <mvgpt/tensor/tensor.h>

namespace mvgpt {

// Differentiable. x (..., C), bias (C) -> gelu_tanh(x + bias), rounded as the add and then the GELU.
Tensor bias_gelu(const Tensor& x, const Tensor& bias);

// Differentiable: gelu(linear(x, weight, bias)), with the bias inside the GEMM where the device's
// linear folds it (the CPU: the composition itself, bit for bit) and in bias_gelu's pass elsewhere.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias);

// Differentiable: the MLP's hidden activation gelu(pre) of a pre-activation pre = c_fc(x), as
// linear_gelu_linear makes it: under bf16 products (pre and weight as a product would see them)
// rounded with its pre-activation, r(gelu(r(pre))) (NOTE [ The MLP's activations in bf16 ]);
// elsewhere gelu(pre). For an MLP whose layers are not plain products (an adapter on c_fc or
// c_proj): a fresh adapter then gives the plain MLP's values.
Tensor mlp_hidden_gelu(const Tensor& pre, const Tensor& weight);

// Differentiable: the MLP, linear(gelu(linear(x, w1, b1)), w2, b2). Under bf16 products (NOTE
// [ Precision policy ] in autograd/precision.h) its hidden activations are bfloat16 (NOTE [ The
// MLP's activations in bf16 ]) and its passes write what the products multiply: the GELU's pass
// writes c_proj's bfloat16 operand (no float32 activation that only a conversion read), and the
// GELU's backward writes the first layer's bfloat16 gradient operand with its bias gradient summed
// in the same pass (no float32 gradient, conversion and sum). Elsewhere, linear(linear_gelu(x, w1,
// b1), w2, b2).
//
// NOTE [ The MLP's activations in bf16 ]
// Under bf16 products the MLP is linear(r(gelu(r(linear(x, w1, b1)))), w2, b2) with r(t) =
// to(to(t, bf16), f32): the pre-activation and the GELU's output in bfloat16, and so their
// gradients (dh, and the pre-activation's, whose column sums are b1's gradient), as autocast keeps
// a linear's output and its gradient. The first product and dh's product write their results in
// bfloat16 themselves (NOTE [ bf16 results ] in backends/cpu/blas.cpp): the (N, 4C) float32 tensors
// that only the GELU's passes read, 25 MB each in the series' step, are gone, and with them half
// the bytes those passes stream. The result and every gradient are that composition's,
// linear(mlp_hidden_gelu(linear(x, w1, b1), w1), w2, b2) from the autograd ops, up to the order of
// the two products' float32 sums (a hidden width of 1 takes the composition itself). On
// the 2-core AMX Xeon: see docs/performance.md.
Tensor linear_gelu_linear(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2);

namespace fused {

// The raw passes (no gradient history): x (..., C) any floating dtype and layout, bias (C).
// forward: gelu_tanh(x + bias) in x's dtype; backward: grad * gelu_tanh'(x + bias), the gradient of
// x (and, summed over the rows, of the bias).
Tensor bias_gelu_forward(const Tensor& x, const Tensor& bias);
Tensor bias_gelu_backward(const Tensor& grad, const Tensor& x, const Tensor& bias);
// gelu_tanh(x) rounded to bfloat16, for x float32 or bfloat16 (any layout): bfloat16(gelu(x)) in one
// pass, x read as float32.
Tensor gelu_rounded(const Tensor& x);
// For x and grad (N, C), each float32 or bfloat16 (read as float32): {dx = bfloat16(grad *
// gelu_tanh'(x)), the float32 column sums (C) of dx's rounded values} in one pass: a GELU's backward
// as the operand of the bf16 products before it, with that layer's bias gradient (the gradient of
// a bfloat16 pre-activation, as autocast keeps it).
std::pair<Tensor, Tensor> gelu_backward_rounded(const Tensor& x, const Tensor& grad);

namespace reference {
// From primitives: ops::gelu(ops::add(x, bias)).
Tensor bias_gelu(const Tensor& x, const Tensor& bias);
}  // namespace reference

// The kernels of one device: x and grad contiguous (N, C), bias (C), out and dx contiguous (N, C),
// all float32 or all float64 (gelu_rounded and gelu_backward_rounded: float32 in, or on the CPU
// bfloat16 too; bfloat16 out and float32 sums, all contiguous).
// bias_in_product: this device's linear folds the bias into its GEMM, so linear_gelu keeps the bias
// there (a separate pass would only add one).
struct BiasGeluKernels {
  bool bias_in_product;
  void (*forward)(const Tensor& x, const Tensor& bias, const Tensor& out);
  void (*backward)(const Tensor& grad, const Tensor& x, const Tensor& bias, const Tensor& dx);
  void (*gelu_rounded)(const Tensor& x, const Tensor& out);
  void (*gelu_backward_rounded)(const Tensor& x, const Tensor& grad, const Tensor& dx, const Tensor& sums);
};
BiasGeluKernels bias_gelu_cpu_kernels();   // bias_gelu_cpu.cpp
BiasGeluKernels bias_gelu_cuda_kernels();  // bias_gelu.cu (only with the CUDA backend)

}  // namespace fused
}  // namespace mvgpt
