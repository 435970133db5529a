#pragma once
// The ops that have no gradient, public in namespace mvgpt (the raw ops of ops.h, internal, use the
// same functions): creation, in-place writes, comparisons (bool results, NumPy broadcasting) and
// argmax (int64 indices). autograd/ops.h includes this header: they are part of the one op API models use.
#include <mvgpt/tensor/generator.h>
#include <mvgpt/tensor/tensor.h>

namespace mvgpt {

// --- creation ---
Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = Device::cpu());
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
// [start, end) in steps of step.
Tensor arange(double start, double end, double step = 1, DType dtype = DType::i64, Device device = Device::cpu());
// Uniform [0, 1) and standard normal from a Philox stream (default_generator() when none given).
Tensor rand(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu(), Generator* gen = nullptr);
Tensor randn(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu(), Generator* gen = nullptr);

// --- in-place writes (no gradient): initialising weights, loading state, optimizer updates ---
// dst <- src (broadcast to dst's shape, converted to dst's dtype and device), in place; bumps dst's
// version. An in-place write records nothing, so with grad mode on a dst or src that requires grad
// is refused (std::logic_error): run it under NoGradGuard, as torch.no_grad() around param.copy_().
void copy_(const Tensor& dst, const Tensor& src);
void fill_(const Tensor& dst, double value);

// --- comparisons and argmax: inputs may require grad (nothing to differentiate) ---
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor argmax(const Tensor& x, int axis, bool keepdim = false);

}  // namespace mvgpt
