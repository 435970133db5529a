// Creation: filled tensors, ranges and Philox random tensors (public: no_grad_ops.h).
#include <cmath>
#include <stdexcept>
#include <string>

#include <mvgpt/backends/ops.h>
#include <mvgpt/backends/ops_internal.h>

namespace mvgpt {

namespace detail = ops::detail;

// The backend is created first: creating it registers the device's allocator (CUDA).
Tensor empty(const Shape& shape, DType dtype, Device device) {
  backend_for(device);
  return Tensor::empty(shape, dtype, device);
}

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  const profile::Span span("fill");
  backend_for(device).fill(t, value);
  return t;
}

Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }

Tensor zeros_like(const Tensor& t) {
  detail::check_defined(t, "zeros_like");
  return zeros(t.shape(), t.dtype(), t.device());
}
Tensor ones_like(const Tensor& t) {
  detail::check_defined(t, "ones_like");
  return ones(t.shape(), t.dtype(), t.device());
}
Tensor full_like(const Tensor& t, double value) {
  detail::check_defined(t, "full_like");
  return full(t.shape(), value, t.dtype(), t.device());
}

Tensor arange(double start, double end, double step, DType dtype, Device device) {
  if (step == 0 || !std::isfinite(step) || !std::isfinite(start) || !std::isfinite(end))
    throw std::invalid_argument("arange: start, end and step must be finite and step nonzero (start " +
                                std::to_string(start) + ", end " + std::to_string(end) + ", step " +
                                std::to_string(step) + ")");
  if (dtype == DType::boolean) throw std::invalid_argument("arange: dtype bool is not supported");
  double count = std::ceil((end - start) / step);
  int64_t n = count > 0 ? int64_t(count) : 0;
  Tensor t = empty({n}, dtype, device);
  if (n > 0) {
    const profile::Span span("arange");
    backend_for(device).arange(t, start, step);
  }
  return t;
}

static Tensor random_tensor(const Shape& shape, DType dtype, Device device, Generator* gen, RandomKind kind,
                            const char* op) {
  if (!is_floating(dtype))
    throw std::invalid_argument(std::string(op) + ": expected a floating-point dtype, found " + detail::name_of(dtype));
  Generator& g = gen ? *gen : default_generator();
  Tensor t = empty(shape, detail::compute_dtype(dtype), device);
  // The stream advances by numel whatever the dtype, so bfloat16 and float32 draws match.
  uint64_t offset = g.take(uint64_t(t.numel()));
  if (t.numel() > 0) {
    const profile::Span span("random");
    backend_for(device).random(t, kind, g.seed, offset);
  }
  return detail::narrow_result(t, dtype);
}

Tensor rand(const Shape& shape, DType dtype, Device device, Generator* gen) {
  return random_tensor(shape, dtype, device, gen, RandomKind::uniform, "rand");
}

Tensor randn(const Shape& shape, DType dtype, Device device, Generator* gen) {
  return random_tensor(shape, dtype, device, gen, RandomKind::normal, "randn");
}

}  // namespace mvgpt
