#pragma once
// The ops models use, in namespace mvgpt: the one public op API (the fused ops are in autograd/fused/).
// Each differentiable op, when grad mode is on and an input requires grad, records a node whose
// backward lives beside the forward in autograd/*.cpp. They are implemented with the raw ops of
// backends/ops.h (namespace mvgpt::ops, no gradient), which are internal: not installed, and in
// debug builds an error when handed an input that requires grad while grad mode is on.
//
// NOTE [ The list of differentiable ops ]
// Every function declared between the "differentiable ops: begin/end" markers below must have at
// least one gradient check registered (autograd/op_registry.h), one per overload. The test
// tests/autograd/registry_test.cpp reads this file and compares: an op added here without a
// gradient check, or a check for an op not declared here, fails it. Keep one declaration per line
// start ("Tensor name(" or "std::vector<Tensor> name(") inside the markers. The unary family is the
// exception: its declarations and checks are generated from one table (backends/unary_ops.h), so
// they cannot disagree, and the test takes its names from that table.
#include <vector>

#include <mvgpt/autograd/engine.h>
#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/backends/no_grad_ops.h>
#include <mvgpt/backends/unary_ops.h>
#include <mvgpt/tensor/generator.h>

namespace mvgpt {

using Axes = std::vector<int>;

// Creation, comparisons and argmax, which have no gradient: <mvgpt/backends/no_grad_ops.h>.

// A leaf sharing t's storage that requires grad (t must be floating point): a trainable parameter.
Tensor parameter(const Tensor& t);
// The same data with no gradient history (as Tensor::detach).
Tensor detach(const Tensor& t);

// differentiable ops: begin

// --- copies, conversions and views (gradients flow back through the view) ---
Tensor contiguous(const Tensor& x);  // x itself when already contiguous
Tensor clone(const Tensor& x);
Tensor to(const Tensor& x, DType dtype);    // the gradient is cast back; x itself when already dtype
Tensor to(const Tensor& x, Device device);  // the gradient moves back
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor flatten(const Tensor& x, int start_axis = 0, int end_axis = -1);
Tensor permute(const Tensor& x, const std::vector<int>& axes);
Tensor transpose(const Tensor& x, int axis0, int axis1);
Tensor narrow(const Tensor& x, int axis, int64_t start, int64_t length);
Tensor select(const Tensor& x, int axis, int64_t index);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor squeeze(const Tensor& x, int axis);
Tensor unsqueeze(const Tensor& x, int axis);

// --- elementwise, unary ---
// neg, exp, log, sqrt, rsqrt, tanh, sigmoid, relu, gelu (tanh approximation, as GPT-2), silu, abs,
// sign, square, gelu_erf (exact, x Phi(x): PyTorch's F.gelu default), relu2 (the squared ReLU), ...:
// `Tensor name(const Tensor& x)` for every row of backends/unary_ops.h called with x alone (that
// table is the list; the gradient check of each row is registered from it too). Derivatives follow
// PyTorch: relu', abs' and sign' are 0 at 0.
#define MVGPT_UNARY_FUNCTION(name) Tensor name(const Tensor& x);
MVGPT_UNARY_FUNCTIONS()
#undef MVGPT_UNARY_FUNCTION
// The rows that take a scalar:
Tensor pow(const Tensor& x, double exponent);
Tensor add(const Tensor& x, double s);
Tensor mul(const Tensor& x, double s);
Tensor rsub(const Tensor& x, double s);  // s - x
Tensor rdiv(const Tensor& x, double s);  // s / x

// --- elementwise, binary (NumPy broadcasting; gradients summed back to each input's shape) ---
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
// Where a == b the gradient is split evenly between a and b.
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// cond ? a : b (cond bool, no gradient).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// --- reductions (axes empty = all axes) ---
Tensor sum(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
// The gradient is split evenly among the positions that tie for the extremum.
Tensor max(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
Tensor min(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
Tensor softmax(const Tensor& x, int axis = -1);
Tensor log_softmax(const Tensor& x, int axis = -1);

// --- linear algebra ---
// NumPy matmul: 1-d operands are promoted and the added axis removed; batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
// nn.Linear: x (..., in) @ weight (out, in)^T + bias (out); bias may be undefined. One GEMM with the
// bias folded in; backward: dx = g W, dW = g^T x, dbias = column sums of g.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

// --- indexing (index tensors are int and get no gradient) ---
Tensor index_select(const Tensor& x, int axis, const Tensor& index);
Tensor gather(const Tensor& x, int axis, const Tensor& index);
Tensor index_add(const Tensor& x, int axis, const Tensor& index, const Tensor& src);
Tensor scatter_add(const Tensor& x, int axis, const Tensor& index, const Tensor& src);
// weight (V, C), ids (...) -> (..., C).
Tensor embedding(const Tensor& weight, const Tensor& ids);

// --- joining and splitting (split and chunk return narrow views, each with its own node) ---
Tensor cat(const std::vector<Tensor>& tensors, int axis);
Tensor stack(const std::vector<Tensor>& tensors, int axis);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int axis);
std::vector<Tensor> chunk(const Tensor& x, int chunks, int axis);

// --- dropout ---
// Zeroes each element with probability p and scales the rest by 1 / (1 - p) when training; x itself
// otherwise. The mask is drawn from gen (default_generator() when null).
Tensor dropout(const Tensor& x, double p, Generator* gen = nullptr, bool training = true);

// differentiable ops: end

// --- operators (the same ops) ---
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& x, double s);
Tensor operator-(const Tensor& x, double s);
Tensor operator*(const Tensor& x, double s);
Tensor operator/(const Tensor& x, double s);
Tensor operator+(double s, const Tensor& x);
Tensor operator-(double s, const Tensor& x);
Tensor operator*(double s, const Tensor& x);
Tensor operator/(double s, const Tensor& x);

}  // namespace mvgpt
