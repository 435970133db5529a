// The non-differentiable part of the public op API (creation, comparisons, argmax): the raw ops,
// which record nothing, under the public names (the raw header is internal).
#include <mvgpt/autograd/ops.h>

#include <mvgpt/backends/ops.h>
#include <mvgpt/tensor/grad_state.h>

namespace mvgpt {

Tensor empty(const Shape& shape, DType dtype, Device device) { return ops::empty(shape, dtype, device); }
Tensor zeros(const Shape& shape, DType dtype, Device device) { return ops::zeros(shape, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return ops::ones(shape, dtype, device); }
Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  return ops::full(shape, value, dtype, device);
}
Tensor zeros_like(const Tensor& t) { return ops::zeros_like(t); }
Tensor ones_like(const Tensor& t) { return ops::ones_like(t); }
Tensor full_like(const Tensor& t, double value) { return ops::full_like(t, value); }
Tensor arange(double start, double end, double step, DType dtype, Device device) {
  return ops::arange(start, end, step, dtype, device);
}
Tensor rand(const Shape& shape, DType dtype, Device device, Generator* gen) { return ops::rand(shape, dtype, device, gen); }
Tensor randn(const Shape& shape, DType dtype, Device device, Generator* gen) {
  return ops::randn(shape, dtype, device, gen);
}

Tensor eq(const Tensor& a, const Tensor& b) {
  const autograd::InternalOps internal;  // no gradient to lose: the result is bool
  return ops::eq(a, b);
}
Tensor ne(const Tensor& a, const Tensor& b) {
  const autograd::InternalOps internal;  // no gradient to lose: the result is bool
  return ops::ne(a, b);
}
Tensor lt(const Tensor& a, const Tensor& b) {
  const autograd::InternalOps internal;  // no gradient to lose: the result is bool
  return ops::lt(a, b);
}
Tensor le(const Tensor& a, const Tensor& b) {
  const autograd::InternalOps internal;  // no gradient to lose: the result is bool
  return ops::le(a, b);
}
Tensor gt(const Tensor& a, const Tensor& b) {
  const autograd::InternalOps internal;  // no gradient to lose: the result is bool
  return ops::gt(a, b);
}
Tensor ge(const Tensor& a, const Tensor& b) {
  const autograd::InternalOps internal;  // no gradient to lose: the result is bool
  return ops::ge(a, b);
}
Tensor argmax(const Tensor& x, int axis, bool keepdim) {
  const autograd::InternalOps internal;  // an index: no gradient to lose
  return ops::argmax(x, axis, keepdim);
}

}  // namespace mvgpt
