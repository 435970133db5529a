// Elementwise ops against naive double loops, over contiguous, transposed, sliced, expanded and empty inputs.
#include <gtest/gtest.h>

#include <cmath>

#include <mvgpt/backends/ops.h>
#include "ops_test_util.h"

namespace mvgpt {
namespace {

using testing::expect_all_close;
using testing::expect_throw_with;
using testing::Kind;
using testing::make_input;

double gelu_ref(double x) { return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

struct UnaryCase {
  UnaryOp op;
  double scalar;
  double (*ref)(double, double);
  double lo, hi;
};

const UnaryCase kUnaryCases[] = {
    {UnaryOp::neg, 0, [](double x, double) { return -x; }, -3, 3},
    {UnaryOp::exp, 0, [](double x, double) { return std::exp(x); }, -80, 80},
    {UnaryOp::log, 0, [](double x, double) { return std::log(x); }, 0.01, 100},
    {UnaryOp::sqrt, 0, [](double x, double) { return std::sqrt(x); }, 0, 100},
    {UnaryOp::rsqrt, 0, [](double x, double) { return 1 / std::sqrt(x); }, 0.01, 100},
    {UnaryOp::tanh, 0, [](double x, double) { return std::tanh(x); }, -6, 6},
    {UnaryOp::tanh, 0, [](double x, double) { return std::tanh(x); }, -0.5, 0.5},
    {UnaryOp::sigmoid, 0, [](double x, double) { return 1 / (1 + std::exp(-x)); }, -30, 30},
    {UnaryOp::relu, 0, [](double x, double) { return x > 0 ? x : 0.0; }, -3, 3},
    {UnaryOp::gelu, 0, [](double x, double) { return gelu_ref(x); }, -8, 8},
    {UnaryOp::gelu_erf, 0, [](double x, double) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }, -8, 8},
    {UnaryOp::silu, 0, [](double x, double) { return x / (1 + std::exp(-x)); }, -20, 20},
    {UnaryOp::abs, 0, [](double x, double) { return std::abs(x); }, -3, 3},
    {UnaryOp::pow_scalar, 2.5, [](double x, double s) { return std::pow(x, s); }, 0, 4},
    {UnaryOp::pow_scalar, 2, [](double x, double s) { return x * x; }, -4, 4},
    {UnaryOp::pow_scalar, 0.5, [](double x, double s) { return std::sqrt(x); }, 0, 4},
    {UnaryOp::add_scalar, 1.5, [](double x, double s) { return x + s; }, -3, 3},
    {UnaryOp::mul_scalar, -2, [](double x, double s) { return x * s; }, -3, 3},
    {UnaryOp::rsub_scalar, 1, [](double x, double s) { return s - x; }, -3, 3},
    {UnaryOp::rdiv_scalar, 3, [](double x, double s) { return s / x; }, 0.1, 3},
    {UnaryOp::sign, 0, [](double x, double) { return double((x > 0) - (x < 0)); }, -3, 3},
    {UnaryOp::square, 0, [](double x, double) { return x * x; }, -3, 3},
};

TEST(OpsUnary, MatchesNaiveLoopForEveryLayoutAndDtype) {
  for (const auto& c : kUnaryCases) {
    for (DType dt : {DType::f32, DType::f64}) {
      for (Kind kind : testing::kAllKinds) {
        Tensor x = make_input({5, 37}, dt, 7, kind, c.lo, c.hi);
        Tensor y = ops::unary(c.op, x, c.scalar);
        ASSERT_EQ(y.shape(), x.shape());
        ASSERT_EQ(y.dtype(), dt);
        ASSERT_TRUE(y.is_contiguous());
        double tol = dt == DType::f32 ? 4e-6 : 1e-12;
        expect_all_close(y, [&](int64_t i) { return c.ref(read_element(x, i), c.scalar); }, tol,
                         std::string(unary_op_name(c.op)) + " " + std::string(dtype_name(dt)) + " " +
                             testing::kind_name(kind));
      }
    }
  }
}

TEST(OpsUnary, LargeTensorTakesTheParallelPath) {
  Tensor x = make_input({300, 1000}, DType::f32, 3, Kind::transposed, -5, 5);
  Tensor y = ops::gelu(x);
  expect_all_close(y, [&](int64_t i) { return gelu_ref(read_element(x, i)); }, 4e-6, "gelu");
}

TEST(OpsUnary, SpecialValues) {
  const float inf = INFINITY;
  Tensor x = Tensor::from_vector<float>({-inf, inf, NAN, 0.0f, -0.0f, 1e-30f, -100.0f, 88.8f, -104.5f});
  auto e = ops::exp(x).to_vector<float>();
  EXPECT_EQ(e[0], 0.0f);
  EXPECT_EQ(e[1], INFINITY);
  EXPECT_TRUE(std::isnan(e[2]));
  EXPECT_EQ(e[3], 1.0f);
  EXPECT_FLOAT_EQ(e[6], std::exp(-100.0f));  // subnormal result
  EXPECT_EQ(e[7], INFINITY);                  // beyond float's range
  EXPECT_EQ(e[8], 0.0f);
  auto t = ops::tanh(x).to_vector<float>();
  EXPECT_EQ(t[0], -1.0f);
  EXPECT_EQ(t[1], 1.0f);
  EXPECT_TRUE(std::isnan(t[2]));
  EXPECT_EQ(t[5], 1e-30f);
  auto s = ops::sigmoid(x).to_vector<float>();
  EXPECT_EQ(s[0], 0.0f);
  EXPECT_EQ(s[1], 1.0f);
  auto r = ops::relu(x).to_vector<float>();
  EXPECT_TRUE(std::isnan(r[2]));  // NaN propagates like PyTorch
}

TEST(OpsUnary, IntegerTensorsGetIndexArithmetic) {
  Tensor x = Tensor::from_vector<int64_t>({-3, 0, 5});
  EXPECT_EQ(ops::add(x, 2).to_vector<int64_t>(), (std::vector<int64_t>{-1, 2, 7}));
  EXPECT_EQ(ops::mul(x, -2).to_vector<int64_t>(), (std::vector<int64_t>{6, 0, -10}));
  EXPECT_EQ(ops::neg(x).to_vector<int64_t>(), (std::vector<int64_t>{3, 0, -5}));
  EXPECT_EQ(ops::abs(x).dtype(), DType::i64);
  expect_throw_with([&] { ops::exp(x); }, "exp: expected a floating-point tensor, found int64");
  expect_throw_with([&] { ops::add(x, 0.5); }, "add: scalar");
  expect_throw_with([&] { ops::neg(Tensor::from_vector<bool>({true})); }, "neg: not defined for dtype bool");
  expect_throw_with([&] { ops::exp(Tensor()); }, "exp: input is undefined");
}

TEST(OpsUnary, Bfloat16IsWidenedAndCastBack) {
  Tensor x = ops::to(make_input({4, 9}, DType::f32, 5), DType::bf16);
  Tensor y = ops::gelu(x);
  EXPECT_EQ(y.dtype(), DType::bf16);
  expect_all_close(y, [&](int64_t i) { return gelu_ref(read_element(x, i)); }, 8e-3, "gelu bf16");
}

struct BinaryCase {
  BinaryOp op;
  double (*ref)(double, double);
};

const BinaryCase kBinaryCases[] = {
    {BinaryOp::add, [](double a, double b) { return a + b; }},
    {BinaryOp::sub, [](double a, double b) { return a - b; }},
    {BinaryOp::mul, [](double a, double b) { return a * b; }},
    {BinaryOp::div, [](double a, double b) { return a / b; }},
    {BinaryOp::maximum, [](double a, double b) { return std::max(a, b); }},
    {BinaryOp::minimum, [](double a, double b) { return std::min(a, b); }},
    {BinaryOp::eq, [](double a, double b) { return double(a == b); }},
    {BinaryOp::ne, [](double a, double b) { return double(a != b); }},
    {BinaryOp::lt, [](double a, double b) { return double(a < b); }},
    {BinaryOp::le, [](double a, double b) { return double(a <= b); }},
    {BinaryOp::gt, [](double a, double b) { return double(a > b); }},
    {BinaryOp::ge, [](double a, double b) { return double(a >= b); }},
};

struct ShapePair {
  Shape a, b;
};

const ShapePair kShapePairs[] = {
    {{6, 7}, {6, 7}},    {{6, 7}, {7}},       {{6, 1}, {1, 7}},    {{3, 4, 5}, {4, 1}}, {{2, 3}, {}},
    {{}, {4, 5}},        {{0, 5}, {5}},       {{4, 0}, {1, 0}},    {{1, 9}, {9, 1}},    {{2, 3, 4, 5}, {2, 1, 4, 5}},
};

TEST(OpsBinary, BroadcastsLikeNumPyForEveryLayoutAndDtype) {
  for (const auto& c : kBinaryCases) {
    for (DType dt : {DType::f32, DType::f64, DType::i32, DType::i64}) {
      if (c.op == BinaryOp::div && is_integral(dt)) continue;
      for (const auto& sp : kShapePairs) {
        for (Kind ka : testing::kAllKinds) {
          Kind kb = ka == Kind::transposed ? Kind::sliced : Kind::transposed;
          // Small integer-valued inputs make the comparisons hit equality often.
          Tensor a = make_input(sp.a, dt, 1, ka, -3, 3);
          Tensor b = make_input(sp.b, dt, 2, kb, -3, 3);
          if (c.op == BinaryOp::div) b = ops::add(ops::abs(b), 0.5);
          Tensor y = ops::binary(c.op, a, b);
          Shape shape = broadcast_shapes(sp.a, sp.b, "test");
          ASSERT_EQ(y.shape(), shape);
          ASSERT_EQ(y.dtype(), is_comparison(c.op) ? DType::boolean : dt);
          expect_all_close(
              y,
              [&](int64_t i) {
                return c.ref(read_element(a, testing::broadcast_index(shape, a.shape(), i) ),
                             read_element(b, testing::broadcast_index(shape, b.shape(), i)));
              },
              dt == DType::f32 ? 1e-6 : 0, std::string(binary_op_name(c.op)) + " " + to_string(sp.a) + " " +
                                                 to_string(sp.b) + " " + testing::kind_name(ka));
        }
      }
    }
  }
}

TEST(OpsBinary, LargeBroadcastRowAndColumn) {
  Tensor a = make_input({512, 384}, DType::f32, 1);
  Tensor row = make_input({384}, DType::f32, 2);
  Tensor col = make_input({512, 1}, DType::f32, 3);
  Tensor y = ops::add(ops::mul(a, row), col);
  expect_all_close(y, [&](int64_t i) {
    return read_element(a, i) * read_element(row, i % 384) + read_element(col, i / 384);
  }, 1e-6, "a * row + col");
}

TEST(OpsBinary, NaNPropagatesThroughMaximum) {
  Tensor a = Tensor::from_vector<float>({NAN, 1, 2});
  Tensor b = Tensor::from_vector<float>({0, NAN, 1});
  auto m = ops::maximum(a, b).to_vector<float>();
  EXPECT_TRUE(std::isnan(m[0]));
  EXPECT_TRUE(std::isnan(m[1]));
  EXPECT_EQ(m[2], 2);
}

TEST(OpsBinary, Bfloat16) {
  Tensor a = ops::to(make_input({3, 5}, DType::f32, 1), DType::bf16);
  Tensor b = ops::to(make_input({5}, DType::f32, 2), DType::bf16);
  Tensor y = ops::mul(a, b);
  EXPECT_EQ(y.dtype(), DType::bf16);
  expect_all_close(y, [&](int64_t i) { return read_element(a, i) * read_element(b, i % 5); }, 8e-3, "bf16 mul");
  EXPECT_EQ(ops::lt(a, b).dtype(), DType::boolean);
}

TEST(OpsBinary, ErrorsNameTheOp) {
  Tensor f = ops::zeros({2, 3});
  expect_throw_with([&] { ops::add(f, ops::zeros({2, 3}, DType::f64)); }, "add: dtype float32 vs float64");
  expect_throw_with([&] { ops::mul(f, ops::zeros({4})); }, "mul: shapes [2, 3] and [4] do not broadcast");
  expect_throw_with([&] { ops::div(ops::zeros({2}, DType::i64), ops::ones({2}, DType::i64)); }, "div: not defined for dtype int64");
  expect_throw_with([&] { ops::add(ops::zeros({2}, DType::boolean), ops::zeros({2}, DType::boolean)); }, "add: not defined for dtype bool");
  expect_throw_with([&] { ops::sub(f, Tensor()); }, "sub: input is undefined");
}

TEST(OpsWhere, SelectsWithBroadcast) {
  Tensor cond = make_input({4, 1}, DType::boolean, 3);
  Tensor a = make_input({4, 6}, DType::f32, 1, Kind::transposed);
  Tensor b = make_input({6}, DType::f32, 2);
  Tensor y = ops::where(cond, a, b);
  ASSERT_EQ(y.shape(), (Shape{4, 6}));
  expect_all_close(y, [&](int64_t i) {
    return read_element(cond, i / 6) != 0 ? read_element(a, i) : read_element(b, i % 6);
  }, 0, "where");
  Tensor ints = ops::where(cond, ops::ones({4, 6}, DType::i64), ops::zeros({}, DType::i64));
  EXPECT_EQ(ints.dtype(), DType::i64);
  expect_throw_with([&] { ops::where(a, a, b); }, "where: cond must be bool, found float32");
  expect_throw_with([&] { ops::where(cond, a, ops::zeros({6}, DType::f64)); }, "where: dtype float32 vs float64");
}

TEST(OpsWhere, MaskedFill) {
  Tensor x = make_input({3, 4}, DType::f32, 1);
  Tensor mask = ops::gt(x, ops::zeros({}));
  Tensor y = ops::masked_fill(x, mask, -INFINITY);
  expect_all_close(y, [&](int64_t i) { return read_element(x, i) > 0 ? -INFINITY : read_element(x, i); }, 0,
                   "masked_fill");
  expect_throw_with([&] { ops::masked_fill(x, ops::zeros({2, 3, 4}, DType::boolean), 0); },
                    "masked_fill: mask of shape [2, 3, 4] does not broadcast");
}

}  // namespace
}  // namespace mvgpt
