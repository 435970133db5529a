// Elementwise kernels: unary, binary (broadcast inputs arrive as stride-0 views) and where.
// Every kernel walks runs along the innermost merged dimension (strided.h); runs with unit strides,
// which is every contiguous operand and every broadcast row, take plain loops the compiler vectorizes.
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <mvgpt/backends/cpu/cpu_backend.h>
#include <mvgpt/backends/elementwise_math.h>
#include <mvgpt/backends/cpu/strided.h>
#include <mvgpt/backends/cpu/vec_math.h>

namespace mvgpt::cpu {
namespace {

template <typename T>
constexpr bool is_math_type = std::is_same_v<T, float> || std::is_same_v<T, double>;
template <typename T>
constexpr bool is_int_type = std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>;

template <typename T, typename O, typename F>
void map_unary(const Tensor& x, const Tensor& out, F f) {
  const T* xp = static_cast<const T*>(x.raw_data());
  O* op = static_cast<O*>(out.raw_data());
  auto l = make_layout<2>(out.shape(), {&out.strides(), &x.strides()});
  parallel_runs(l, kElementwiseGrain, [&](const int64_t* off, int64_t n, const int64_t* s) {
    O* o = op + off[0];
    const T* a = xp + off[1];
    if (s[0] == 1 && s[1] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * s[0]] = f(a[i * s[1]]);
    }
  });
}

// float ops with an 8-wide form (vec_math.h): whole vectors along unit-stride runs.
template <typename F8>
void map_unary_f32x8(const Tensor& x, const Tensor& out, F8 f8) {
  const float* xp = static_cast<const float*>(x.raw_data());
  float* op = out.data<float>();
  auto l = make_layout<2>(out.shape(), {&out.strides(), &x.strides()});
  parallel_runs(l, kElementwiseGrain, [&](const int64_t* off, int64_t n, const int64_t* s) {
    float* o = op + off[0];
    const float* a = xp + off[1];
    if (s[0] == 1 && s[1] == 1) {
      map8(a, o, n, f8);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * s[0]] = f8(splat(a[i * s[1]]))[0];
    }
  });
}

template <typename T, typename O, typename F>
void map_binary(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  const T* ap = static_cast<const T*>(a.raw_data());
  const T* bp = static_cast<const T*>(b.raw_data());
  O* op = static_cast<O*>(out.raw_data());
  auto l = make_layout<3>(out.shape(), {&out.strides(), &a.strides(), &b.strides()});
  parallel_runs(l, kElementwiseGrain, [&](const int64_t* off, int64_t n, const int64_t* s) {
    O* o = op + off[0];
    const T* x = ap + off[1];
    const T* y = bp + off[2];
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
      // In pieces of at most 1 KB a stream, the lines 2 KB on asked for first (NOTE [ Prefetching ahead ] in
      // vec_math.h): the step's residual adds and gradient sums stream whole activations.
      constexpr int64_t piece = std::max<int64_t>(1, 1024 / int64_t(std::max(sizeof(T), sizeof(O))));
      for (int64_t i0 = 0; i0 < n; i0 += piece) {
        const int64_t i1 = std::min(n, i0 + piece);
        prefetch_lines(x + i0, int64_t(kPrefetchAhead), (i1 - i0) * int64_t(sizeof(T)));
        prefetch_lines(y + i0, int64_t(kPrefetchAhead), (i1 - i0) * int64_t(sizeof(T)));
        prefetch_lines(o + i0, int64_t(kPrefetchAhead), (i1 - i0) * int64_t(sizeof(O)), /*for_write=*/true);
        for (int64_t i = i0; i < i1; ++i) o[i] = f(x[i], y[i]);
      }
    } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {  // b broadcast along the run
      const T yv = *y;
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
    } else if (s[0] == 1 && s[1] == 0 && s[2] == 1) {  // a broadcast along the run
      const T xv = *x;
      for (int64_t i = 0; i < n; ++i) o[i] = f(xv, y[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * s[0]] = f(x[i * s[1]], y[i * s[2]]);
    }
  });
}

// float binary ops with an 8-wide form: whole vectors where all three runs have unit stride.
template <typename F8>
void map_binary_f32x8(const Tensor& a, const Tensor& b, const Tensor& out, F8 f8) {
  const float* ap = static_cast<const float*>(a.raw_data());
  const float* bp = static_cast<const float*>(b.raw_data());
  float* op = out.data<float>();
  auto l = make_layout<3>(out.shape(), {&out.strides(), &a.strides(), &b.strides()});
  parallel_runs(l, kElementwiseGrain, [&](const int64_t* off, int64_t n, const int64_t* s) {
    float* o = op + off[0];
    const float* x = ap + off[1];
    const float* y = bp + off[2];
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
      int64_t i = 0;
#ifdef __AVX512F__
      for (; i + 2 * kVec <= n; i += 2 * kVec) {  // NOTE [ Sixteen lanes ], NOTE [ Prefetching ahead ]
        prefetch_ahead(x + i);
        prefetch_ahead(y + i);
        prefetch_ahead_for_write(o + i);
        store16(o + i, f8(load16(x + i), load16(y + i)));
      }
#endif
      for (; i + kVec <= n; i += kVec) store8(o + i, f8(load8(x + i), load8(y + i)));
      if (i < n) store_partial(o + i, f8(load_partial(x + i, n - i), load_partial(y + i, n - i)), n - i);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * s[0]] = f8(splat(x[i * s[1]]), splat(y[i * s[2]]))[0];
    }
  });
}

template <typename T>
void unary_typed(UnaryOp op, const Tensor& x, const Tensor& out, double scalar) {
  const T s = static_cast<T>(scalar);
  if constexpr (std::is_same_v<T, float>) {
    switch (op) {
      case UnaryOp::exp: return map_unary_f32x8(x, out, [](auto v) { return exp_v(v); });
      case UnaryOp::tanh: return map_unary_f32x8(x, out, [](auto v) { return tanh_v(v); });
      case UnaryOp::sigmoid: return map_unary_f32x8(x, out, [](auto v) { return sigmoid_v(v); });
      case UnaryOp::gelu: return map_unary_f32x8(x, out, [](auto v) { return gelu_v(v); });
      case UnaryOp::silu: return map_unary_f32x8(x, out, [](auto v) { return silu_v(v); });
      default: break;
    }
  }
  // Every other op and dtype: the table's formula, one loop per op (NOTE [ The unary op table ]).
  if constexpr (is_math_type<T> || is_int_type<T>) {
    switch (op) {
#define MVGPT_UNARY_CASE(name, call, ints, ...)                                                            \
  case UnaryOp::name:                                                                                      \
    if constexpr (is_math_type<T> || ints)                                                                 \
      return map_unary<T, T>(x, out, [s](T v) { return math::Unary<UnaryOp::name>::forward_of(v, s); }); \
    break;
      MVGPT_UNARY_OPS(MVGPT_UNARY_CASE)
#undef MVGPT_UNARY_CASE
    }
  }
  throw std::logic_error(std::string("CpuBackend::unary: ") + unary_op_name(op) + " is not implemented for " +
                         std::string(dtype_name(x.dtype())));
}

template <typename T>
void compare_typed(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  switch (op) {
    case BinaryOp::eq: return map_binary<T, bool>(a, b, out, [](T x, T y) { return x == y; });
    case BinaryOp::ne: return map_binary<T, bool>(a, b, out, [](T x, T y) { return x != y; });
    case BinaryOp::lt: return map_binary<T, bool>(a, b, out, [](T x, T y) { return x < y; });
    case BinaryOp::le: return map_binary<T, bool>(a, b, out, [](T x, T y) { return x <= y; });
    case BinaryOp::gt: return map_binary<T, bool>(a, b, out, [](T x, T y) { return x > y; });
    case BinaryOp::ge: return map_binary<T, bool>(a, b, out, [](T x, T y) { return x >= y; });
    default: break;
  }
}

// out = g * f'(x) (the fused backward of a unary op): 8-wide for the float GELU and SiLU of the MLP,
// the table's derivative for everything else.
template <typename T>
void unary_backward_typed(UnaryOp op, const Tensor& x, const Tensor& g, const Tensor& out, double scalar) {
  if constexpr (std::is_same_v<T, float>) {
    if (op == UnaryOp::gelu) return map_binary_f32x8(x, g, out, [](auto v, auto d) { return d * gelu_grad_v(v); });
    if (op == UnaryOp::silu) return map_binary_f32x8(x, g, out, [](auto v, auto d) { return d * silu_grad_v(v); });
  }
  if constexpr (is_math_type<T>) {
    const T s = static_cast<T>(scalar);
    switch (op) {
#define MVGPT_UNARY_CASE(name, ...)                                      \
  case UnaryOp::name:                                                    \
    return map_binary<T, T>(x, g, out, [s](T v, T d) {                   \
      return d * math::Unary<UnaryOp::name>::derivative_of(v, s);        \
    });
      MVGPT_UNARY_OPS(MVGPT_UNARY_CASE)
#undef MVGPT_UNARY_CASE
    }
  }
  throw std::logic_error(std::string("CpuBackend::unary_backward: ") + unary_op_name(op) +
                         " is not implemented for " + std::string(dtype_name(x.dtype())));
}

template <typename T>
void arith_typed(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  if constexpr (is_math_type<T> || is_int_type<T>) {
    switch (op) {
      case BinaryOp::add: return map_binary<T, T>(a, b, out, [](T x, T y) { return T(x + y); });
      case BinaryOp::sub: return map_binary<T, T>(a, b, out, [](T x, T y) { return T(x - y); });
      case BinaryOp::mul: return map_binary<T, T>(a, b, out, [](T x, T y) { return T(x * y); });
      // maximum/minimum propagate NaN, as PyTorch does.
      case BinaryOp::maximum:
        return map_binary<T, T>(a, b, out, [](T x, T y) { return (x > y || x != x) ? x : y; });
      case BinaryOp::minimum:
        return map_binary<T, T>(a, b, out, [](T x, T y) { return (x < y || x != x) ? x : y; });
      case BinaryOp::div:
        if constexpr (is_math_type<T>) return map_binary<T, T>(a, b, out, [](T x, T y) { return x / y; });
        break;
      default: break;
    }
  }
  throw std::logic_error(std::string("CpuBackend::binary: ") + binary_op_name(op) + " is not implemented for " +
                         std::string(dtype_name(a.dtype())));
}

}  // namespace

void CpuBackend::unary(UnaryOp op, const Tensor& x, const Tensor& out, double scalar) {
  dispatch_dtype(x.dtype(), [&](auto tag) { unary_typed<decltype(tag)>(op, x, out, scalar); });
}

void CpuBackend::unary_backward(UnaryOp op, const Tensor& x, const Tensor& grad, const Tensor& out, double scalar) {
  dispatch_dtype(x.dtype(), [&](auto tag) { unary_backward_typed<decltype(tag)>(op, x, grad, out, scalar); });
}

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_dtype(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (is_comparison(op)) {
      if constexpr (std::is_same_v<T, bfloat16>)
        throw std::logic_error("CpuBackend::binary: bfloat16 must be widened by the ops layer");
      else compare_typed<T>(op, a, b, out);
    } else {
      arith_typed<T>(op, a, b, out);
    }
  });
}

void CpuBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  // Selection only moves elements, so every dtype works (bfloat16 included).
  dispatch_dtype(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const bool* cp = static_cast<const bool*>(cond.raw_data());
    const T* ap = static_cast<const T*>(a.raw_data());
    const T* bp = static_cast<const T*>(b.raw_data());
    T* op = static_cast<T*>(out.raw_data());
    auto l = make_layout<4>(out.shape(), {&out.strides(), &cond.strides(), &a.strides(), &b.strides()});
    parallel_runs(l, kElementwiseGrain, [&](const int64_t* off, int64_t n, const int64_t* s) {
      T* o = op + off[0];
      const bool* c = cp + off[1];
      const T* x = ap + off[2];
      const T* y = bp + off[3];
      if (s[0] == 1 && s[1] == 1 && s[2] == 1 && s[3] == 1) {
        for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? x[i] : y[i];
      } else {
        for (int64_t i = 0; i < n; ++i) o[i * s[0]] = c[i * s[1]] ? x[i * s[2]] : y[i * s[3]];
      }
    });
  });
}

}  // namespace mvgpt::cpu
