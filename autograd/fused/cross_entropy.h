#pragma once
// Cross-entropy over the last axis, as one fused unit (NOTE [ A fused op is one unit ] in unit.h):
// the log-sum-exp and the loss per row in one pass, and dlogits = (softmax - onehot) * dloss back.
#include <cstdint>

#include <mvgpt/tensor/tensor.h>

namespace mvgpt {

// logits (..., V), targets (...) int. Mean is over the targets that are not ignore_index (NaN when
// all are ignored, as PyTorch); none returns the per-token losses, shaped as targets (0 where ignored).
enum class Reduction : uint8_t { mean, sum, none };
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     Reduction reduction = Reduction::mean);

// Differentiable: cross_entropy(linear(x, weight), targets, ignore_index, mean), the logits' gradient
// (softmax - onehot) / count made with the loss and kept in the dtype the backward's products take
// (bfloat16 under the bf16 policy) instead of the logits. x (..., C), weight (V, C), targets (...)
// int. Under the bf16 policy the logits are made a block of rows at a time, so that neither the
// whole float32 logits nor their float32 gradient are ever held (NOTE [ Linear cross-entropy ]).
// Products as linear's under the precision policy.
Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& targets, int64_t ignore_index = -100);

namespace fused {

// The raw kernels (no gradient history): logits (N, V) any layout and floating dtype, targets (N)
// int32/int64, each a class or ignore_index (checked; an error names the row). losses and lse (N) in
// the compute dtype (float64 for float64 logits, float32 otherwise); losses are 0 where ignored.
struct CrossEntropyResult {
  Tensor losses, lse;  // (N)
};
CrossEntropyResult cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);
// dlogits (N, V) in logits' dtype; 0 rows where ignored.
Tensor cross_entropy_backward(const Tensor& dlosses, const Tensor& logits, const Tensor& targets,
                              const CrossEntropyResult& saved, int64_t ignore_index = -100);
// The same, written into out (N, V): contiguous, in the compute dtype or, for float32 logits, in
// bfloat16 (the float32 values rounded as ops::to rounds them; on the CPU in the kernel's own pass).
void cross_entropy_backward_into(const Tensor& out, const Tensor& dlosses, const Tensor& logits,
                                 const Tensor& targets, const CrossEntropyResult& saved, int64_t ignore_index = -100);

namespace reference {
// logits (N, V), targets (N): {losses (N), lse (N)} from log_softmax, gather and logsumexp.
CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);
}  // namespace reference

// Where the device has the kernel (the CPU; see has_loss_with_gradient): the forward and, into dlogits
// (N, V) bfloat16 (contiguous, or rows of unit stride further apart: dlogits_rows), the gradient
// (softmax - onehot) * dlosses of float32 or bfloat16
// logits (bfloat16 ones read as their float32 widening: NOTE [ bf16 logits ] in cross_entropy.cpp),
// each row's exps made once (NOTE [ The loss and its gradient in one visit ] in
// cross_entropy_cpu.cpp). The losses and lse are the forward's bit for bit; the gradient is softmax
// as exp(x - max) / sum rather than exp(x - lse), which differ by a float32 rounding or two before
// the bfloat16 one.
bool has_loss_with_gradient(Device d);
CrossEntropyResult cross_entropy_with_gradient(const Tensor& logits, const Tensor& targets, const Tensor& dlosses,
                                               const Tensor& dlogits, int64_t ignore_index = -100);

// dlogits as loss_with_gradient takes it: contiguous, or (N, V) rows of unit stride at least V apart
// (NOTE [ dlogits rows on lines ] in cross_entropy.cpp).
inline bool dlogits_rows(const Tensor& d) {
  return d.is_contiguous() || (d.dim() == 2 && d.strides()[1] == 1 && d.strides()[0] >= d.size(1));
}

// The kernels of one device, on contiguous float tensors of one dtype and contiguous targets whose
// entries are classes or ignore_index (out-of-range ones never reach a kernel; loss_with_gradient's
// dlogits as dlogits_rows says). The CPU's backward also writes bfloat16 dlogits for float32 logits
// (cross_entropy_backward_into).
struct CrossEntropyKernels {
  void (*forward)(const Tensor& logits, const Tensor& targets, int64_t ignore_index, const Tensor& losses,
                  const Tensor& lse);
  void (*backward)(const Tensor& dlosses, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                   int64_t ignore_index, const Tensor& dlogits);
  // Where a device has it: forward, then the bfloat16 dlogits of float32 (or bfloat16) logits, in one
  // visit per row.
  void (*loss_with_gradient)(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                             const Tensor& dlosses, const Tensor& losses, const Tensor& lse,
                             const Tensor& dlogits) = nullptr;
};
CrossEntropyKernels cross_entropy_cpu_kernels();   // cross_entropy_cpu.cpp
CrossEntropyKernels cross_entropy_cuda_kernels();  // cross_entropy.cu (only with the CUDA backend)

}  // namespace fused
}  // namespace mvgpt
