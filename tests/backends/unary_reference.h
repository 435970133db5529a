#pragma once
// The independent reference of every unary op: f and f' in double, written from the op's definition
// with <cmath> (not from backends/unary_ops.h, whose formulas they check), with the range the tests
// sample and the scalar they pass. One entry per row of the table, in its order: the static_asserts
// below fail to compile when a row is added without its reference.
#include <cmath>
#include <iterator>

#include <mvgpt/backends/unary_ops.h>

namespace mvgpt::testing {

struct UnaryReference {
  UnaryOp op;
  double (*f)(double x, double s);
  double (*df)(double x, double s);
  double lo, hi;  // the range sampled (inside the op's domain)
  double scalar;  // s, for the ops that take one
};

inline double gelu_tanh_reference(double x) {
  return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
inline double gelu_tanh_derivative_reference(double x) {
  const double k = 0.7978845608028654, t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}
inline double sigmoid_reference(double x) { return 1 / (1 + std::exp(-x)); }
inline double phi_reference(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI); }

inline constexpr UnaryReference kUnaryReferences[] = {
    {UnaryOp::neg, [](double x, double) { return -x; }, [](double, double) { return -1.0; }, -3, 3, 0},
    {UnaryOp::exp, [](double x, double) { return std::exp(x); }, [](double x, double) { return std::exp(x); }, -80,
     80, 0},
    {UnaryOp::log, [](double x, double) { return std::log(x); }, [](double x, double) { return 1 / x; }, 0.01, 100,
     0},
    {UnaryOp::sqrt, [](double x, double) { return std::sqrt(x); },
     [](double x, double) { return 1 / (2 * std::sqrt(x)); }, 0.01, 100, 0},
    {UnaryOp::rsqrt, [](double x, double) { return 1 / std::sqrt(x); },
     [](double x, double) { return -0.5 * std::pow(x, -1.5); }, 0.01, 100, 0},
    {UnaryOp::tanh, [](double x, double) { return std::tanh(x); },
     [](double x, double) { return 1 / (std::cosh(x) * std::cosh(x)); }, -6, 6, 0},
    {UnaryOp::sigmoid, [](double x, double) { return sigmoid_reference(x); },
     [](double x, double) { return sigmoid_reference(x) * sigmoid_reference(-x); }, -30, 30, 0},
    {UnaryOp::relu, [](double x, double) { return x > 0 ? x : 0.0; }, [](double x, double) { return x > 0 ? 1.0 : 0.0; },
     -3, 3, 0},
    {UnaryOp::gelu, [](double x, double) { return gelu_tanh_reference(x); },
     [](double x, double) { return gelu_tanh_derivative_reference(x); }, -8, 8, 0},
    {UnaryOp::silu, [](double x, double) { return x * sigmoid_reference(x); },
     [](double x, double) { return sigmoid_reference(x) + x * sigmoid_reference(x) * sigmoid_reference(-x); }, -20,
     20, 0},
    {UnaryOp::abs, [](double x, double) { return std::fabs(x); },
     [](double x, double) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }, -3, 3, 0},
    {UnaryOp::pow_scalar, [](double x, double s) { return std::pow(x, s); },
     [](double x, double s) { return s * std::pow(x, s - 1); }, 0.1, 4, 2.5},
    {UnaryOp::add_scalar, [](double x, double s) { return x + s; }, [](double, double) { return 1.0; }, -3, 3, 1.5},
    {UnaryOp::mul_scalar, [](double x, double s) { return x * s; }, [](double, double s) { return s; }, -3, 3, -2},
    {UnaryOp::rsub_scalar, [](double x, double s) { return s - x; }, [](double, double) { return -1.0; }, -3, 3, 1},
    {UnaryOp::rdiv_scalar, [](double x, double s) { return s / x; }, [](double x, double s) { return -s / (x * x); },
     0.1, 3, 3},
    {UnaryOp::sign, [](double x, double) { return double((x > 0) - (x < 0)); }, [](double, double) { return 0.0; }, -3,
     3, 0},
    {UnaryOp::square, [](double x, double) { return x * x; }, [](double x, double) { return 2 * x; }, -3, 3, 0},
    {UnaryOp::gelu_erf, [](double x, double) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); },
     [](double x, double) { return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * phi_reference(x); }, -8, 8, 0},
    {UnaryOp::relu2, [](double x, double) { return x > 0 ? x * x : 0.0; },
     [](double x, double) { return x > 0 ? 2 * x : 0.0; }, -3, 3, 0},
};

constexpr bool unary_references_follow_the_table() {
  for (int i = 0; i < int(std::size(kUnaryReferences)); ++i)
    if (kUnaryReferences[i].op != UnaryOp(i)) return false;
  return true;
}
static_assert(std::size(kUnaryReferences) == size_t(kUnaryOpCount),
              "every row of backends/unary_ops.h needs its reference here (and only those)");
static_assert(unary_references_follow_the_table(), "kUnaryReferences must follow the order of the table");

inline const UnaryReference& unary_reference(UnaryOp op) { return kUnaryReferences[int(op)]; }

}  // namespace mvgpt::testing
