#pragma once
// Helpers shared by the ops_*.cpp files (not part of the public API).
#include <functional>
#include <initializer_list>
#include <string>

#include <mvgpt/backends/ops.h>
#include <mvgpt/util/profile.h>

// NOTE [ Raw ops and gradients ]
// The raw ops record nothing: a model that called them on its parameters would train nothing through
// them, silently. So in debug builds (no NDEBUG, or MVGPT_CHECK_RAW_OPS=1) a raw op refuses an input
// that requires grad while grad mode is on, unless it runs inside a differentiable op's forward
// (autograd::InternalOps, tensor/grad_state.h), which records the node itself. Under NoGradGuard
// (inference, optimizer steps, the backward pass, initialisation) raw ops take anything.
#if !defined(MVGPT_CHECK_RAW_OPS) && !defined(NDEBUG)
#define MVGPT_CHECK_RAW_OPS 1
#endif

namespace mvgpt::ops::detail {

// Whether this build checks raw ops' inputs (debug builds).
bool raw_op_checks_enabled();
// Throws std::logic_error naming op when an input requires grad, grad mode is on and no
// differentiable op is running: the caller meant the op of autograd/ops.h.
void refuse_grad_inputs(const char* op, std::initializer_list<const Tensor*> inputs);
#if MVGPT_CHECK_RAW_OPS
inline void check_no_grad(const char* op, std::initializer_list<const Tensor*> inputs) { refuse_grad_inputs(op, inputs); }
#else
inline void check_no_grad(const char*, std::initializer_list<const Tensor*>) {}
#endif

// Throws std::invalid_argument "op: <what> is undefined" for an empty handle.
void check_defined(const Tensor& t, const char* op, const char* what = "input");
// The dtype name as a std::string, for messages.
inline std::string name_of(DType t) { return std::string(dtype_name(t)); }
inline Backend& backend_of(const Tensor& t) { return backend_for(t.device()); }

// The op profile's span around a backend copy (NOTE [ The op profile ]): "copy", or "convert" with
// the two dtypes when it changes them (the bf16 operands and results of mixed precision).
inline profile::Span copy_span(const Tensor& src, const Tensor& dst) {
  if (src.dtype() == dst.dtype()) return profile::Span("copy");
  return profile::Span("convert", [&] { return profile::Detail{name_of(src.dtype()) + "->" + name_of(dst.dtype())}; });
}

// Math kernels see float32/float64 only: bfloat16 inputs are widened to float32 and results cast back.
inline DType compute_dtype(DType t) { return t == DType::bf16 ? DType::f32 : t; }
Tensor widen(const Tensor& t);
// t broadcast to `shape` for a kernel (views::expand): the handle itself where t has that shape
// already, as most operands do (no view to make). Not views::expand's own shortcut: a public view
// must be a new handle, whose autograd state is its own.
inline Tensor expand_to(const Tensor& t, const Shape& shape) {
  return t.shape() == shape ? t : views::expand(t, shape);
}
// widen(t) broadcast to `shape` (which broadcast_shapes gave).
inline Tensor widen_to(const Tensor& t, const Shape& shape) { return expand_to(widen(t), shape); }
// Casts a float32 result back to `dtype` when that is bfloat16; otherwise returns it unchanged.
Tensor narrow_result(const Tensor& t, DType dtype);

// A fresh contiguous tensor like `t`'s shape on its device.
inline Tensor empty_on(const Shape& shape, DType dtype, const Tensor& like) {
  return Tensor::empty(shape, dtype, like.device());
}

// The indices to hand to a kernel. Where range checks are immediate (the CPU), checks them on the
// host and returns `index`; where they are deferred (NOTE [ Deferred range checks ] in
// deferred_checks.h), records the count of out-of-range entries and returns `index` clamped into
// [0, size) so that no kernel reads out of bounds.
Tensor kernel_indices(const Tensor& index, int64_t size, const char* op, int axis);
// Records a deferred check of `op`: `bad` a () int64 count on the device, `recheck` the immediate
// check that words the error from a host copy of `indices` (`op` must outlive the check: a literal).
void defer_check(const char* op, const Tensor& bad, const Tensor& indices,
                 std::function<void(const Tensor&)> recheck);

}  // namespace mvgpt::ops::detail
