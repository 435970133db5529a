#pragma once
// NOTE [ The unary op table ]
// Every unary elementwise op is one row of MVGPT_UNARY_OPS, and everything else follows from it:
// the UnaryOp enum and its names (backend.h), the dtypes the ops layer accepts, the math the CPU
// loops and the CUDA kernels run (elementwise_math.h), the fused backward grad * f'(x), the raw op
// `ops::name` and the differentiable `name` (autograd/ops.h), its float64 gradient check (autograd/
// elementwise.cpp) and its CPU-vs-CUDA case (tests/backends/cuda_ops_test.cpp). Adding an op is one
// row here and its independent reference in tests/backends/unary_reference.h, which a static_assert
// keeps in step with this table; nothing else changes.
//
// X(name, call, ints, grad, domain, forward, derivative)
//   name        the enum value; also the public function for call `x`.
//   call        x: `Tensor name(const Tensor& x)` is declared and defined from the row;
//               scalar: the op takes a scalar s and its public function is written by hand
//               (pow(x, e), add(x, s), mul(x, s), rsub(x, s), rdiv(x, s) in autograd/elementwise.cpp).
//   ints        true when int32/int64 tensors take it too (what index arithmetic needs).
//   grad        input: the backward reads the input; constant: the derivative does not depend on it
//               (evaluated once at v = 0, nothing saved).
//   domain      where the gradient check samples: real (-1..1), positive, nonzero (off a kink at 0).
//   forward     y = f(v, s) for an element v of type T and the scalar s (of type T).
//   derivative  dy/dv, in v and s. Helpers: elementwise_math.h (m_exp, sigmoid, gelu_tanh_grad...).
// Names and formulas follow PyTorch (relu keeps NaN; abs' and sign's derivatives are 0 at 0).
#include <cstdint>
#include <iterator>

#define MVGPT_UNARY_OPS(X)                                                                                         \
  X(neg, x, true, constant, real, -v, T(-1))                                                                       \
  X(exp, x, false, input, real, m_exp(v), m_exp(v))                                                                \
  X(log, x, false, input, positive, m_log(v), T(1) / v)                                                            \
  X(sqrt, x, false, input, positive, m_sqrt(v), T(0.5) / m_sqrt(v))                                                \
  X(rsqrt, x, false, input, positive, T(1) / m_sqrt(v), T(-0.5) / (v * m_sqrt(v)))                                 \
  X(tanh, x, false, input, real, m_tanh(v), T(1) - m_tanh(v) * m_tanh(v))                                          \
  X(sigmoid, x, false, input, real, sigmoid(v), sigmoid(v) * (T(1) - sigmoid(v)))                                  \
  X(relu, x, false, input, nonzero, v < T(0) ? T(0) : v, v > T(0) ? T(1) : T(0))                                   \
  X(gelu, x, false, input, real, gelu_tanh(v), gelu_tanh_grad(v))                                                  \
  X(silu, x, false, input, real, v * sigmoid(v), silu_grad(v))                                                     \
  X(abs, x, true, input, nonzero, m_abs(v), v > T(0) ? T(1) : (v < T(0) ? T(-1) : T(0)))                           \
  X(pow_scalar, scalar, false, input, positive, power(v, s), s * power(v, s - T(1)))                               \
  X(add_scalar, scalar, true, constant, real, v + s, T(1))                                                         \
  X(mul_scalar, scalar, true, constant, real, v * s, s)                                                            \
  X(rsub_scalar, scalar, true, constant, real, s - v, T(-1))                                                       \
  X(rdiv_scalar, scalar, false, input, positive, s / v, -s / (v * v))                                              \
  X(sign, x, true, constant, nonzero, v > T(0) ? T(1) : (v < T(0) ? T(-1) : v), T(0))                              \
  X(square, x, true, input, real, v * v, T(2) * v)                                                                 \
  X(gelu_erf, x, false, input, real, gelu_erf(v), gelu_erf_grad(v))                                                \
  /* relu2: the squared ReLU (Primer; modded-nanogpt's MLP) */                                                     \
  X(relu2, x, false, input, real, v > T(0) ? v * v : T(0), v > T(0) ? T(2) * v : T(0))

// MVGPT_UNARY_FUNCTIONS() expands MVGPT_UNARY_FUNCTION(name), which the includer defines, once for
// every row called with x alone: how ops.h and autograd/ops.h declare, and their .cpp files define,
// `Tensor name(const Tensor& x)`.
#define MVGPT_UNARY_FUNCTION_ROW(name, call, ...) MVGPT_UNARY_FUNCTION_##call(name)
#define MVGPT_UNARY_FUNCTION_x(name) MVGPT_UNARY_FUNCTION(name)
#define MVGPT_UNARY_FUNCTION_scalar(name)
#define MVGPT_UNARY_FUNCTIONS() MVGPT_UNARY_OPS(MVGPT_UNARY_FUNCTION_ROW)

namespace mvgpt {

enum class UnaryOp : uint8_t {
#define MVGPT_UNARY_ENUM(name, ...) name,
  MVGPT_UNARY_OPS(MVGPT_UNARY_ENUM)
#undef MVGPT_UNARY_ENUM
};

enum class UnaryCall : uint8_t { x, scalar };
enum class UnaryGrad : uint8_t { input, constant };
enum class UnaryDomain : uint8_t { real, positive, nonzero };

// A row's columns but the math, for code that loops over the ops (the ops layer, registries, tests).
struct UnaryOpInfo {
  UnaryOp op;
  const char* name;  // the enum's name; unary_op_name() drops "_scalar" for messages ("pow", "add")
  UnaryCall call;
  bool ints;
  UnaryGrad grad;
  UnaryDomain domain;
};

inline constexpr UnaryOpInfo kUnaryOps[] = {
#define MVGPT_UNARY_INFO(name, call, ints, grad, domain, ...) \
  {UnaryOp::name, #name, UnaryCall::call, ints, UnaryGrad::grad, UnaryDomain::domain},
    MVGPT_UNARY_OPS(MVGPT_UNARY_INFO)
#undef MVGPT_UNARY_INFO
};
inline constexpr int kUnaryOpCount = int(std::size(kUnaryOps));

constexpr const UnaryOpInfo& unary_op_info(UnaryOp op) { return kUnaryOps[int(op)]; }

}  // namespace mvgpt
