#pragma once
// Internal: the layers above autograd (nn, the GPT package, the apps) use the one public op API,
// <mvgpt/autograd/ops.h> with the no-grad ops of no_grad_ops.h; their targets define
// MVGPT_PUBLIC_OPS_ONLY (mvgpt_public_ops_only in cmake/mvgptTargets.cmake), which makes including
// this header a compile error, so the rule holds by construction.
#ifdef MVGPT_PUBLIC_OPS_ONLY
#error "<mvgpt/backends/ops.h> is internal below autograd: use <mvgpt/autograd/ops.h> (and NoGradGuard for in-place writes)"
#endif
// The raw tensor ops: check arguments, broadcast, allocate the result and dispatch to the device's
// backend. They record no gradient; the differentiable versions with the same names live in
// autograd/ops.h (namespace mvgpt) and are what models use. Every error names the op and the
// expected vs found shapes, dtypes or devices.
#include <optional>
#include <utility>
#include <vector>

#include <mvgpt/backends/backend.h>
#include <mvgpt/backends/no_grad_ops.h>
#include <mvgpt/tensor/generator.h>
#include <mvgpt/tensor/tensor.h>
#include <mvgpt/tensor/views.h>

namespace mvgpt::ops {

using Axes = std::vector<int>;

// --- creation, comparisons and argmax: public (no_grad_ops.h), the same functions here ---
using mvgpt::arange;
using mvgpt::argmax;
using mvgpt::empty;
using mvgpt::eq;
using mvgpt::full;
using mvgpt::full_like;
using mvgpt::ge;
using mvgpt::gt;
using mvgpt::le;
using mvgpt::lt;
using mvgpt::ne;
using mvgpt::ones;
using mvgpt::ones_like;
using mvgpt::rand;
using mvgpt::randn;
using mvgpt::zeros;
using mvgpt::zeros_like;

// --- copies and conversions ---
Tensor contiguous(const Tensor& t);  // t itself when already contiguous
Tensor clone(const Tensor& t);       // always a fresh contiguous copy
Tensor to(const Tensor& t, DType dtype);
Tensor to(const Tensor& t, Device device);
// dst <- src in place: public (no_grad_ops.h), the same functions here.
using mvgpt::copy_;
using mvgpt::fill_;

// --- views (share storage; reshape copies only when the layout demands it) ---
Tensor reshape(const Tensor& t, const Shape& shape);
Tensor flatten(const Tensor& t, int start_axis = 0, int end_axis = -1);
Tensor permute(const Tensor& t, const std::vector<int>& axes);
Tensor transpose(const Tensor& t, int axis0, int axis1);
Tensor narrow(const Tensor& t, int axis, int64_t start, int64_t length);
Tensor select(const Tensor& t, int axis, int64_t index);
Tensor expand(const Tensor& t, const Shape& shape);
Tensor squeeze(const Tensor& t, int axis);
Tensor unsqueeze(const Tensor& t, int axis);

// --- elementwise ---
Tensor unary(UnaryOp op, const Tensor& x, double scalar = 0);
// ops::neg(x), ops::exp(x), ...: one function per row of backends/unary_ops.h called with x alone.
#define MVGPT_UNARY_FUNCTION(name) Tensor name(const Tensor& x);
MVGPT_UNARY_FUNCTIONS()
#undef MVGPT_UNARY_FUNCTION
Tensor pow(const Tensor& x, double exponent);
Tensor add(const Tensor& x, double s);
Tensor mul(const Tensor& x, double s);
// The fused backward of a unary op: grad * f'(x) in one pass over x and grad (broadcast).
Tensor unary_backward(UnaryOp op, const Tensor& x, const Tensor& grad, double scalar = 0);

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, const Tensor& b);
// sum + g as a gradient is gathered (the autograd engine's sums): written into the memory of sum, or
// else of g, where that handle is the only one on its storage (nothing else can see the write), is
// contiguous, and has the other's shape and float32 or float64 dtype; otherwise a fresh add(sum, g).
// The same values either way (sum + g, lane for lane). NOTE [ Sums gathered in place ]
Tensor accumulate(Tensor sum, Tensor g);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// --- reductions (axes empty = all axes) ---
Tensor sum(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
Tensor max(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
Tensor min(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
Tensor softmax(const Tensor& x, int axis = -1);
Tensor log_softmax(const Tensor& x, int axis = -1);
// {to(x, DType::bf16), sum(x, {0})} of a float32 x (R, C), the same values: a linear layer's
// incoming gradient as its backward's bfloat16 products take it, and the layer's bias gradient, in
// one pass over x where the backend has one (NOTE [ A gradient's operand and column sums ] in
// backends/cpu/cpu_reduce.cpp).
std::pair<Tensor, Tensor> to_bf16_with_column_sums(const Tensor& x);
// Sums `x` down to `shape` (undoes broadcasting): the one place gradients are un-broadcast.
Tensor sum_to(const Tensor& x, const Shape& shape);

// --- linear algebra ---
// NumPy matmul: 1-d operands are promoted and the added axis removed; batch dims broadcast.
// bfloat16 operands are multiplied as they are and summed in float32 (the backends' mixed GEMM);
// the result is `out` (bfloat16 or float32; the operands' dtype when absent).
Tensor matmul(const Tensor& a, const Tensor& b, std::optional<DType> out = {});
// nn.Linear: x (..., in) @ weight (out, in)^T + bias (out) -> (..., out); bias may be undefined.
// bfloat16 x and weight as in matmul; the bias may then be bfloat16 or float32.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, std::optional<DType> out = {});

// --- indexing ---
Tensor index_select(const Tensor& x, int axis, const Tensor& index);
Tensor gather(const Tensor& x, int axis, const Tensor& index);
// Out of place: a copy of x with src added at `index` along axis.
Tensor index_add(const Tensor& x, int axis, const Tensor& index, const Tensor& src);
Tensor scatter_add(const Tensor& x, int axis, const Tensor& index, const Tensor& src);
// The same into x in place (bumps its version): the backward of a read scatters into zeros it made
// itself, without a copy of them.
void index_add_(const Tensor& x, int axis, const Tensor& index, const Tensor& src);
void scatter_add_(const Tensor& x, int axis, const Tensor& index, const Tensor& src);
// weight (V, C), ids (...) -> (..., C).
Tensor embedding(const Tensor& weight, const Tensor& ids);

// --- joining ---
Tensor cat(const std::vector<Tensor>& tensors, int axis);
Tensor stack(const std::vector<Tensor>& tensors, int axis);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int axis);
std::vector<Tensor> chunk(const Tensor& x, int chunks, int axis);

// --- fused kernels ---

// --- checks shared by the ops and the layers above ---
void check_same_device(const Tensor& a, const Tensor& b, const char* op);
void check_same_dtype(const Tensor& a, const Tensor& b, const char* op);
void check_floating(const Tensor& t, const char* op);
void check_dim(const Tensor& t, int ndim, const char* op, const char* what);
// Throws when any index is outside [0, size): "op: index 12 is out of range for axis 0 of size 10"
// (axis < 0 leaves the axis out of the message). Also rejects non-integer index dtypes.
void check_indices(const Tensor& index, int64_t size, const char* op, int axis = -1);

}  // namespace mvgpt::ops
