// The performance paths: fused GELU/SiLU backward against the composed formula and naive double
// loops; GEMV (one-row/one-column products) and GEMMs split over the thread pool against a naive
// double loop, for every operand layout, and independent of the thread count.
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <mvgpt/backends/cpu/blas.h>
#include <mvgpt/backends/ops.h>
#include "ops_test_util.h"
#include "unary_reference.h"

namespace mvgpt {
namespace {

using testing::expect_all_close;
using testing::expect_throw_with;
using testing::Kind;
using testing::make_input;

// f'(x) of a unary op from its independent reference (unary_reference.h).
double derivative(UnaryOp op, double x) { return testing::unary_reference(op).df(x, 0); }

// The composed backward the fused op replaces (autograd's formula before fusion), in float64 ops.
Tensor gelu_grad_composed(const Tensor& x, const Tensor& g) {
  const double a = 0.044715, c = std::sqrt(2.0 / M_PI);
  Tensor x2 = ops::square(x);
  Tensor t = ops::tanh(ops::mul(ops::mul(x, ops::add(ops::mul(x2, a), 1.0)), c));
  Tensor du = ops::add(ops::mul(x2, 3 * a * c), c);
  Tensor one_minus_t2 = ops::unary(UnaryOp::rsub_scalar, ops::square(t), 1.0);
  Tensor d = ops::add(ops::mul(ops::add(t, 1.0), 0.5), ops::mul(ops::mul(ops::mul(x, one_minus_t2), du), 0.5));
  return ops::mul(g, d);
}

TEST(FusedActivationBackward, MatchesNaiveLoopForEveryLayoutAndDtype) {
  struct Case {
    UnaryOp op;
    double lo, hi;
  };
  const Case cases[] = {{UnaryOp::gelu, -8, 8},
                        {UnaryOp::gelu, -0.5, 0.5},  // the tanh series branch
                        {UnaryOp::silu, -20, 20},
                        {UnaryOp::gelu_erf, -8, 8}};
  for (const auto& c : cases) {
    for (DType dt : {DType::f32, DType::f64}) {
      for (Kind kx : testing::kAllKinds) {
        for (Kind kg : {Kind::contiguous, Kind::transposed}) {
          // 37 columns: whole 8-wide vectors and a partial one in each row.
          Tensor x = make_input({5, 37}, dt, 11, kx, c.lo, c.hi), g = make_input({5, 37}, dt, 12, kg);
          Tensor d = ops::unary_backward(c.op, x, g);
          ASSERT_EQ(d.shape(), x.shape());
          ASSERT_EQ(d.dtype(), dt);
          expect_all_close(d, [&](int64_t i) { return read_element(g, i) * derivative(c.op, read_element(x, i)); },
                           dt == DType::f32 ? 4e-6 : 1e-12,
                           std::string(unary_op_name(c.op)) + "_backward " + testing::kind_name(kx) + "/" +
                               testing::kind_name(kg));
        }
      }
    }
  }
}

TEST(FusedActivationBackward, AgreesWithTheComposedFormula) {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = make_input({4, 3, 29}, dt, 21, Kind::contiguous, -6, 6), g = make_input({4, 3, 29}, dt, 22);
    Tensor fused = ops::unary_backward(UnaryOp::gelu, x, g);
    Tensor composed = gelu_grad_composed(ops::to(x, DType::f64), ops::to(g, DType::f64));
    expect_all_close(fused, [&](int64_t i) { return read_element(composed, i); }, dt == DType::f32 ? 4e-6 : 1e-12,
                     "gelu_backward vs composed");
  }
}

TEST(FusedActivationBackward, BroadcastEmptyBfloat16AndErrors) {
  // The gradient broadcast along the rows (stride 0).
  Tensor x = make_input({6, 19}, DType::f32, 31), g = make_input({19}, DType::f32, 32);
  Tensor d = ops::unary_backward(UnaryOp::silu, x, g);
  ASSERT_EQ(d.shape(), (Shape{6, 19}));
  expect_all_close(d, [&](int64_t i) { return read_element(g, i % 19) * derivative(UnaryOp::silu, read_element(x, i)); }, 4e-6,
                   "broadcast gradient");
  EXPECT_EQ(ops::unary_backward(UnaryOp::gelu, ops::zeros({0, 5}), ops::zeros({0, 5})).shape(), (Shape{0, 5}));
  Tensor xb = ops::to(x, DType::bf16), gb = ops::to(make_input({6, 19}, DType::f32, 33), DType::bf16);
  Tensor db = ops::unary_backward(UnaryOp::gelu, xb, gb);
  EXPECT_EQ(db.dtype(), DType::bf16);
  expect_all_close(db, [&](int64_t i) { return read_element(gb, i) * derivative(UnaryOp::gelu, read_element(xb, i)); }, 1e-2,
                   "bfloat16");
  expect_throw_with([] { ops::unary_backward(UnaryOp::gelu, ops::zeros({2}, DType::i64), ops::zeros({2}, DType::i64)); },
                    "gelu_backward: not defined for dtype int64");
  expect_throw_with([] { ops::unary_backward(UnaryOp::silu, ops::zeros({2, 3}), ops::zeros({4})); }, "silu_backward");
  expect_throw_with([] { ops::unary_backward(UnaryOp::gelu, ops::zeros({2}), ops::zeros({2}, DType::f64)); },
                    "gelu_backward: dtype float32 vs float64");
}

// out = a @ b against a naive double loop (2-d operands).
void expect_product(const Tensor& a, const Tensor& b, const std::string& what) {
  Tensor y = ops::matmul(a, b);
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  ASSERT_EQ(y.shape(), (Shape{M, N})) << what;
  // float32's rounding grows with the length of the sum (K), as does its size.
  const double tol = a.dtype() == DType::f32 ? 2e-5 * std::max(1.0, double(K) / 256) : 1e-12;
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  expect_all_close(y, [&](int64_t idx) {
    const int64_t i = idx / N, j = idx % N;
    double acc = 0;
    for (int64_t k = 0; k < K; ++k) acc += av[size_t(i * K + k)] * bv[size_t(k * N + j)];
    return acc;
  }, tol, what);
}

TEST(BlasPaths, GemvForOneRowOrOneColumnInEveryLayout) {
  // N * K = 77,000 elements: large enough that the GEMV is split across tasks.
  const int64_t K = 250, N = 308;
  for (DType dt : {DType::f32, DType::f64}) {
    for (Kind ka : {Kind::contiguous, Kind::transposed, Kind::sliced}) {
      for (Kind kb : {Kind::contiguous, Kind::transposed, Kind::sliced}) {
        const std::string tag = std::string(dtype_name(dt)) + " " + testing::kind_name(ka) + "/" + testing::kind_name(kb);
        // One row: x (1, K) @ W^T, the decode step.
        expect_product(make_input({1, K}, dt, 1, ka), make_input({K, N}, dt, 2, kb), "row " + tag);
        // One column: W (N, K) @ x (K, 1).
        expect_product(make_input({N, K}, dt, 3, ka), make_input({K, 1}, dt, 4, kb), "column " + tag);
      }
    }
  }
  // A row taken out of a batch (stride K between rows, one row): a sliced 3-d view.
  Tensor x = make_input({3, 1, K}, DType::f32, 5);
  Tensor w = ops::transpose(make_input({N, K}, DType::f32, 6), 0, 1);
  expect_product(ops::select(x, 0, 2), w, "selected row");
  // Overwrites the output even where the fresh memory held NaN (beta = 0).
  Tensor y = ops::matmul(ops::zeros({1, K}), w);
  for (float v : y.to_vector<float>()) ASSERT_EQ(v, 0.0f);
}

// The float32 GEMV over rows (NOTE [ float32 GEMV over rows ] in blas.cpp), called as blas::gemm
// is for x (1, K) W^T: every branch of the sum (64-wide steps, 16-wide chunks, a tail), alpha and
// beta, against a double loop; cut over the pool or not, and a row alone or among others, bit for
// bit; a NaN or an infinity in a row reaches that row's output only.
TEST(BlasPaths, Float32GemvOverRows) {
  std::mt19937 rng(13);
  std::normal_distribution<float> normal;
  for (int64_t K : {7, 23, 64, 119, 250, 384, 1536}) {
    const int64_t N = 300;
    SCOPED_TRACE("K " + std::to_string(K));
    std::vector<float> x(static_cast<size_t>(K)), W(static_cast<size_t>(N * K)), c0(static_cast<size_t>(N));
    for (auto* v : {&x, &W, &c0})
      for (auto &e : *v) e = normal(rng);
    for (float beta : {0.0f, 0.5f}) {
      const float alpha = beta == 0.0f ? 1.0f : -1.5f;
      std::vector<float> parallel = c0, serial = c0, alone = c0;
      cpu::blas::gemm(false, true, 1, N, K, alpha, x.data(), K, W.data(), K, beta, parallel.data(), N);
      cpu::blas::gemm(false, true, 1, N, K, alpha, x.data(), K, W.data(), K, beta, serial.data(), N, false);
      for (int64_t j = 0; j < N; ++j)
        cpu::blas::gemm(false, true, 1, 1, K, alpha, x.data(), K, W.data() + j * K, K, beta, alone.data() + j, 1, false);
      for (int64_t j = 0; j < N; ++j) {
        double want = 0, size = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = double(x[size_t(k)]) * double(W[size_t(j * K + k)]);
          want += p, size += std::abs(p);
        }
        want = alpha * want + (beta == 0.0f ? 0.0 : beta * double(c0[size_t(j)]));
        ASSERT_NEAR(parallel[size_t(j)], want, 1e-6 * (std::abs(alpha) * size + 1)) << "row " << j;
        ASSERT_EQ(parallel[size_t(j)], serial[size_t(j)]) << "cut over the pool, row " << j;
        ASSERT_EQ(parallel[size_t(j)], alone[size_t(j)]) << "alone, row " << j;
      }
    }
    {  // alpha = 0: beta y, X unread (BLAS's rule), even where X holds an infinity
      std::vector<float> W_inf = W, y = c0;
      W_inf[0] = INFINITY;
      cpu::blas::gemm(false, true, 1, N, K, 0.0f, x.data(), K, W_inf.data(), K, 0.5f, y.data(), N, false);
      for (int64_t j = 0; j < N; ++j) ASSERT_EQ(y[size_t(j)], 0.5f * c0[size_t(j)]) << "alpha 0, row " << j;
    }
    W[size_t(5 * K + K - 1)] = NAN;  // the last element: the tail, or the last chunk
    W[size_t(9 * K)] = INFINITY;
    std::vector<float> y(static_cast<size_t>(N));
    cpu::blas::gemm(false, true, 1, N, K, 1.0f, x.data(), K, W.data(), K, 0.0f, y.data(), N);
    for (int64_t j = 0; j < N; ++j) {
      if (j == 5) ASSERT_TRUE(std::isnan(y[size_t(j)]));
      else if (j == 9) ASSERT_TRUE(std::isinf(y[size_t(j)]));
      else ASSERT_TRUE(std::isfinite(y[size_t(j)])) << j;
    }
  }
}

TEST(BlasPaths, SplitGemmsMatchAndDoNotDependOnThreads) {
  struct Case {
    int64_t M, K, N;
  };
  // Split along M (M >= N) and along N, with edges off the block alignment; and a sum as long as
  // the MLP's (K 1,536), longer than a GEMM's blocks of K, cut along M.
  const Case cases[] = {{203, 100, 150}, {70, 128, 301}, {2, 256, 5000}, {1000, 1536, 96}};
  for (const auto& c : cases) {
    for (Kind ka : {Kind::contiguous, Kind::transposed}) {
      for (Kind kb : {Kind::contiguous, Kind::transposed}) {
        Tensor a = make_input({c.M, c.K}, DType::f32, 7, ka), b = make_input({c.K, c.N}, DType::f32, 8, kb);
        const std::string tag = std::to_string(c.M) + "x" + std::to_string(c.K) + "x" + std::to_string(c.N) + " " +
                                testing::kind_name(ka) + "/" + testing::kind_name(kb);
        expect_product(a, b, tag);
        std::vector<std::vector<float>> runs;
        for (int threads : {1, 2}) {
          tbb::global_control limit(tbb::global_control::max_allowed_parallelism, size_t(threads));
          runs.push_back(ops::matmul(a, b).to_vector<float>());
        }
        EXPECT_EQ(runs[0], runs[1]) << tag;
      }
    }
  }
}

TEST(ColumnSums, RowBlocksMatchDoubleLoopsAndDoNotDependOnThreads) {
  // Row counts around the 64-row block (and 4096, enough blocks for two threads to share), in rows
  // with and without gaps (a sliced view), and a broadcast (stride-0) row.
  for (int64_t R : {1, 63, 64, 65, 300, 4096}) {
    for (Kind kind : {Kind::contiguous, Kind::sliced, Kind::expanded}) {
      for (DType dt : {DType::f32, DType::f64}) {
        Tensor x = make_input({R, 37}, dt, 41, kind);
        const std::vector<double> xv = x.to_vector<double>();
        std::vector<std::vector<double>> runs;
        for (int threads : {1, 2}) {
          tbb::global_control limit(tbb::global_control::max_allowed_parallelism, size_t(threads));
          Tensor s = ops::sum(x, {0});
          ASSERT_EQ(s.shape(), (Shape{37}));
          runs.push_back(s.to_vector<double>());
        }
        EXPECT_EQ(runs[0], runs[1]);
        // Groups of 8 rows are added in the input's type first: each element goes through at most
        // 7 such additions, so the error is within 7 units of roundoff of the sum of magnitudes
        // (and one more rounding of the result); the double additions, the reference's and (for
        // float64 input) the kernel's, err by up to R units of double roundoff.
        const double u = dt == DType::f32 ? 0x1p-24 : 0x1p-53;
        const std::vector<double> got = runs[0];
        for (int64_t j = 0; j < 37; ++j) {
          double acc = 0, magnitude = 0;
          for (int64_t r = 0; r < R; ++r) {
            acc += xv[size_t(r * 37 + j)];
            magnitude += std::abs(xv[size_t(r * 37 + j)]);
          }
          EXPECT_LE(std::abs(got[size_t(j)] - acc), 7 * u * magnitude + u * std::abs(acc) + double(R) * 0x1p-53 * magnitude)
              << R << " rows, " << testing::kind_name(kind) << ", column " << j;
        }
      }
    }
  }
  // Many rows of float: the groups' sums accumulate in double, so the error does not grow with the
  // row count (here 10000.001, one float ulp over).
  Tensor ones = ops::full({100000, 3}, 0.1);
  for (float v : ops::sum(ones, {0}).to_vector<float>()) EXPECT_FLOAT_EQ(v, 10000.0f);
}

// linear against a naive double loop: y[n, o] = sum_i x[n, i] w[o, i] + b[o].
void expect_linear(const Tensor& x, const Tensor& w, const Tensor& b, double tol, const std::string& what) {
  Tensor y = ops::linear(x, w, b);
  const int64_t O = w.size(0), I = w.size(1);
  Shape want = x.shape();
  want[want.size() - 1] = O;
  ASSERT_EQ(y.shape(), want) << what;
  ASSERT_EQ(y.dtype(), x.dtype()) << what;
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>(size_t(O), 0.0);
  expect_all_close(y, [&](int64_t idx) {
    const int64_t n = idx / O, o = idx % O;
    double acc = bv[size_t(o)];
    for (int64_t i = 0; i < I; ++i) acc += xv[size_t(n * I + i)] * wv[size_t(o * I + i)];
    return acc;
  }, tol, what);
}

TEST(Linear, MatchesNaiveLoopForEveryLayout) {
  for (DType dt : {DType::f32, DType::f64}) {
    const double tol = dt == DType::f32 ? 2e-5 : 1e-12;
    for (Kind kx : testing::kAllKinds) {
      for (Kind kw : {Kind::contiguous, Kind::transposed, Kind::sliced}) {
        for (bool with_bias : {true, false}) {
          const std::string tag = std::string(dtype_name(dt)) + " x " + testing::kind_name(kx) + ", w " +
                                  testing::kind_name(kw) + (with_bias ? ", bias" : ", no bias");
          Tensor w = make_input({9, 13}, dt, 2, kw);
          Tensor b = with_bias ? make_input({9}, dt, 3, Kind::sliced) : Tensor();
          expect_linear(make_input({6, 13}, dt, 1, kx), w, b, tol, "rows " + tag);
          expect_linear(make_input({1, 13}, dt, 4, kx), w, b, tol, "one row " + tag);
        }
      }
    }
  }
  // Decode-sized one-row products (the GEMV path, split across tasks) and a batched 3-d input.
  Tensor w = make_input({300, 256}, DType::f32, 5), b = make_input({300}, DType::f32, 6);
  expect_linear(make_input({1, 1, 256}, DType::f32, 7), w, b, 2e-5, "(1, 1, 256) decode step");
  expect_linear(make_input({2, 3, 256}, DType::f32, 8, Kind::transposed), w, b, 2e-5, "(2, 3, 256)");
  expect_linear(make_input({256}, DType::f32, 9), w, Tensor(), 2e-5, "1-d input");
}

TEST(Linear, EmptyBfloat16AndErrors) {
  // No rows, no input features (the output is the bias), no output features.
  EXPECT_EQ(ops::linear(ops::zeros({0, 4}), ops::ones({3, 4}), ops::ones({3})).shape(), (Shape{0, 3}));
  Tensor y = ops::linear(ops::zeros({2, 0}), ops::zeros({3, 0}), Tensor::from_vector<float>({1, 2, 3}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(ops::linear(ops::zeros({2, 0}), ops::zeros({3, 0}), Tensor()).to_vector<float>(),
            (std::vector<float>(6, 0.0f)));
  EXPECT_EQ(ops::linear(ops::zeros({2, 4}), ops::zeros({0, 4}), Tensor()).shape(), (Shape{2, 0}));
  Tensor xb = ops::to(make_input({3, 5}, DType::f32, 1), DType::bf16);
  Tensor wb = ops::to(make_input({2, 5}, DType::f32, 2), DType::bf16);
  Tensor bb = ops::to(make_input({2}, DType::f32, 3), DType::bf16);
  expect_linear(xb, wb, bb, 2e-2, "bfloat16");
  expect_throw_with([] { ops::linear(ops::zeros({2, 3}), ops::zeros({4, 5}), Tensor()); },
                    "linear: expected input (..., 5) for weight [4, 5], found [2, 3]");
  expect_throw_with([] { ops::linear(ops::zeros({2, 3}), ops::zeros({3}), Tensor()); },
                    "linear: expected weight (out, in), found shape [3]");
  expect_throw_with([] { ops::linear(ops::zeros({2, 3}), ops::zeros({4, 3}), ops::zeros({3})); },
                    "linear: expected bias (4), found shape [3]");
  expect_throw_with([] { ops::linear(ops::zeros({2, 3}), ops::zeros({4, 3}, DType::f64), Tensor()); },
                    "linear: dtype float32 vs float64");
  expect_throw_with([] { ops::linear(ops::zeros({2, 3}), ops::zeros({4, 3}), ops::zeros({4}, DType::f64)); },
                    "linear: dtype float32 vs float64");
  expect_throw_with([] { ops::linear(ops::zeros({2, 3}, DType::i64), ops::zeros({4, 3}, DType::i64), Tensor()); },
                    "linear: expected a floating-point tensor, found int64");
}

}  // namespace
}  // namespace mvgpt
