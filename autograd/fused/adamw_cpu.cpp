// The CPU kernel of AdamW (autograd/fused/adamw.h): elementwise over contiguous param, grad, m, v,
// the float32 loop in explicit 8-wide vectors, each operation rounded as PyTorch's separate kernels
// round it (no FMA contraction).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include <mvgpt/backends/cpu/fused_common.h>
#include <mvgpt/backends/cpu/parallel.h>
#include <mvgpt/fused/adamw.h>

namespace mvgpt::fused {
namespace {

using cpu::kElementwiseGrain;
using cpu::parallel_for;
namespace vec = cpu::fused;

// NOTE [ Weights rounded by the optimizer ]
// Under bf16 products a weight's bfloat16 copy is re-made after every optimizer step, where the
// forward first multiplies it: a pass of its own over every weight (NOTE [ Precision policy ] in
// autograd/precision.h). Where AdamW is handed a `rounded` tensor it writes the copy itself,
// sixteen new values at a time as they are made, with round_to_bf16 (bit for bit ops::to's
// rounding): AdamW::step hands it a new tensor for each weight whose copy the policy holds and gives
// them to the policy for the new versions (detail::refreshable_product_operand); the old copies, which
// a graph may still hold, are never written. On the 2-core AMD EPYC Zen 4 the bf16 step
// profile's conversions of weights took 4.9 ms a step (32 calls).
template <typename T>
void adamw_impl(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWParams& p,
                bfloat16* rounded) {
  // Scalars in double, as Python computes them, then cast once.
  const double bias1 = 1 - std::pow(p.beta1, double(p.step));
  const double bias2 = 1 - std::pow(p.beta2, double(p.step));
  const T decay = T(1 - p.lr * p.weight_decay);
  const T b1 = T(p.beta1), one_minus_b1 = T(1 - p.beta1), b2 = T(p.beta2), one_minus_b2 = T(1 - p.beta2);
  const T step_size = T(p.lr / bias1), bias2_sqrt = T(std::sqrt(bias2)), eps = T(p.eps);
  T* pp = param.data<T>();
  const T* gp = grad.data<T>();
  T* mp = m.data<T>();
  T* vp = v.data<T>();
  parallel_for(param.numel(), kElementwiseGrain, [&](int64_t i0, int64_t i1) {
    int64_t i = i0, unrounded = i0;  // the rounded copy's values [unrounded, i1) are made at the end
    if constexpr (std::is_same_v<T, float>) {
      // Explicit vectors: the scalar loop does not vectorize because of std::sqrt (errno).
      using vec::f32x8;
      auto eight = [&](int64_t j) {
        const f32x8 g = vec::load8(gp + j), m0 = vec::load8(mp + j), v0 = vec::load8(vp + j);
        const f32x8 pj = vec::no_contract(vec::load8(pp + j) * decay);
        const f32x8 mj = vec::no_contract(m0 * b1) + one_minus_b1 * g;
        const f32x8 vj = vec::no_contract(v0 * b2) + one_minus_b2 * g * g;
        vec::store8(mp + j, mj);
        vec::store8(vp + j, vj);
        vec::store8(pp + j, pj - step_size * mj / (vec::sqrt8(vj) / bias2_sqrt + eps));
      };
      // A cache line of each stream at a time, its lines 2 KB ahead asked for (NOTE [ Prefetching
      // ahead ] in backends/cpu/vec_math.h); the rounded copy's sixteen new values as they are made.
      for (; i + 2 * vec::kVec <= i1; i += 2 * vec::kVec) {
        cpu::prefetch_ahead_for_write(pp + i);
        cpu::prefetch_ahead(gp + i);
        cpu::prefetch_ahead_for_write(mp + i);
        cpu::prefetch_ahead_for_write(vp + i);
        eight(i);
        eight(i + vec::kVec);
        if (rounded) {
          cpu::prefetch_ahead_for_write(rounded + i);
          vec::round_to_bf16(pp + i, 2 * vec::kVec, rounded + i);
        }
      }
      unrounded = i;
      for (; i + vec::kVec <= i1; i += vec::kVec) eight(i);
    }
    for (; i < i1; ++i) {
      const T g = gp[i];
      const T pi = vec::no_contract(pp[i] * decay);
      const T mi = vec::no_contract(mp[i] * b1) + one_minus_b1 * g;
      const T vi = vec::no_contract(vp[i] * b2) + one_minus_b2 * g * g;
      mp[i] = mi;
      vp[i] = vi;
      pp[i] = pi - step_size * mi / (std::sqrt(vi) / bias2_sqrt + eps);  // addcdiv: (value * m) / denom
    }
    if constexpr (std::is_same_v<T, float>)
      if (rounded) vec::round_to_bf16(pp + unrounded, i1 - unrounded, rounded + unrounded);
  });
}

}  // namespace

AdamWKernels adamw_cpu_kernels() {
  return {[](const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWParams& p,
             const Tensor* rounded) {
    const char* op = "adamw_step (cpu)";
    if (rounded && (rounded->dtype() != DType::bf16 || !rounded->is_contiguous() || rounded->numel() != param.numel() ||
                    param.dtype() != DType::f32))
      throw std::logic_error("adamw_step (cpu): rounded must be a contiguous bfloat16 tensor of a float32 param's size");
    vec::require_float(param, op, "param");
    for (const Tensor* t : {&param, &grad, &m, &v}) {
      vec::require_contiguous(*t, op, "every tensor");
      if (t->dtype() != param.dtype() || t->numel() != param.numel())
        throw std::logic_error("adamw_step (cpu): param, grad, m, v must share dtype and size");
    }
    if (param.dtype() == DType::f64) adamw_impl<double>(param, grad, m, v, p, nullptr);
    else adamw_impl<float>(param, grad, m, v, p, rounded ? rounded->data<bfloat16>() : nullptr);
  }};
}

}  // namespace mvgpt::fused
