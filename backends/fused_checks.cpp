#include <mvgpt/backends/fused_checks.h>

#include <stdexcept>

#include <mvgpt/backends/ops.h>

namespace mvgpt::fused {

void fail(const char* op, const std::string& msg) {
  throw std::invalid_argument(std::string(op) + ": " + msg);
}

void require_defined(const Tensor& t, const char* op, const char* what) {
  if (!t.defined()) fail(op, std::string(what) + " is undefined");
}

void require_floating(const Tensor& t, const char* op, const char* what) {
  require_defined(t, op, what);
  if (!is_floating(t.dtype()))
    fail(op, std::string(what) + " must be floating point, found " + std::string(dtype_name(t.dtype())));
}

void require_device(const Tensor& t, const Tensor& ref, const char* op, const char* what) {
  if (!(t.device() == ref.device()))
    fail(op, std::string(what) + " is on " + t.device().str() + " but the input is on " + ref.device().str());
}

void require_shape(const Tensor& t, const Shape& shape, const char* op, const char* what) {
  if (!(t.shape() == shape))
    fail(op, std::string(what) + " must have shape " + to_string(shape) + ", found " + to_string(t.shape()));
}

void require_int(const Tensor& t, const char* op, const char* what) {
  require_defined(t, op, what);
  if (t.dtype() != DType::i32 && t.dtype() != DType::i64)
    fail(op, std::string(what) + " must be int32 or int64, found " + std::string(dtype_name(t.dtype())));
}

void check_grad_like(const char* op, const Tensor& grad, const Tensor& x, const char* what) {
  require_floating(grad, op, what);
  require_device(grad, x, op, what);
  require_shape(grad, x.shape(), op, what);
}

DType compute_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

Tensor prepared(const Tensor& t, DType dt) {
  if (!t.defined()) return t;
  return ops::contiguous(t.dtype() == dt ? t : ops::to(t, dt));
}

Tensor prepared_heads(const Tensor& t, DType dt) {
  Tensor r = t.dtype() == dt ? t : ops::to(t, dt);
  const int n = r.dim();
  const int64_t D = r.size(-1);
  const bool unit_d = D <= 1 || r.strides()[n - 1] == 1;
  const bool rows_apart = r.size(-2) <= 1 || r.strides()[n - 2] >= D;
  return unit_d && rows_apart ? r : ops::contiguous(r);
}

Tensor cast_back(const Tensor& t, DType dt) { return t.dtype() == dt ? t : ops::to(t, dt); }

Tensor as_rows(const Tensor& x, const char* op) {
  if (x.dim() < 1) fail(op, "expected at least 1 dimension, found a scalar");
  return ops::reshape(x, {-1, x.size(-1)});
}

Shape rows_shape(const Tensor& x) {
  Shape s = x.shape();
  s.erase(s.size() - 1);
  return s;
}

}  // namespace mvgpt::fused
