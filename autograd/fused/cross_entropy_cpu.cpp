// The CPU kernels of cross-entropy (autograd/fused/cross_entropy.h) over the rows of contiguous logits (N, V): losses and the log-sum-exp forward, and
// dlogits = (softmax - onehot(target)) * dloss backward. One row per task; the exp is the
// vectorizable approximation (relative error < 2e-7), which keeps the (N, 10000)-sized loops fast.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include <mvgpt/backends/cpu/fused_common.h>
#include <mvgpt/backends/cpu/parallel.h>
#include <mvgpt/fused/cross_entropy.h>

namespace mvgpt::fused {
namespace {

using cpu::parallel_for;
namespace vec = cpu::fused;


int64_t target_at(const Tensor& targets, int64_t n) {
  return targets.dtype() == DType::i64 ? targets.data<int64_t>()[n] : int64_t(targets.data<int32_t>()[n]);
}

int64_t row_grain(int64_t V) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(V, 1)); }

template <typename T>
void cross_entropy_rows(const Tensor& logits, const Tensor& targets, int64_t ignore_index, const Tensor& losses,
                           const Tensor& lse) {
  const int64_t N = logits.size(0), V = logits.size(1);
  const T* xp = logits.data<T>();
  T* lp = losses.data<T>();
  T* sp = lse.data<T>();
  parallel_for(N, row_grain(V), [&](int64_t r0, int64_t r1) {
    for (int64_t n = r0; n < r1; ++n) {
      const T* x = xp + n * V;
      const T m = vec::row_max(x, V);
      // An all -inf row has lse -inf (and a nan loss unless ignored), as in PyTorch.
      const T s = m == -INFINITY ? T(0) : vec::exp_shifted(x, V, m, T(1), static_cast<T*>(nullptr));
      const T log_s = std::log(s);
      sp[n] = m == -INFINITY ? m : m + log_s;
      // (max - logit) + log(s) rather than lse - logit: no cancellation when the logits are large.
      const int64_t t = target_at(targets, n);
      lp[n] = t == ignore_index ? T(0) : (m - x[t]) + log_s;
    }
  });
}

// Out: T, or bfloat16 for float32 T: then each row's float32 values are made in a row buffer that
// the cache keeps and rounded as ops::to rounds them, one pass over memory where the float32 kernel
// and a conversion take three (NOTE [ Linear cross-entropy ] in cross_entropy.cpp).
template <typename T, typename Out = T>
void cross_entropy_rows_backward(const Tensor& dlosses, const Tensor& logits, const Tensor& targets,
                                 const Tensor& lse, int64_t ignore_index, const Tensor& dlogits) {
  constexpr bool rounded = !std::is_same_v<Out, T>;
  static_assert(!rounded || (std::is_same_v<T, float> && std::is_same_v<Out, bfloat16>));
  const int64_t N = logits.size(0), V = logits.size(1);
  const T* xp = logits.data<T>();
  const T* gp = dlosses.data<T>();
  const T* sp = lse.data<T>();
  Out* dp = dlogits.data<Out>();
  parallel_for(N, row_grain(V), [&](int64_t r0, int64_t r1) {
    thread_local std::vector<T> row;
    if (rounded) row.resize(size_t(V));
    for (int64_t n = r0; n < r1; ++n) {
      Out* d = dp + n * V;
      const int64_t t = target_at(targets, n);
      if (t == ignore_index) {
        std::fill(d, d + V, Out());
        continue;
      }
      T* out = nullptr;
      if constexpr (rounded) out = row.data();
      else out = d;
      const T g = gp[n];
      vec::exp_shifted(xp + n * V, V, sp[n], g, out);  // softmax * g
      out[t] -= g;
      if constexpr (rounded) vec::round_to_bf16(out, V, d);
    }
  });
}

}  // namespace

// Every tensor contiguous; targets already range-checked by the op.
CrossEntropyKernels cross_entropy_cpu_kernels() {
  CrossEntropyKernels k;
  k.forward = [](const Tensor& logits, const Tensor& targets, int64_t ignore_index, const Tensor& losses,
                 const Tensor& lse) {
    const char* op = "cross_entropy (cpu)";
    vec::require_float(logits, op, "logits");
    for (const Tensor* t : {&logits, &targets, &losses, &lse}) vec::require_contiguous(*t, op, "every tensor");
    if (logits.dtype() == DType::f64) cross_entropy_rows<double>(logits, targets, ignore_index, losses, lse);
    else cross_entropy_rows<float>(logits, targets, ignore_index, losses, lse);
  };
  k.backward = [](const Tensor& dlosses, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                  int64_t ignore_index, const Tensor& dlogits) {
    const char* op = "cross_entropy_backward (cpu)";
    vec::require_float(logits, op, "logits");
    for (const Tensor* t : {&dlosses, &logits, &targets, &lse, &dlogits}) vec::require_contiguous(*t, op, "every tensor");
    if (dlogits.dtype() == DType::bf16 && logits.dtype() == DType::f32)
      cross_entropy_rows_backward<float, bfloat16>(dlosses, logits, targets, lse, ignore_index, dlogits);
    else if (logits.dtype() == DType::f64)
      cross_entropy_rows_backward<double>(dlosses, logits, targets, lse, ignore_index, dlogits);
    else
      cross_entropy_rows_backward<float>(dlosses, logits, targets, lse, ignore_index, dlogits);
  };
  return k;
}

}  // namespace mvgpt::fused
