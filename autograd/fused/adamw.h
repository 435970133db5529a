#pragma once
// One AdamW step in place, as one fused unit (NOTE [ A fused op is one unit ] in unit.h). The
// arithmetic follows torch.optim.AdamW (single-tensor path) operation by operation, with no FMA
// contraction across them, so float32 results are bitwise those of PyTorch (checked against torch
// 1.13) on the CPU and on CUDA alike (adamw_math.h):
//   p *= 1 - lr * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
#include <cstdint>

#include <mvgpt/tensor/tensor.h>

namespace mvgpt {

struct AdamWParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  int64_t step = 1;  // 1-based, for bias correction
};

namespace fused {

// The step on contiguous param, grad, m, v of equal shape, dtype (float32 or float64: keep master
// weights and moments in float32) and device. Not differentiable (an optimizer's update).
void adamw_step_(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWParams& p);
// adamw_step_'s argument checks (the multi-tensor step shares them): std::invalid_argument naming op.
void check_adamw_step(const char* op, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                      const AdamWParams& p);

namespace reference {
// The same step from primitives (each intermediate a tensor), on copies: returns {param, m, v}.
std::vector<Tensor> adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                               const AdamWParams& p);
}  // namespace reference

// rounded (may be null; float32 param on the CPU): a contiguous bfloat16 tensor of param's size that
// the step writes param's new value into, rounded (NOTE [ Weights rounded by the optimizer ] in
// adamw_cpu.cpp). The CUDA kernel takes none.
struct AdamWKernels {
  void (*step)(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWParams& p,
               const Tensor* rounded);
};
AdamWKernels adamw_cpu_kernels();   // adamw_cpu.cpp
AdamWKernels adamw_cuda_kernels();  // adamw.cu (only in builds with the CUDA backend)

}  // namespace fused
}  // namespace mvgpt
