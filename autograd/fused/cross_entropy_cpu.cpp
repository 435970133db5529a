// The CPU kernels of cross-entropy (autograd/fused/cross_entropy.h) over the rows of contiguous logits (N, V): losses and the log-sum-exp forward, and
// dlogits = (softmax - onehot(target)) * dloss backward. One row per task; the exp is the
// vectorizable approximation (relative error < 2e-7), which keeps the (N, 10000)-sized loops fast.
#include <algorithm>
#include <cmath>
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

template <typename T>
void cross_entropy_rows_backward(const Tensor& dlosses, const Tensor& logits, const Tensor& targets,
                                 const Tensor& lse, int64_t ignore_index, const Tensor& dlogits) {
  const int64_t N = logits.size(0), V = logits.size(1);
  const T* xp = logits.data<T>();
  const T* gp = dlosses.data<T>();
  const T* sp = lse.data<T>();
  T* dp = dlogits.data<T>();
  parallel_for(N, row_grain(V), [&](int64_t r0, int64_t r1) {
    for (int64_t n = r0; n < r1; ++n) {
      T* d = dp + n * V;
      const int64_t t = target_at(targets, n);
      if (t == ignore_index) {
        for (int64_t j = 0; j < V; ++j) d[j] = 0;
        continue;
      }
      const T* x = xp + n * V;
      const T g = gp[n], l = sp[n];
      vec::exp_shifted(x, V, l, g, d);  // softmax * g
      d[t] -= g;
    }
  });
}

// The same, into bfloat16 dlogits: each row's float32 values made as above in a row buffer that the
// cache keeps, then rounded as ops::to rounds them. One pass over memory where the float32 kernel and
// a conversion take three (NOTE [ Linear cross-entropy ] in cross_entropy.cpp).
void cross_entropy_rows_backward_bf16(const Tensor& dlosses, const Tensor& logits, const Tensor& targets,
                                      const Tensor& lse, int64_t ignore_index, const Tensor& dlogits) {
  const int64_t N = logits.size(0), V = logits.size(1);
  const float* xp = logits.data<float>();
  const float* gp = dlosses.data<float>();
  const float* sp = lse.data<float>();
  bfloat16* dp = dlogits.data<bfloat16>();
  parallel_for(N, row_grain(V), [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> row;
    row.resize(size_t(V));
    for (int64_t n = r0; n < r1; ++n) {
      bfloat16* d = dp + n * V;
      const int64_t t = target_at(targets, n);
      if (t == ignore_index) {
        std::fill(d, d + V, bfloat16());
        continue;
      }
      const float g = gp[n];
      vec::exp_shifted(xp + n * V, V, sp[n], g, row.data());  // softmax * g
      row[size_t(t)] -= g;
      vec::round_to_bf16(row.data(), V, d);
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
      cross_entropy_rows_backward_bf16(dlosses, logits, targets, lse, ignore_index, dlogits);
    else if (logits.dtype() == DType::f64)
      cross_entropy_rows_backward<double>(dlosses, logits, targets, lse, ignore_index, dlogits);
    else
      cross_entropy_rows_backward<float>(dlosses, logits, targets, lse, ignore_index, dlogits);
  };
  return k;
}

}  // namespace mvgpt::fused
