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
MVGPT_HOST_DEVICE inline float m_exp(float x) { return expf(x); }
MVGPT_HOST_DEVICE inline double m_exp(double x) { return exp(x); }
MVGPT_HOST_DEVICE inline float m_log(float x) { return logf(x); }
MVGPT_HOST_DEVICE inline double m_log(double x) { return log(x); }
MVGPT_HOST_DEVICE inline float m_sqrt(float x) { return sqrtf(x); }
MVGPT_HOST_DEVICE inline double m_sqrt(double x) { return sqrt(x); }
MVGPT_HOST_DEVICE inline float m_tanh(float x) { return tanhf(x); }
MVGPT_HOST_DEVICE inline double m_tanh(double x) { return tanh(x); }
MVGPT_HOST_DEVICE inline float m_pow(float x, float y) { return powf(x, y); }
MVGPT_HOST_DEVICE inline double m_pow(double x, double y) { return pow(x, y); }
MVGPT_HOST_DEVICE inline float m_erf(float x) { return erff(x); }
MVGPT_HOST_DEVICE inline double m_erf(double x) { return erf(x); }
MVGPT_HOST_DEVICE inline float m_abs(float x) { return fabsf(x); }
MVGPT_HOST_DEVICE inline double m_abs(double x) { return fabs(x); }

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

// A unary op on a float or double.
template <typename T>
MVGPT_HOST_DEVICE inline T unary_float(UnaryOp op, T v, T s) {
  switch (op) {
    case UnaryOp::neg: return -v;
    case UnaryOp::exp: return m_exp(v);
    case UnaryOp::log: return m_log(v);
    case UnaryOp::sqrt: return m_sqrt(v);
    case UnaryOp::rsqrt: return T(1) / m_sqrt(v);
    case UnaryOp::tanh: return m_tanh(v);
    case UnaryOp::sigmoid: return sigmoid(v);
    case UnaryOp::relu: return v < T(0) ? T(0) : v;  // keeps NaN
    case UnaryOp::gelu: return gelu_tanh(v);
    case UnaryOp::gelu_erf: return gelu_erf(v);
    case UnaryOp::silu: return v * sigmoid(v);
    case UnaryOp::abs: return m_abs(v);
    case UnaryOp::pow_scalar:
      // The exponents the CPU special-cases, computed the same way.
      if (s == T(2)) return v * v;
      if (s == T(3)) return v * v * v;
      if (s == T(1)) return v;
      if (s == T(0.5)) return m_sqrt(v);
      if (s == T(-1)) return T(1) / v;
      return m_pow(v, s);
    case UnaryOp::add_scalar: return v + s;
    case UnaryOp::mul_scalar: return v * s;
    case UnaryOp::rsub_scalar: return s - v;
    case UnaryOp::rdiv_scalar: return s / v;
    case UnaryOp::sign: return v > T(0) ? T(1) : (v < T(0) ? T(-1) : v);  // keeps 0, -0 and NaN
    case UnaryOp::square: return v * v;
  }
  return v;
}

// The unary ops integer tensors support (the ops layer rejects the others).
MVGPT_HOST_DEVICE inline bool unary_int_supported(UnaryOp op) {
  return op == UnaryOp::neg || op == UnaryOp::abs || op == UnaryOp::add_scalar || op == UnaryOp::mul_scalar ||
         op == UnaryOp::rsub_scalar || op == UnaryOp::sign || op == UnaryOp::square;
}

template <typename T>
MVGPT_HOST_DEVICE inline T unary_int(UnaryOp op, T v, T s) {
  switch (op) {
    case UnaryOp::neg: return T(-v);
    case UnaryOp::abs: return v < 0 ? T(-v) : v;
    case UnaryOp::add_scalar: return T(v + s);
    case UnaryOp::mul_scalar: return T(v * s);
    case UnaryOp::rsub_scalar: return T(s - v);
    case UnaryOp::sign: return T((v > 0) - (v < 0));
    case UnaryOp::square: return T(v * v);
    default: return v;
  }
}

// add/sub/mul/div/maximum/minimum and the fused backward ops (div and the backward ops only for
// floats: the ops layer rejects them for integers).
template <typename T>
MVGPT_HOST_DEVICE inline T binary_arith(BinaryOp op, T x, T y) {
  switch (op) {
    case BinaryOp::add: return T(x + y);
    case BinaryOp::sub: return T(x - y);
    case BinaryOp::mul: return T(x * y);
    case BinaryOp::div: return T(x / y);
    case BinaryOp::maximum: return (x > y || x != x) ? x : y;
    case BinaryOp::minimum: return (x < y || x != x) ? x : y;
    case BinaryOp::gelu_backward:
      if constexpr (std::is_floating_point_v<T>) return y * gelu_tanh_grad(x);
      return x;
    case BinaryOp::silu_backward:
      if constexpr (std::is_floating_point_v<T>) return y * silu_grad(x);
      return x;
    case BinaryOp::gelu_erf_backward:
      if constexpr (std::is_floating_point_v<T>) return y * gelu_erf_grad(x);
      return x;
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
