// Argument checks shared by the raw ops and the layers above. Messages name the op and what was
// expected vs found.
#include <stdexcept>
#include <string>

#include <mvgpt/backends/ops.h>
#include <mvgpt/backends/ops_internal.h>
#include <mvgpt/tensor/grad_state.h>

namespace mvgpt::ops {

namespace detail {

bool raw_op_checks_enabled() {
#if MVGPT_CHECK_RAW_OPS
  return true;
#else
  return false;
#endif
}

void refuse_grad_inputs(const char* op, std::initializer_list<const Tensor*> inputs) {
  if (!autograd::detail::grad_mode_flag() || autograd::detail::internal_ops_depth() > 0) return;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad())
      throw std::logic_error(std::string("ops::") + op + ": a raw op (no gradient) was given a tensor that requires grad "
                             "while grad mode is on; call mvgpt::" + op + " (autograd/ops.h) or run it under NoGradGuard");
}

void check_defined(const Tensor& t, const char* op, const char* what) {
  if (!t.defined()) throw std::invalid_argument(std::string(op) + ": " + what + " is undefined");
}

Tensor widen(const Tensor& t) { return t.dtype() == DType::bf16 ? to(t, DType::f32) : t; }

Tensor narrow_result(const Tensor& t, DType dtype) {
  return dtype == DType::bf16 && t.dtype() != DType::bf16 ? to(t, DType::bf16) : t;
}

}  // namespace detail

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  detail::check_defined(a, op);
  detail::check_defined(b, op);
  if (!(a.device() == b.device()))
    throw std::invalid_argument(std::string(op) + ": tensors are on different devices (" + a.device().str() + " vs " +
                                b.device().str() + ")");
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  detail::check_defined(a, op);
  detail::check_defined(b, op);
  if (a.dtype() != b.dtype())
    throw std::invalid_argument(std::string(op) + ": dtype " + detail::name_of(a.dtype()) + " vs " +
                                detail::name_of(b.dtype()) + " (convert one with to(t, dtype))");
}

void check_floating(const Tensor& t, const char* op) {
  detail::check_defined(t, op);
  if (!is_floating(t.dtype()))
    throw std::invalid_argument(std::string(op) + ": expected a floating-point tensor, found " +
                                detail::name_of(t.dtype()));
}

void check_dim(const Tensor& t, int ndim, const char* op, const char* what) {
  detail::check_defined(t, op, what);
  if (t.dim() != ndim)
    throw std::invalid_argument(std::string(op) + ": " + what + " must have " + std::to_string(ndim) +
                                " dimensions, found " + std::to_string(t.dim()) + " (shape " + to_string(t.shape()) +
                                ")");
}

void check_indices(const Tensor& index, int64_t size, const char* op, int axis) {
  detail::check_defined(index, op, "index");
  if (index.dtype() != DType::i32 && index.dtype() != DType::i64)
    throw std::invalid_argument(std::string(op) + ": indices must be int32 or int64, found " +
                                detail::name_of(index.dtype()));
  if (index.numel() == 0) return;
  Tensor host = index.device().is_cpu() ? index : to(index, Device::cpu());
  auto fail = [&](int64_t v) {
    std::string where = axis >= 0 ? "axis " + std::to_string(axis) + " of size " : "an axis of size ";
    throw std::invalid_argument(std::string(op) + ": index " + std::to_string(v) + " is out of range for " + where +
                                std::to_string(size));
  };
  // Contiguous scan; the first offending value is reported.
  host = contiguous(host);
  if (host.dtype() == DType::i64) {
    const int64_t* p = host.data<int64_t>();
    for (int64_t i = 0, n = host.numel(); i < n; ++i)
      if (p[i] < 0 || p[i] >= size) fail(p[i]);
  } else {
    const int32_t* p = host.data<int32_t>();
    for (int64_t i = 0, n = host.numel(); i < n; ++i)
      if (p[i] < 0 || p[i] >= size) fail(p[i]);
  }
}

}  // namespace mvgpt::ops
