#pragma once
// The math of the elementwise ops and the AdamW update as host/device functions, so that the CUDA
// kernels run exactly this code and a host test can check it against the CPU backend (which keeps
// its own vectorized loops). Floats compute in their own type, as the CPU does; integers get the
// ops index arithmetic needs. NaN rules follow PyTorch: relu keeps NaN, maximum/minimum propagate it.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <mvgpt/backends/backend.h>

#if defined(__CUDACC__)
#define MVGPT_HOST_DEVICE __host__ __device__
#else
#define MVGPT_HOST_DEVICE
#endif

namespace mvgpt::math {

// One name per function for float and double: expf/exp etc. resolve on the host (libm) and on the device.
MVGPT_HOST_DEVICE inline float m_exp(float x) { return ::expf(x); }
MVGPT_HOST_DEVICE inline double m_exp(double x) { return ::exp(x); }
MVGPT_HOST_DEVICE inline float m_log(float x) { return ::logf(x); }
MVGPT_HOST_DEVICE inline double m_log(double x) { return ::log(x); }
MVGPT_HOST_DEVICE inline float m_sqrt(float x) { return ::sqrtf(x); }
MVGPT_HOST_DEVICE inline double m_sqrt(double x) { return ::sqrt(x); }
MVGPT_HOST_DEVICE inline float m_tanh(float x) { return ::tanhf(x); }
MVGPT_HOST_DEVICE inline double m_tanh(double x) { return ::tanh(x); }
MVGPT_HOST_DEVICE inline float m_pow(float x, float y) { return ::powf(x, y); }
MVGPT_HOST_DEVICE inline double m_pow(double x, double y) { return ::pow(x, y); }
MVGPT_HOST_DEVICE inline float m_erf(float x) { return ::erff(x); }
MVGPT_HOST_DEVICE inline double m_erf(double x) { return ::erf(x); }
MVGPT_HOST_DEVICE inline float m_abs(float x) { return ::fabsf(x); }
MVGPT_HOST_DEVICE inline double m_abs(double x) { return ::fabs(x); }

template <typename T>
MVGPT_HOST_DEVICE inline T sigmoid(T x) {
  return T(1) / (T(1) + m_exp(-x));
}

// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename T>
MVGPT_HOST_DEVICE inline T gelu_tanh(T x) {
  const T k = T(0.7978845608028654);
  return T(0.5) * x * (T(1) + m_tanh(k * (x + T(0.044715) * x * x * x)));
}

// d/dx GELU(x) (tanh approximation), t = tanh(u), u = k (x + a x^3):
// (1 + t) / 2 + x / 2 (1 - t^2) k (1 + 3 a x^2).
template <typename T>
MVGPT_HOST_DEVICE inline T gelu_tanh_grad(T x) {
  const T k = T(0.7978845608028654), a = T(0.044715);
  const T x2 = x * x;
  const T t = m_tanh(k * (x + a * x2 * x));
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * a * x2);
}

// The exact GELU, x Phi(x) = x (1 + erf(x / sqrt 2)) / 2, and its derivative Phi(x) + x phi(x),
// phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
template <typename T>
MVGPT_HOST_DEVICE inline T gelu_erf(T x) {
  return T(0.5) * x * (T(1) + m_erf(x * T(0.70710678118654752440)));
}
template <typename T>
MVGPT_HOST_DEVICE inline T gelu_erf_grad(T x) {
  return T(0.5) * (T(1) + m_erf(x * T(0.70710678118654752440))) + x * T(0.39894228040143267794) * m_exp(T(-0.5) * x * x);
}

// d/dx x sigmoid(x) = s (1 + x (1 - s)), s = sigmoid(x).
template <typename T>
MVGPT_HOST_DEVICE inline T silu_grad(T x) {
  const T s = sigmoid(x);
  return s * (T(1) + x * (T(1) - s));
}

// x^s with the exponents the CPU special-cases computed as products (pow() is slow and does not
// vectorize); every backend runs this same code.
template <typename T>
MVGPT_HOST_DEVICE inline T power(T v, T s) {
  if (s == T(2)) return v * v;
  if (s == T(3)) return v * v * v;
  if (s == T(1)) return v;
  if (s == T(0.5)) return m_sqrt(v);
  if (s == T(-1)) return T(1) / v;
  return m_pow(v, s);
}

// |v| for the integer tensors (abs takes ints).
MVGPT_HOST_DEVICE inline int32_t m_abs(int32_t v) { return v < 0 ? -v : v; }
MVGPT_HOST_DEVICE inline int64_t m_abs(int64_t v) { return v < 0 ? -v : v; }

// Unary<op>::forward(v, s) and ::derivative(v, s): the op's row of backends/unary_ops.h, one type
// per op so that a loop over a tensor is compiled (and vectorized) for that op alone.
template <UnaryOp op>
struct Unary;
#define MVGPT_UNARY_MATH(name, call, ints, grad, domain, forward, derivative)  \
  template <>                                                                 \
  struct Unary<UnaryOp::name> {                                               \
    template <typename T>                                                     \
    MVGPT_HOST_DEVICE static T forward_of(T v, T s) {                         \
      return T(forward);                                                      \
    }                                                                         \
    template <typename T>                                                     \
    MVGPT_HOST_DEVICE static T derivative_of(T v, T s) {                      \
      return T(derivative);                                                   \
    }                                                                         \
  };
MVGPT_UNARY_OPS(MVGPT_UNARY_MATH)
#undef MVGPT_UNARY_MATH

// f(v), or with Derivative f'(v), of a unary op on a float or double.
template <bool Derivative, typename T>
MVGPT_HOST_DEVICE inline T unary_apply(UnaryOp op, T v, T s) {
  switch (op) {
#define MVGPT_UNARY_CASE(name, ...)                                                \
  case UnaryOp::name:                                                              \
    if constexpr (Derivative) return Unary<UnaryOp::name>::derivative_of(v, s); \
    else return Unary<UnaryOp::name>::forward_of(v, s);
    MVGPT_UNARY_OPS(MVGPT_UNARY_CASE)
#undef MVGPT_UNARY_CASE
  }
  return v;
}
template <typename T>
MVGPT_HOST_DEVICE inline T unary_float(UnaryOp op, T v, T s) {
  return unary_apply<false>(op, v, s);
}
template <typename T>
MVGPT_HOST_DEVICE inline T unary_derivative(UnaryOp op, T v, T s) {
  return unary_apply<true>(op, v, s);
}

// The unary ops integer tensors support (the ops layer rejects the others): the table's ints column.
constexpr bool unary_int_supported(UnaryOp op) { return unary_op_info(op).ints; }

template <typename T>
MVGPT_HOST_DEVICE inline T unary_int(UnaryOp op, T v, T s) {
  switch (op) {
#define MVGPT_UNARY_CASE(name, call, ints, ...)                         \
  case UnaryOp::name:                                                   \
    if constexpr (ints) return Unary<UnaryOp::name>::forward_of(v, s); \
    else return v;
    MVGPT_UNARY_OPS(MVGPT_UNARY_CASE)
#undef MVGPT_UNARY_CASE
  }
  return v;
}

// add/sub/mul/div/maximum/minimum (div only for floats: the ops layer rejects it for integers).
template <typename T>
MVGPT_HOST_DEVICE inline T binary_arith(BinaryOp op, T x, T y) {
  switch (op) {
    case BinaryOp::add: return T(x + y);
    case BinaryOp::sub: return T(x - y);
    case BinaryOp::mul: return T(x * y);
    case BinaryOp::div: return T(x / y);
    case BinaryOp::maximum: return (x > y || x != x) ? x : y;
    case BinaryOp::minimum: return (x < y || x != x) ? x : y;
    default: return x;
  }
}

template <typename T>
MVGPT_HOST_DEVICE inline bool binary_compare(BinaryOp op, T x, T y) {
  switch (op) {
    case BinaryOp::eq: return x == y;
    case BinaryOp::ne: return x != y;
    case BinaryOp::lt: return x < y;
    case BinaryOp::le: return x <= y;
    case BinaryOp::gt: return x > y;
    case BinaryOp::ge: return x >= y;
    default: return false;
  }
}

// Correctly rounded +, -, *, /, sqrt that nvcc may not contract into FMAs (it does by default, for
// plain operators). Host code is compiled in ISO mode (-ffp-contract=off): plain operators suffice.
#if defined(__CUDA_ARCH__)
__device__ inline float rn_add(float a, float b) { return __fadd_rn(a, b); }
__device__ inline float rn_sub(float a, float b) { return __fsub_rn(a, b); }
__device__ inline float rn_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ inline float rn_div(float a, float b) { return __fdiv_rn(a, b); }
__device__ inline float rn_sqrt(float a) { return __fsqrt_rn(a); }
__device__ inline double rn_add(double a, double b) { return __dadd_rn(a, b); }
__device__ inline double rn_sub(double a, double b) { return __dsub_rn(a, b); }
__device__ inline double rn_mul(double a, double b) { return __dmul_rn(a, b); }
__device__ inline double rn_div(double a, double b) { return __ddiv_rn(a, b); }
__device__ inline double rn_sqrt(double a) { return __dsqrt_rn(a); }
#else
template <typename T> inline T rn_add(T a, T b) { return a + b; }
template <typename T> inline T rn_sub(T a, T b) { return a - b; }
template <typename T> inline T rn_mul(T a, T b) { return a * b; }
template <typename T> inline T rn_div(T a, T b) { return a / b; }
inline float rn_sqrt(float a) { return std::sqrt(a); }
inline double rn_sqrt(double a) { return std::sqrt(a); }
#endif

// bfloat16 bits <-> float, the same rounding as mvgpt::bfloat16 (nearest even; NaN stays a quiet NaN).
MVGPT_HOST_DEVICE inline float bf16_bits_to_float(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

MVGPT_HOST_DEVICE inline uint16_t float_to_bf16_bits(float f) {
#if defined(__CUDA_ARCH__)
  uint32_t u = __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
#endif
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

}  // namespace mvgpt::math
