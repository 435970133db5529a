// Elementwise ops against naive double loops, over contiguous, transposed, sliced, expanded and empty inputs.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <iterator>

#include <mvgpt/backends/ops.h>
#include "ops_test_util.h"
#include "unary_reference.h"

namespace mvgpt {
namespace {

using testing::expect_all_close;
using testing::expect_throw_with;
using testing::Kind;
using testing::make_input;

using testing::gelu_tanh_reference;

struct UnaryCase {
  UnaryOp op;
  double scalar;
  double (*ref)(double, double);
  double lo, hi;
};

// Every row of the table at its reference's range and scalar, and the ranges and scalars that take
// other branches (tanh's series, pow's special exponents).
std::vector<UnaryCase> unary_cases() {
  std::vector<UnaryCase> cases;
  for (const auto& r : testing::kUnaryReferences) cases.push_back({r.op, r.scalar, r.f, r.lo, r.hi});
  const auto pow_ref = testing::unary_reference(UnaryOp::pow_scalar).f;
  cases.push_back({UnaryOp::tanh, 0, testing::unary_reference(UnaryOp::tanh).f, -0.5, 0.5});
  cases.push_back({UnaryOp::pow_scalar, 2, pow_ref, -4, 4});
  cases.push_back({UnaryOp::pow_scalar, 0.5, pow_ref, 0, 4});
  cases.push_back({UnaryOp::pow_scalar, 3, pow_ref, -2, 2});
  cases.push_back({UnaryOp::pow_scalar, -1, pow_ref, 0.1, 4});
  return cases;
}

TEST(OpsUnary, MatchesNaiveLoopForEveryLayoutAndDtype) {
  for (const auto& c : unary_cases()) {
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

// The fused backward of every row, grad * f'(x), against the reference derivative.
TEST(OpsUnary, BackwardMatchesTheReferenceDerivative) {
  for (const auto& r : testing::kUnaryReferences) {
    for (DType dt : {DType::f32, DType::f64}) {
      for (Kind kind : {Kind::contiguous, Kind::transposed, Kind::sliced}) {
        // Off 0, where relu', abs' and sign' jump.
        Tensor x = make_input({5, 37}, dt, 13, kind, r.lo, r.hi);
        x = ops::where(ops::eq(x, ops::zeros({}, dt)), ops::full({}, 0.25, dt), x);
        Tensor g = make_input({5, 37}, dt, 14);
        Tensor d = ops::unary_backward(r.op, x, g, r.scalar);
        ASSERT_EQ(d.dtype(), dt);
        expect_all_close(d, [&](int64_t i) { return read_element(g, i) * r.df(read_element(x, i), r.scalar); },
                         dt == DType::f32 ? 2e-5 : 1e-11,
                         std::string(unary_op_name(r.op)) + "_backward " + std::string(dtype_name(dt)) + " " +
                             testing::kind_name(kind));
      }
    }
  }
}

// The squared ReLU, added as one row of the table: its public functions exist and compute x^2 on
// the positive side.
TEST(OpsUnary, Relu2IsTheSquaredRelu) {
  Tensor x = Tensor::from_vector<float>({-2.0f, -0.0f, 0.5f, 3.0f});
  EXPECT_EQ(ops::relu2(x).to_vector<float>(), (std::vector<float>{0.0f, 0.0f, 0.25f, 9.0f}));
  expect_throw_with([] { ops::relu2(Tensor::from_vector<int64_t>({1})); },
                    "relu2: expected a floating-point tensor, found int64");
}

TEST(OpsUnary, LargeTensorTakesTheParallelPath) {
  Tensor x = make_input({300, 1000}, DType::f32, 3, Kind::transposed, -5, 5);
  Tensor y = ops::gelu(x);
  expect_all_close(y, [&](int64_t i) { return gelu_tanh_reference(read_element(x, i)); }, 4e-6, "gelu");
}

// The vectorised float ops run sixteen lanes at a time along contiguous runs where the build
// targets AVX-512, and eight-lane code on a splat along strided ones (NOTE [ Sixteen lanes ] in
// backends/cpu/vec_math.h): every element must come out the same either way, bit for bit, forward
// and backward, specials included. Without AVX-512 both are the eight-lane code.
TEST(OpsUnary, ContiguousAndStridedRunsAgreeBitForBit) {
  const int64_t n = 16 * 9 + 8 + 5;  // sixteen-lane blocks, an eight-lane one and a tail
  Tensor wide = make_input({n, 2}, DType::f32, 21, Kind::contiguous, -12, 12);
  Tensor grad_wide = make_input({n, 2}, DType::f32, 22, Kind::contiguous, -2, 2);
  const float specials[] = {-INFINITY, INFINITY, NAN, -0.0f, 0.0f, 88.9f, -104.5f, 1e-30f, 0.39f, -0.41f};
  for (int64_t i = 0; i < int64_t(std::size(specials)); ++i)
    for (int64_t c = 0; c < 2; ++c) write_element(wide, 2 * (3 * i + 1) + c, specials[i]);
  Tensor strided = ops::select(wide, 1, 0), grad_strided = ops::select(grad_wide, 1, 0);  // stride 2
  Tensor contiguous = ops::contiguous(strided), grad = ops::contiguous(grad_strided);
  ASSERT_TRUE(contiguous.is_contiguous());
  ASSERT_FALSE(strided.is_contiguous());
  auto same_bits = [](const Tensor& a, const Tensor& b, const char* what) {
    const std::vector<float> x = ops::contiguous(a).to_vector<float>(), y = ops::contiguous(b).to_vector<float>();
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(x[i]), std::bit_cast<uint32_t>(y[i])) << what << " element " << i << ": "
                                                                              << x[i] << " vs " << y[i];
  };
  same_bits(ops::exp(contiguous), ops::exp(strided), "exp");
  same_bits(ops::tanh(contiguous), ops::tanh(strided), "tanh");
  same_bits(ops::sigmoid(contiguous), ops::sigmoid(strided), "sigmoid");
  same_bits(ops::gelu(contiguous), ops::gelu(strided), "gelu");
  same_bits(ops::silu(contiguous), ops::silu(strided), "silu");
  for (UnaryOp op : {UnaryOp::gelu, UnaryOp::silu})
    same_bits(ops::unary_backward(op, contiguous, grad), ops::unary_backward(op, strided, grad_strided),
              unary_op_name(op));
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
  expect_all_close(y, [&](int64_t i) { return gelu_tanh_reference(read_element(x, i)); }, 8e-3, "gelu bf16");
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

// ops::accumulate, the engine's sums (NOTE [ Sums gathered in place ]): written into whichever input
// is the only handle on its storage, else into a fresh tensor, and add's bits in every case.
TEST(OpsAccumulate, WritesOnlyTheSoleOwnerOfItsMemory) {
  for (DType dt : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor a0 = make_input({3, 37}, dt, 11), b0 = make_input({3, 37}, dt, 12);
    const Tensor want = ops::add(a0, b0);
    auto expect_add = [&](const Tensor& got, const char* what) {
      ASSERT_TRUE(got.shape() == want.shape() && got.dtype() == dt) << what;
      EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()), 0) << what;
    };
    auto expect_unchanged = [](const Tensor& t, const Tensor& before, const char* what) {
      EXPECT_EQ(std::memcmp(t.raw_data(), before.raw_data(), before.nbytes()), 0) << what;
    };
    {  // sum alone on its memory: written there
      Tensor sum = ops::clone(a0), g = ops::clone(b0);
      const void* at = sum.raw_data();
      const Tensor got = ops::accumulate(std::move(sum), std::move(g));
      EXPECT_EQ(got.raw_data(), at);
      expect_add(got, "into sum");
    }
    {  // sum held elsewhere, g alone: written into g, sum's holder sees nothing
      Tensor sum = ops::clone(a0), g = ops::clone(b0);
      const Tensor held = sum;
      const void* at = g.raw_data();
      const Tensor got = ops::accumulate(sum, std::move(g));
      EXPECT_EQ(got.raw_data(), at);
      expect_add(got, "into g");
      expect_unchanged(held, a0, "the held sum");
    }
    {  // both seen by others (a view of one, another handle of the other): a fresh tensor
      Tensor sum = ops::clone(a0), g = ops::clone(b0);
      const Tensor row = ops::narrow(sum, 0, 1, 1), held = g.as_strided(g.shape(), g.strides(), g.offset());
      const Tensor got = ops::accumulate(std::move(sum), std::move(g));
      EXPECT_NE(got.storage().get(), row.storage().get());
      EXPECT_NE(got.storage().get(), held.storage().get());
      expect_add(got, "fresh");
      expect_unchanged(held, b0, "the held g");
      expect_unchanged(row, ops::narrow(a0, 0, 1, 1), "the view of sum");
    }
    // Not written in place, add's values all the same: a transposed sum (its g held elsewhere), a
    // broadcast g.
    Tensor t = ops::transpose(ops::clone(ops::transpose(a0, 0, 1)), 0, 1);
    const Tensor g_held = ops::clone(b0);
    const Tensor transposed = ops::accumulate(std::move(t), g_held);
    EXPECT_NE(transposed.storage().get(), g_held.storage().get());
    expect_add(ops::contiguous(transposed), "transposed");
    expect_unchanged(g_held, b0, "the held g");
    const Tensor row_b = make_input({37}, dt, 13);
    const Tensor broadcast = ops::accumulate(ops::clone(a0), row_b);
    const Tensor broadcast_want = ops::add(a0, row_b);
    EXPECT_EQ(std::memcmp(broadcast.raw_data(), broadcast_want.raw_data(), broadcast_want.nbytes()), 0);
  }
  // bfloat16 sums widen: never in place.
  Tensor a = ops::to(make_input({3, 5}, DType::f32, 1), DType::bf16), b = ops::to(make_input({3, 5}, DType::f32, 2), DType::bf16);
  const void* at = a.raw_data();
  const Tensor want = ops::add(a, b);
  const Tensor got = ops::accumulate(std::move(a), std::move(b));
  EXPECT_NE(got.raw_data(), at);
  EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()), 0);
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
