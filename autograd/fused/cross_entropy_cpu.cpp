// The CPU kernels of cross-entropy (autograd/fused/cross_entropy.h) over the rows of contiguous logits (N, V): losses and the log-sum-exp forward, and
// dlogits = (softmax - onehot(target)) * dloss backward. One row per task; the exp is the
// vectorizable approximation (relative error < 2e-7), which keeps the (N, 10000)-sized loops fast.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
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
      const T m = vec::row_max(x, V, /*fetch_ahead=*/true);
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
      if constexpr (rounded) vec::round_to_bf16(out, V, d, vec::Ahead::out);
    }
  });
}

// NOTE [ The loss and its gradient in one visit ]
// linear_cross_entropy under the bf16 policy wants, for each row of float32 logits, its loss and its
// gradient rounded to bfloat16. The forward and backward kernels each make the row's exps (the
// forward's sum of exp(x - max), the backward's exp(x - lse) times the upstream gradient): two exp
// passes over (N, V), most of either kernel's time once its rows sit in the cache. Here a task makes
// the row's exps once, into a row buffer the cache holds, sums them for the loss and lse (the
// forward's values, bit for bit), and scales that buffer by g / sum as it rounds it: the softmax as
// exp(x - max) / sum, which rounds differently from exp(x - lse) by a float32 ulp or two, then to
// bfloat16 as ops::to rounds. The logits are read from memory once. A row of -inf only (no class can
// be picked) takes the two kernels' formulas, NaN for NaN. On the 2-core AMD EPYC Zen 4 (bf16 step
// profile, alternated): see docs/performance.md.
void cross_entropy_rows_with_gradient(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                      const Tensor& dlosses, const Tensor& losses, const Tensor& lse,
                                      const Tensor& dlogits) {
  const int64_t N = logits.size(0), V = logits.size(1);
  const bool narrow = logits.dtype() == DType::bf16;  // autocast's logits (NOTE [ bf16 logits ] in cross_entropy.cpp)
  const float* xp = narrow ? nullptr : logits.data<float>();
  const bfloat16* xb = narrow ? logits.data<bfloat16>() : nullptr;
  const float* gp = dlosses.data<float>();
  float* lp = losses.data<float>();
  float* sp = lse.data<float>();
  bfloat16* dp = dlogits.data<bfloat16>();
  // V, or more where the rows are padded (NOTE [ dlogits rows on lines ] in cross_entropy.cpp)
  const int64_t ldd = dlogits.is_contiguous() ? V : dlogits.strides()[0];
  // A row of bf16 logits is read from memory once, for its max, and again from the cache for its
  // exps, widened as they are read (exact: the values of a float32 row).
  auto row_pass = [&](const auto* rows, int64_t n, std::vector<float>& row) {
    const auto* x = rows + n * V;
    bfloat16* d = dp + n * ldd;
    const int64_t t = target_at(targets, n);
    const bool ignored = t == ignore_index;
    const float m = vec::row_max(x, V, /*fetch_ahead=*/true);
    const float x_t = ignored ? 0.0f : float(x[t]);
    if (m == -INFINITY) {  // as cross_entropy_rows and its backward give it
      const float log_s = std::log(0.0f);
      sp[n] = m;
      lp[n] = ignored ? 0.0f : (m - x_t) + log_s;
      if (ignored) {
        std::fill(d, d + V, bfloat16());
        return;
      }
      vec::exp_shifted(x, V, sp[n], gp[n], row.data());
      row[size_t(t)] -= gp[n];
      vec::round_to_bf16(row.data(), V, d, vec::Ahead::out);
      return;
    }
    const float s = vec::exp_shifted(x, V, m, 1.0f, ignored ? nullptr : row.data());  // (V) exp(x - m)
    const float log_s = std::log(s);
    sp[n] = m + log_s;
    lp[n] = ignored ? 0.0f : (m - x_t) + log_s;
    if (ignored) {
      std::fill(d, d + V, bfloat16());
      return;
    }
    const float g = gp[n], c = g / s;
    vec::round_to_bf16(row.data(), V, c, d, vec::Ahead::out);  // softmax * g
    const float at_target = vec::no_contract(row[size_t(t)] * c);  // rounded, as the row's other entries
    d[t] = bfloat16(at_target - g);
  };
  parallel_for(N, row_grain(V), [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> row;
    row.resize(size_t(V));
    for (int64_t n = r0; n < r1; ++n) {
      if (narrow) row_pass(xb, n, row);
      else row_pass(xp, n, row);
    }
  });
}

}  // namespace

// Every tensor contiguous (dlogits: rows of unit stride, padded or not); targets already range-checked by the op.
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
  k.loss_with_gradient = [](const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                            const Tensor& dlosses, const Tensor& losses, const Tensor& lse, const Tensor& dlogits) {
    const char* op = "cross_entropy_with_gradient (cpu)";
    for (const Tensor* t : {&dlosses, &losses, &lse})
      if (t->dtype() != DType::f32) throw std::logic_error(std::string(op) + ": float32 tensors only");
    if (logits.dtype() != DType::f32 && logits.dtype() != DType::bf16)
      throw std::logic_error(std::string(op) + ": float32 or bfloat16 logits only");
    if (dlogits.dtype() != DType::bf16) throw std::logic_error(std::string(op) + ": bfloat16 dlogits only");
    for (const Tensor* t : {&logits, &targets, &dlosses, &losses, &lse})
      vec::require_contiguous(*t, op, "every tensor");
    if (!dlogits_rows(dlogits)) throw std::logic_error(std::string(op) + ": dlogits must be rows of unit stride");
    cross_entropy_rows_with_gradient(logits, targets, ignore_index, dlosses, losses, lse, dlogits);
  };
  return k;
}

}  // namespace mvgpt::fused
