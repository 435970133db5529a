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

// NOTE [ Norms made for products ]
// A pre-norm block's norm feeds its branch's first product. Under the bf16 policy the product
// multiplies its input rounded to bfloat16: the norm wrote a float32 row, a conversion read it back
// and wrote it rounded (12 of the series' step's 44 forward conversions), and in the backward the
// product wrote the norm's gradient in float32 for the norm to read. layer_norm_for_product gives
// the norm's output as the product multiplies it, bfloat16, written once (the CPU's kernel rounds
// each row as it makes it), and takes its gradient in bfloat16, as autocast's cast hands the
// norm's backward a gradient its linear made in bfloat16. On every CPU (the CPU kernels share each
// row's arithmetic, compiled once without FMA contraction: norms_cpu.cpp) the forward's values are
// those of to(layer_norm(x), bf16) bit for bit, and the backward's those of layer_norm's backward
// on the bfloat16 gradient widened. linear, matmul and the fused MLP and classifier multiply a
// bfloat16 activation against float32 weights under the policy and hand it a bfloat16 gradient
// (NOTE [ Precision policy ] in autograd/precision.h). Elsewhere (float32 products, float64, no
// float32 x, devices other than the CPU, whose products would narrow the gradient in a pass of its
// own for the norm to widen again) it is layer_norm. The GPT's blocks use it for ln_1 and ln_2
// where the branch reads its input as one product's operand alone (Module::input_feeds_one_product:
// not beside an adapter, not SwiGLU's two products, whose bfloat16 gradients would be summed in
// bfloat16); not ln_f, whose output GPT::hidden hands out. In the bf16 step profile on the 2-core AMX Xeon (family 6 model 167),
// four alternations: the forward's conversions 4.8-5.6 ms a step against 7.5-7.7, the norms
// 4.9-5.1 against 3.6-3.9 (they round as they write), the products that make the norms'
// gradients 1-2 ms less (a bfloat16 result); the step 375-388 ms against 380-408 (one outlier
// pair 368/408). The series' 200-step parity run: bf16 3.3431, fp32 3.3541 held-out.
Tensor layer_norm_for_product(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

namespace fused {

// The raw kernels (no gradient history). x (..., C) any layout and floating dtype; y has x's dtype,
// the saved statistics (per row: x's shape without C) the compute dtype (float64 for float64 x,
// float32 otherwise).
struct NormResult {
  Tensor y, mean, rstd;  // mean undefined for RMS norm
};
NormResult layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
// The same with y rounded to bfloat16 (x float32): to(layer_norm_forward(x).y, bf16) bit for bit,
// written by the CPU's kernel without a float32 y (NOTE [ Norms made for products ]).
NormResult layer_norm_forward_rounded(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
NormResult rms_norm_forward(const Tensor& x, const Tensor& weight, double eps);
// {dx, dweight, dbias} / {dx, dweight}: undefined where the parameter is. layer_norm_backward's dy may
// be bfloat16 for a float32 x (the gradient of layer_norm_forward_rounded's y): the values of dy widened.
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
// the caller: y (N, C), mean/rstd (N); gradients written fresh, undefined ones skipped. The CPU's
// layer norm also takes a bfloat16 y and a bfloat16 dy for float32 x (NOTE [ Norms made for
// products ]); other devices are handed float32 ones.
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
