// The CPU kernels of the multi-tensor unit (autograd/fused/multi_tensor.h): the per-tensor results that
// clip_grad_norm_ and AdamW had before the unit existed (scale_ and AdamW bit for bit, the sum of
// squares in float64), float32 tensors in one pass each.
#include <algorithm>
#include <cstring>
#include <vector>

#include <mvgpt/backends/cpu/parallel.h>
#include <mvgpt/backends/cpu/vec_math.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/fused/multi_tensor.h>

namespace mvgpt::fused {
namespace {

// Elements per task of the float32 sum of squares: fixed, so the sum is the same for any thread count.
constexpr int64_t kChunk = int64_t(1) << 16;

// sum_i double(x[i])^2 over n floats, in two lanes of four doubles, in a fixed order.
double sum_squares_f32(const float* x, int64_t n) {
  using f64x4 = double __attribute__((vector_size(32)));
  using f32x4 = float __attribute__((vector_size(16)));
  f64x4 a = {}, b = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    if (i % 16 == 0) cpu::prefetch_ahead(x + i);  // NOTE [ Prefetching ahead ] (backends/cpu/vec_math.h)
    f32x4 u, v;
    std::memcpy(&u, x + i, sizeof u);
    std::memcpy(&v, x + i + 4, sizeof v);
    const f64x4 du = __builtin_convertvector(u, f64x4), dv = __builtin_convertvector(v, f64x4);
    a += du * du;
    b += dv * dv;
  }
  a += b;
  double sum = (a[0] + a[1]) + (a[2] + a[3]);
  for (; i < n; ++i) sum += double(x[i]) * double(x[i]);
  return sum;
}

// Contiguous float32 tensors (every gradient of a float32 model) in one pass over memory: the
// per-tensor ops (widen to float64, square, sum) made and read two float64 temporaries the size of
// each gradient, about 8 ms a step of the series' model on a 2-core Zen 4 where this reads 58 MB
// once. Other dtypes and layouts: the ops in float64 chunks, which bound the temporaries (a GPT-2
// embedding gradient alone is 38M elements). Each tensor's chunk sums are added in order.
double sum_squares_cpu(const std::vector<Tensor>& xs) {
  double total = 0;
  for (const Tensor& x : xs) {
    if (x.dtype() == DType::f32 && x.is_contiguous()) {
      const float* p = x.data<float>();
      const int64_t n = x.numel(), chunks = (n + kChunk - 1) / kChunk;
      std::vector<double> sums(static_cast<size_t>(chunks));
      cpu::parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) sums[size_t(c)] = sum_squares_f32(p + c * kChunk, std::min(kChunk, n - c * kChunk));
      });
      for (double s : sums) total += s;
      continue;
    }
    Tensor flat = ops::reshape(x, {-1});
    constexpr int64_t kOpsChunk = int64_t(1) << 20;
    for (int64_t off = 0; off < flat.numel(); off += kOpsChunk) {
      Tensor part = ops::to(ops::narrow(flat, 0, off, std::min(kOpsChunk, flat.numel() - off)), DType::f64);
      total += ops::sum(ops::square(part)).item<double>();
    }
  }
  return total;
}

// x * float(factor) in place for contiguous float32 tensors, as ops::mul rounds it (one pass where
// ops::mul then a copy back took two); other dtypes and layouts through the ops.
void scale_cpu(const std::vector<Tensor>& xs, double factor) {
  const float f = static_cast<float>(factor);
  for (const Tensor& x : xs) {
    if (x.dtype() != DType::f32 || !x.is_contiguous()) {
      ops::copy_(x, ops::mul(x, factor));
      continue;
    }
    float* p = x.data<float>();
    cpu::parallel_for(x.numel(), cpu::kElementwiseGrain, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) p[i] *= f;
    });
  }
}

void adamw_cpu(const std::vector<AdamWSlot>& slots) {
  static const AdamWKernels step = adamw_cpu_kernels();
  for (const AdamWSlot& s : slots) step.step(s.param, s.grad, s.m, s.v, s.hp, s.rounded.defined() ? &s.rounded : nullptr);
}

}  // namespace

MultiTensorKernels multi_tensor_cpu_kernels() { return {sum_squares_cpu, scale_cpu, adamw_cpu}; }

}  // namespace mvgpt::fused
