// The CPU kernels of the multi-tensor unit (autograd/fused/multi_tensor.h): the per-tensor code that
// clip_grad_norm_ and AdamW ran before the unit existed, so CPU training keeps its bits.
#include <algorithm>

#include <mvgpt/backends/cpu/parallel.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/fused/multi_tensor.h>

namespace mvgpt::fused {
namespace {

// Float64 chunks bound the temporaries (a GPT-2 embedding gradient alone is 38M elements); the
// chunks' sums are added in order.
double sum_squares_cpu(const std::vector<Tensor>& xs) {
  constexpr int64_t kChunk = int64_t(1) << 20;
  double total = 0;
  for (const Tensor& x : xs) {
    Tensor flat = ops::reshape(x, {-1});
    for (int64_t off = 0; off < flat.numel(); off += kChunk) {
      Tensor part = ops::to(ops::narrow(flat, 0, off, std::min(kChunk, flat.numel() - off)), DType::f64);
      total += ops::sum(ops::square(part)).item<double>();
    }
  }
  return total;
}

void scale_cpu(const std::vector<Tensor>& xs, double factor) {
  for (const Tensor& x : xs) ops::copy_(x, ops::mul(x, factor));
}

void adamw_cpu(const std::vector<AdamWSlot>& slots) {
  static const AdamWKernels step = adamw_cpu_kernels();
  for (const AdamWSlot& s : slots) step.step(s.param, s.grad, s.m, s.v, s.hp);
}

}  // namespace

MultiTensorKernels multi_tensor_cpu_kernels() { return {sum_squares_cpu, scale_cpu, adamw_cpu}; }

}  // namespace mvgpt::fused
