#pragma once
// Argument checks and input preparation shared by the fused ops (autograd/fused/), below them so that
// any layer may use them. Each error names the op: "rms_norm: weight must have shape [4], found [5]".
#include <string>

#include <mvgpt/tensor/tensor.h>

namespace mvgpt::fused {

[[noreturn]] void fail(const char* op, const std::string& msg);
void require_defined(const Tensor& t, const char* op, const char* what);
void require_floating(const Tensor& t, const char* op, const char* what);
void require_device(const Tensor& t, const Tensor& ref, const char* op, const char* what);
void require_shape(const Tensor& t, const Shape& shape, const char* op, const char* what);
void require_int(const Tensor& t, const char* op, const char* what);
// A gradient for x: floating point, on x's device, with x's shape.
void check_grad_like(const char* op, const Tensor& grad, const Tensor& x, const char* what);
// Kernels compute in float64 for float64 inputs and in float32 otherwise (bfloat16 is widened).
DType compute_dtype(DType t);
// t in dtype dt and contiguous (t itself when it already is; undefined stays undefined).
Tensor prepared(const Tensor& t, DType dt);
// For the (B, H, T, D) kernels: a view is fine when D has unit stride and the rows do not overlap
// (e.g. q, k, v split out of a packed qkv); anything else is copied.
Tensor prepared_heads(const Tensor& t, DType dt);
// t in dtype dt (t itself when it already is).
Tensor cast_back(const Tensor& t, DType dt);
// x (..., C) viewed as rows (N, C), the layout of the row kernels (norms, cross-entropy).
Tensor as_rows(const Tensor& x, const char* op);
// x's shape without its last axis: the shape of per-row statistics.
Shape rows_shape(const Tensor& x);

}  // namespace mvgpt::fused
