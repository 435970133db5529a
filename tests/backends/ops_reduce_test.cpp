// Reductions, softmax and sum_to against naive double loops; determinism across thread counts.
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include <mvgpt/backends/ops.h>
#include "backends/device_compare.h"  // bitwise_equal
#include "ops_test_util.h"

namespace mvgpt {
namespace {

using testing::expect_all_close;
using testing::expect_throw_with;
using testing::Kind;
using testing::make_input;

// For each output element (row-major over the kept dims), the row-major input indices it reduces.
std::vector<std::vector<int64_t>> groups(const Shape& shape, const std::vector<int>& axes) {
  std::vector<bool> red(size_t(shape.size()), axes.empty());
  for (int a : axes) red[size_t(a < 0 ? a + shape.size() : a)] = true;
  int64_t nout = 1;
  for (int d = 0; d < shape.size(); ++d)
    if (!red[size_t(d)]) nout *= shape[d];
  std::vector<std::vector<int64_t>> g(static_cast<size_t>(nout));
  for (int64_t i = 0; i < numel(shape); ++i) {
    int64_t rest = i, o = 0, mul = 1;
    for (int d = shape.size() - 1; d >= 0; --d) {
      int64_t c = rest % shape[d];
      rest /= shape[d];
      if (!red[size_t(d)]) o += c * mul, mul *= shape[d];
    }
    g[size_t(o)].push_back(i);
  }
  return g;
}

struct AxesCase {
  Shape shape;
  std::vector<int> axes;
};

const AxesCase kAxesCases[] = {
    {{3, 4, 5}, {}},      {{3, 4, 5}, {0}},    {{3, 4, 5}, {1}},     {{3, 4, 5}, {2}},      {{3, 4, 5}, {0, 2}},
    {{3, 4, 5}, {-1, 1}}, {{3, 4, 5}, {0, 1}}, {{2, 3, 4, 5}, {1, 3}}, {{7}, {0}},          {{6, 1, 5}, {1}},
    {{0, 4}, {0}},        {{4, 0}, {0}},
};

TEST(OpsReduce, SumMeanMaxMinMatchNaiveOverAxesLayoutsAndDtypes) {
  for (const auto& c : kAxesCases) {
    auto g = groups(c.shape, c.axes);
    for (DType dt : {DType::f32, DType::f64}) {
      for (Kind kind : testing::kAllKinds) {
        Tensor x = make_input(c.shape, dt, 11, kind);
        std::string what = to_string(c.shape) + " axes " + std::to_string(c.axes.size()) + " " + testing::kind_name(kind);
        for (bool keepdim : {false, true}) {
          Tensor s = ops::sum(x, c.axes, keepdim), m = ops::mean(x, c.axes, keepdim);
          ASSERT_EQ(s.numel(), int64_t(g.size())) << what;
          ASSERT_TRUE(s.is_contiguous());
          if (keepdim) {
            ASSERT_EQ(s.dim(), x.dim());
          }
          auto total = [&](int64_t o) {
            double acc = 0;
            for (int64_t i : g[size_t(o)]) acc += read_element(x, i);
            return acc;
          };
          expect_all_close(s, total, testing::tol_for(dt), "sum " + what);
          expect_all_close(m, [&](int64_t o) { return total(o) / double(g[size_t(o)].size()); }, testing::tol_for(dt),
                           "mean " + what);
          if (x.numel() == 0 && !g.empty()) {
            expect_throw_with([&] { ops::max(x, c.axes, keepdim); }, "max: cannot reduce over zero elements");
            continue;
          }
          expect_all_close(ops::max(x, c.axes, keepdim), [&](int64_t o) {
            double r = -INFINITY;
            for (int64_t i : g[size_t(o)]) r = std::max(r, read_element(x, i));
            return r;
          }, 0, "max " + what);
          expect_all_close(ops::min(x, c.axes, keepdim), [&](int64_t o) {
            double r = INFINITY;
            for (int64_t i : g[size_t(o)]) r = std::min(r, read_element(x, i));
            return r;
          }, 0, "min " + what);
          expect_all_close(ops::logsumexp(x, c.axes, keepdim), [&](int64_t o) {
            double acc = 0;
            for (int64_t i : g[size_t(o)]) acc += std::exp(read_element(x, i));
            return std::log(acc);
          }, 4 * testing::tol_for(dt), "logsumexp " + what);
        }
      }
    }
  }
}

TEST(OpsReduce, LargeRowColumnAndPackedLayouts) {
  // Rows (last axis), columns (first axis, the bias-gradient shape) and a layout that needs packing.
  Tensor x = make_input({301, 700}, DType::f32, 5);
  for (std::vector<int> axes : {std::vector<int>{1}, std::vector<int>{0}}) {
    auto g = groups(x.shape(), axes);
    expect_all_close(ops::sum(x, axes), [&](int64_t o) {
      double acc = 0;
      for (int64_t i : g[size_t(o)]) acc += read_element(x, i);
      return acc;
    }, 1e-5, "sum large");
  }
  Tensor y = make_input({6, 50, 40}, DType::f32, 6, Kind::transposed);  // reduce the middle axis of a transpose
  auto g = groups(y.shape(), {1});
  expect_all_close(ops::max(y, {1}), [&](int64_t o) {
    double r = -INFINITY;
    for (int64_t i : g[size_t(o)]) r = std::max(r, read_element(y, i));
    return r;
  }, 0, "max packed");
}

TEST(OpsReduce, FullSumIsAccurateAndIndependentOfThreadCount) {
  Tensor x = make_input({1 << 20}, DType::f32, 9, Kind::contiguous, 0, 1);
  double ref = 0;
  for (int64_t i = 0; i < x.numel(); ++i) ref += read_element(x, i);
  Tensor col = make_input({4096, 64}, DType::f32, 10);
  std::vector<float> sums, colsums;
  for (int threads : {1, 2}) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, size_t(threads));
    sums.push_back(ops::sum(x).item<float>());
    auto c = ops::sum(col, {0}).to_vector<float>();
    colsums.insert(colsums.end(), c.begin(), c.end());
  }
  EXPECT_NEAR(sums[0], ref, 1e-6 * ref);
  EXPECT_EQ(std::memcmp(&sums[0], &sums[1], sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(colsums.data(), colsums.data() + 64, 64 * sizeof(float)), 0);
}

TEST(OpsReduce, IntegerAndBoolSumsAreInt64) {
  Tensor x = Tensor::from_vector<int32_t>({2000000000, 2000000000, 5}, {3});
  Tensor s = ops::sum(x);
  EXPECT_EQ(s.dtype(), DType::i64);
  EXPECT_EQ(s.item<int64_t>(), 4000000005);
  EXPECT_EQ(ops::sum(Tensor::from_vector<bool>({true, false, true})).item<int64_t>(), 2);
  EXPECT_EQ(ops::max(x).item<int32_t>(), 2000000000);
  expect_throw_with([&] { ops::mean(x); }, "mean: expected a floating-point tensor, found int32");
}

TEST(OpsReduce, ArgmaxTakesTheFirstMaximum) {
  Tensor x = Tensor::from_vector<float>({1, 3, 3, 0, 5, 5, 5, 2, -1, -1, -1, -1}, {3, 4});
  EXPECT_EQ(ops::argmax(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(ops::argmax(x, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(ops::argmax(x, 0, true).shape(), (Shape{1, 4}));
  // Long rows cross reduction blocks; the first maximum still wins.
  Tensor long_row = ops::zeros({2, 20000});
  write_element(long_row, 12345, 7);
  write_element(long_row, 19999, 7);
  write_element(long_row, 20000 + 3, 7);
  EXPECT_EQ(ops::argmax(long_row, -1).to_vector<int64_t>(), (std::vector<int64_t>{12345, 3}));
  EXPECT_EQ(ops::argmax(ops::transpose(long_row, 0, 1), 0).to_vector<int64_t>(), (std::vector<int64_t>{12345, 3}));
  expect_throw_with([&] { ops::argmax(x, 2); }, "argmax: axis 2 is out of range");
}

TEST(OpsReduce, LogsumexpIsStable) {
  Tensor x = Tensor::from_vector<float>({1000, 1000, -INFINITY, -INFINITY, 0, -INFINITY}, {3, 2});
  auto l = ops::logsumexp(x, {1}).to_vector<float>();
  EXPECT_NEAR(l[0], 1000 + std::log(2.0), 1e-3);
  EXPECT_EQ(l[1], -INFINITY);
  EXPECT_EQ(l[2], 0);
  EXPECT_EQ(ops::logsumexp(ops::zeros({3, 0}), {1}).to_vector<float>()[0], -INFINITY);
}

TEST(OpsReduce, AxisErrors) {
  Tensor x = ops::zeros({2, 3});
  expect_throw_with([&] { ops::sum(x, {0, 0}); }, "sum: axis 0 appears twice");
  expect_throw_with([&] { ops::max(x, {3}); }, "max: axis 3 is out of range");
  expect_throw_with([&] { ops::sum(Tensor()); }, "sum: input is undefined");
}

TEST(OpsSoftmax, MatchesNaiveOverEveryAxisAndLayout) {
  for (DType dt : {DType::f32, DType::f64}) {
    for (Kind kind : testing::kAllKinds) {
      Tensor x = make_input({3, 5, 37}, dt, 4, kind, -10, 10);
      for (int axis : {0, 1, 2, -1}) {
        auto g = groups(x.shape(), {axis});
        // Map every input index to its group's lse.
        std::vector<double> lse_of(size_t(x.numel()));
        for (const auto& grp : g) {
          double m = -INFINITY, s = 0;
          for (int64_t i : grp) m = std::max(m, read_element(x, i));
          for (int64_t i : grp) s += std::exp(read_element(x, i) - m);
          for (int64_t i : grp) lse_of[size_t(i)] = m + std::log(s);
        }
        Tensor p = ops::softmax(x, axis), lp = ops::log_softmax(x, axis);
        ASSERT_EQ(p.shape(), x.shape());
        ASSERT_TRUE(p.is_contiguous());
        std::string what = std::string(testing::kind_name(kind)) + " axis " + std::to_string(axis);
        expect_all_close(p, [&](int64_t i) { return std::exp(read_element(x, i) - lse_of[size_t(i)]); },
                         4 * testing::tol_for(dt), "softmax " + what);
        expect_all_close(lp, [&](int64_t i) { return read_element(x, i) - lse_of[size_t(i)]; },
                         4 * testing::tol_for(dt), "log_softmax " + what);
      }
    }
  }
}

TEST(OpsSoftmax, WideRowsLargeValuesAndBf16) {
  Tensor x = make_input({3, 10000}, DType::f32, 8, Kind::contiguous, 500, 520);
  Tensor p = ops::softmax(x, -1);
  for (int r = 0; r < 3; ++r) {
    double s = 0;
    for (int64_t i = 0; i < 10000; ++i) s += read_element(p, r * 10000 + i);
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
  Tensor b = ops::to(make_input({2, 8}, DType::f32, 2), DType::bf16);
  EXPECT_EQ(ops::softmax(b).dtype(), DType::bf16);
  EXPECT_EQ(ops::softmax(ops::zeros({0, 4})).shape(), (Shape{0, 4}));
  expect_throw_with([&] { ops::softmax(ops::zeros({2}, DType::i64)); }, "softmax: expected a floating-point tensor");
}

TEST(OpsSumTo, UndoesBroadcasting) {
  Tensor g = make_input({2, 3, 4}, DType::f64, 3);
  Tensor s = ops::sum_to(g, {3, 1});
  ASSERT_EQ(s.shape(), (Shape{3, 1}));
  expect_all_close(s, [&](int64_t o) {
    double acc = 0;
    for (int64_t i = 0; i < g.numel(); ++i)
      if ((i / 4) % 3 == o) acc += read_element(g, i);
    return acc;
  }, 1e-12, "sum_to");
  EXPECT_TRUE(ops::sum_to(g, {2, 3, 4}).same(g));
  EXPECT_EQ(ops::sum_to(g, {}).shape(), Shape{});
  EXPECT_NEAR(ops::sum_to(g, {}).item<double>(), ops::sum(g).item<double>(), 1e-12);
  expect_throw_with([&] { ops::sum_to(g, {5}); }, "sum_to: shape [5] does not broadcast");
}

// A linear layer's incoming gradient in one pass (NOTE [ A gradient's operand and column sums ] in
// backends/cpu/cpu_reduce.cpp): the conversion's bits and ops::sum's, for rows in partial groups and
// blocks, columns past the last sixteen, one column (which ops::sum adds as a row), NaN, infinities,
// values that round up to infinity, subnormals and -0 in the vector columns and in the tail, on one
// thread and on every thread; a strided x; empty shapes; refusals.
TEST(OpsConvertWithColumnSums, IsTheConversionAndTheColumnSumBitForBit) {
  const float specials[] = {NAN, INFINITY, -INFINITY, 3.4e38f, 1e-40f, -0.0f};
  for (const Shape& shape : std::vector<Shape>{{1, 1}, {3, 1}, {100, 1}, {7, 3}, {8, 16}, {63, 17}, {64, 32},
                                               {65, 33}, {200, 384}, {131, 1537}, {0, 5}, {5, 0}}) {
    Tensor x = make_input(shape, DType::f32, 41, Kind::contiguous, -8, 8);
    const int64_t R = shape[0], C = shape[1];
    if (R >= 3 && C >= 3) {
      float* p = x.data<float>();
      for (int k = 0; k < 6; ++k) {
        p[(k % R) * C + k % C] = specials[k];           // the first columns
        p[((k + 1) % R) * C + C - 1 - k % C] = specials[k];  // the last ones
      }
    }
    for (int threads : {1, 0}) {  // 0: the default pool
      std::unique_ptr<tbb::global_control> limit;
      if (threads) limit = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, threads);
      auto [operand, sums] = ops::to_bf16_with_column_sums(x);
      EXPECT_TRUE(testing::bitwise_equal(operand, ops::to(x, DType::bf16))) << to_string(shape) << ", " << threads;
      EXPECT_TRUE(testing::bitwise_equal(sums, ops::sum(x, {0}))) << to_string(shape) << ", " << threads;
    }
  }
  Tensor t = ops::transpose(make_input({40, 70}, DType::f32, 42), 0, 1);  // (70, 40), strided
  auto [operand, sums] = ops::to_bf16_with_column_sums(t);
  EXPECT_TRUE(testing::bitwise_equal(operand, ops::to(t, DType::bf16)));
  EXPECT_TRUE(testing::bitwise_equal(sums, ops::sum(t, {0})));
  expect_throw_with([] { ops::to_bf16_with_column_sums(make_input({4, 5}, DType::f64, 1)); },
                    "to_bf16_with_column_sums: x must be a float32 matrix (R, C), found float64 of shape [4, 5]");
  expect_throw_with([] { ops::to_bf16_with_column_sums(make_input({2, 4, 5}, DType::f32, 1)); },
                    "to_bf16_with_column_sums: x must be a float32 matrix (R, C), found float32 of shape [2, 4, 5]");
}

}  // namespace
}  // namespace mvgpt
