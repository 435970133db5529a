// Cross-entropy (autograd/fused/cross_entropy.h): the CPU kernels against naive double loops, the op's
// target checks (immediate and deferred), and the kernels against the slow reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <mvgpt/autograd/engine.h>
#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/autograd/precision.h>
#include <mvgpt/backends/deferred_checks.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/fused/cross_entropy.h>
#include <mvgpt/backends/cpu/fused_common.h>

#include "backends/device_compare.h"  // bitwise_equal
#include "backends/fused_test_util.h"

namespace mvgpt {
namespace {

using namespace fused_test;
using Vec = std::vector<double>;

// The CPU kernels themselves, without the op's checks and preparation.
const fused::CrossEntropyKernels& cpu() { return cpu_kernels<fused::cross_entropy_cpu_kernels>(); }

TEST(CrossEntropyKernel, MatchesNaiveLoopsWithIgnoredRows) {
  const int64_t N = 6, V = 37, ignore = -100;
  const std::vector<int64_t> tv = {0, 36, ignore, 5, 17, ignore};
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor logits = random_tensor({N, V}, dt, 1, -5, 5);
    Tensor targets = Tensor::from_vector(tv);
    Tensor losses = Tensor::empty({N}, dt), lse = Tensor::empty({N}, dt);
    cpu().forward(logits, targets, ignore, losses, lse);
    Tensor dl = random_tensor({N}, dt, 2), dlogits = Tensor::empty({N, V}, dt);
    cpu().backward(dl, logits, targets, lse, ignore, dlogits);

    const Vec x = values(logits), g = values(dl);
    Vec want_loss(N), want_lse(N), want_d(size_t(N * V), 0.0);
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t j = 0; j < V; ++j) s += std::exp(x[n * V + j]);
      want_lse[n] = std::log(s);
      if (tv[n] == ignore) continue;
      want_loss[n] = want_lse[n] - x[n * V + tv[n]];
      for (int64_t j = 0; j < V; ++j) want_d[n * V + j] = (std::exp(x[n * V + j]) / s - (j == tv[n])) * g[n];
    }
    const double tol = dt == DType::f64 ? 1e-12 : 2e-6;
    EXPECT_TRUE(all_close(losses, want_loss, tol, tol)) << dtype_name(dt);
    EXPECT_TRUE(all_close(lse, want_lse, tol, tol)) << dtype_name(dt);
    EXPECT_TRUE(all_close(dlogits, want_d, tol, tol)) << dtype_name(dt);
  }
}

TEST(CrossEntropyKernel, Int32TargetsLargeLogitsAndCustomIgnoreIndex) {
  // Logits far from 0 must not overflow the exp (the max is subtracted first).
  Tensor logits = Tensor::from_vector(std::vector<float>{1000, 1001, 999, -1000, -1001, -999}, {2, 3});
  Tensor targets = Tensor::from_vector(std::vector<int32_t>{1, 2});
  Tensor losses = Tensor::empty({2}, DType::f32), lse = Tensor::empty({2}, DType::f32);
  cpu().forward(logits, targets, 2, losses, lse);
  const double l0 = std::log(std::exp(-1.0) + 1 + std::exp(-2.0));
  EXPECT_NEAR(losses.to_vector<double>()[0], l0, 1e-5);
  EXPECT_EQ(losses.to_vector<double>()[1], 0.0);
  EXPECT_NEAR(lse.to_vector<double>()[0], 1001 + l0, 1e-3);
}

TEST(CrossEntropyKernel, ExpApproximationIsAccurateOverItsRange) {
  // Rows with one huge spread exercise the exp from -80 to 0.
  const int64_t V = 4001;
  std::vector<double> row(V);
  for (int64_t j = 0; j < V; ++j) row[j] = -80.0 + 0.02 * j;
  Tensor logits = Tensor::from_vector(row, {1, V}), logits32 = Tensor::empty({1, V}, DType::f32);
  for (int64_t j = 0; j < V; ++j) write_element(logits32, j, row[j]);
  Tensor targets = Tensor::from_vector(std::vector<int64_t>{0});
  Tensor dl = Tensor::from_vector(std::vector<float>{1}), losses = Tensor::empty({1}, DType::f32),
         lse = Tensor::empty({1}, DType::f32), d = Tensor::empty({1, V}, DType::f32);
  cpu().forward(logits32, targets, -100, losses, lse);
  cpu().backward(dl, logits32, targets, lse, -100, d);
  double s = 0;
  for (double x : row) s += std::exp(x);
  const Vec dv = values(d), x32 = values(logits32);
  for (int64_t j = 1; j < V; ++j) {
    const double want = std::exp(x32[j]) / s;
    // The float argument x - lse carries a rounding error of |x - lse| * 6e-8.
    ASSERT_NEAR(dv[j], want, want * (3e-7 + 1.2e-7 * std::abs(x32[j] - std::log(s)))) << "logit " << x32[j];
  }
}

TEST(CrossEntropyKernel, ExpApproxHelper) {
  for (double x = -87; x <= 88; x += 0.0137) {
    const float xf = float(x);
    const double want = std::exp(double(xf));
    ASSERT_NEAR(cpu::fused::exp_approx(xf), want, 2.5e-7 * want) << xf;
  }
  EXPECT_EQ(cpu::fused::exp_approx(-INFINITY), 0.0f);
  EXPECT_EQ(cpu::fused::exp_approx(-100.0f), 0.0f);
  EXPECT_EQ(cpu::fused::exp_approx(INFINITY), INFINITY);
  EXPECT_EQ(cpu::fused::exp_approx(0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(cpu::fused::exp_approx(NAN)));
}

// exp_shifted runs sixteen lanes at a time where the build targets AVX-512 (NOTE [ Sixteen lanes
// where the CPU has AVX-512 ] in fused_common.h): its values and its sum are those of the eight-lane
// loop, bit for bit, for every length and tail, specials included (a NaN sum a NaN). Elsewhere both
// are that loop.
TEST(CrossEntropyKernel, ExpShiftedIsTheEightLaneLoopBitForBit) {
  namespace vec = cpu::fused;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-95.0f, 95.0f);
  std::vector<float> x(203 + 42);  // rows of up to 203 from 0 or from 42
  for (float& v : x) v = u(rng);
  x[3] = -INFINITY, x[17] = INFINITY, x[40] = NAN, x[41] = -0.0f, x[100] = 88.5f, x[101] = -87.5f;
  // Each length with the specials early (the row from 0), none (from 42), or in its last lanes, where
  // the sixteen-lane build takes its masked tail (NOTE [ A row's last lanes in one vector ]); finite
  // and infinite shifts.
  for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 23, 31, 32, 33, 40, 64, 203})
    for (int where = 0; where < 3; ++where)
      for (float shift : {1.5f, INFINITY, -INFINITY}) {
        std::vector<float> row(x.begin() + (where == 1 ? 42 : 0), x.begin() + (where == 1 ? 42 : 0) + n);
        if (where == 2)
          for (int64_t k = 0; k < 4 && k < n; ++k) row[size_t(n - 1 - k)] = std::vector<float>{-INFINITY, NAN, INFINITY, -0.0f}[size_t(k)];
        const float* xs = row.data();
        std::vector<float> got(size_t(n) + 1, -1.0f), want(size_t(n) + 1, -1.0f);
        const float sum = vec::exp_shifted(xs, n, shift, 0.25f, got.data());
        vec::f32x8 acc = {};  // the eight-lane loop, written out
        int64_t j = 0;
        for (; j + 8 <= n; j += 8) {
          const vec::f32x8 e = vec::exp8(vec::load8(xs + j) - shift);
          acc += e;
          vec::store8(want.data() + j, e * 0.25f);
        }
        float buf[8];
        for (int l = 0; l < 8; ++l) buf[l] = j + l < n ? xs[j + l] - shift : -INFINITY;
        const vec::f32x8 e = vec::exp8(vec::load8(buf));
        acc += e;
        for (int l = 0; j + l < n; ++l) want[size_t(j + l)] = e[l] * 0.25f;
        const float want_sum = vec::hsum8(acc);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << "n " << n << " where " << where << " shift " << shift;
        // A sum of two different NaNs (inf - inf's and the row's own) is either: the compiler may
        // order an add's operands either way, and x86 keeps the first's.
        EXPECT_TRUE(std::memcmp(&sum, &want_sum, sizeof sum) == 0 || (std::isnan(sum) && std::isnan(want_sum)))
            << "n " << n << " where " << where << " shift " << shift << ": " << sum << " vs " << want_sum;
      }
}

// bfloat16 rows (cross-entropy's bf16 logits) read widened: row_max and exp_shifted give the bits
// they give of the widened float32 row, for every length and tail, specials included.
TEST(CrossEntropyKernel, Bfloat16RowsAreTheirWidenedRowsBitForBit) {
  namespace vec = cpu::fused;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-95.0f, 95.0f);
  std::vector<bfloat16> x(203 + 42);  // rows of up to 203 from 0 or from 42
  for (bfloat16& v : x) v = bfloat16(u(rng));
  x[3] = bfloat16(-INFINITY), x[17] = bfloat16(INFINITY), x[40] = bfloat16(NAN), x[41] = bfloat16(-0.0f);
  for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 40, 64, 203})
    for (int where = 0; where < 3; ++where)  // specials early, none, in the last lanes
      for (float shift : {1.5f, INFINITY, -INFINITY}) {
        std::vector<bfloat16> row(x.begin() + (where == 1 ? 42 : 0), x.begin() + (where == 1 ? 42 : 0) + n);
        if (where == 2)
          for (int64_t k = 0; k < 4 && k < n; ++k)
            row[size_t(n - 1 - k)] = bfloat16(std::vector<float>{-INFINITY, NAN, INFINITY, -0.0f}[size_t(k)]);
        const bfloat16* xs = row.data();
        std::vector<float> wide(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) wide[size_t(j)] = float(xs[j]);
        const float m = vec::row_max(xs, n, true), want_m = vec::row_max(wide.data(), n);
        EXPECT_TRUE(std::memcmp(&m, &want_m, sizeof m) == 0 || (m == 0 && want_m == 0)) << "n " << n << " where " << where;
        std::vector<float> got(size_t(n) + 1, -1.0f), want(size_t(n) + 1, -1.0f);
        const float sum = vec::exp_shifted(xs, n, shift, 0.25f, got.data());
        const float want_sum = vec::exp_shifted(wide.data(), n, shift, 0.25f, want.data());
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << "n " << n << " where " << where << " shift " << shift;
        EXPECT_TRUE(std::memcmp(&sum, &want_sum, sizeof sum) == 0 || (std::isnan(sum) && std::isnan(want_sum)))
            << "n " << n << " where " << where;
      }
}

TEST(CrossEntropyOp, NamesBadTargets) {
  Tensor logits = random_tensor({3, 10}, DType::f32, 16);
  expect_error([&] { fused::cross_entropy_forward(logits, Tensor::from_vector(std::vector<int64_t>{1, 12, 0})); },
               "cross_entropy: target 12 at row 1 is out of range for 10 classes");
  expect_error([&] { fused::cross_entropy_forward(logits, Tensor::from_vector(std::vector<int32_t>{1, -1, 0})); }, "target -1");
  expect_error([&] { fused::cross_entropy_forward(logits, Tensor::from_vector(std::vector<float>{1, 1, 0})); },
               "targets must be int32 or int64, found float32");
  expect_error([&] { fused::cross_entropy_forward(logits, Tensor::from_vector(std::vector<int64_t>{1, 1})); },
               "targets must have shape [3], found [2]");
  // ignore_index rows pass the check and give zero loss and zero gradient.
  Tensor t = Tensor::from_vector(std::vector<int64_t>{1, -100, 9});
  fused::CrossEntropyResult r = fused::cross_entropy_forward(logits, t);
  EXPECT_EQ(values(r.losses)[1], 0.0);
  Tensor d = fused::cross_entropy_backward(Tensor::from_vector(std::vector<float>{1, 1, 1}), logits, t, r);
  for (int64_t j = 0; j < 10; ++j) EXPECT_EQ(read_element(d, 10 + j), 0.0);
  expect_error([&] { fused::cross_entropy_forward(logits, t, 5); }, "target -100 at row 1");
}

TEST(CrossEntropyOp, KernelsMatchTheSlowReference) {
  auto tol_for = [](DType dt) { return dt == DType::f64 ? 1e-12 : 3e-5; };
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor logits = random_tensor({7, 33}, dt, 9, -6, 6);
    Tensor targets = Tensor::from_vector(std::vector<int64_t>{0, 32, -100, 4, 4, 17, -100});
    fused::CrossEntropyResult got = fused::cross_entropy_forward(logits, targets);
    fused::CrossEntropyResult want = fused::reference::cross_entropy(logits, targets);
    EXPECT_TRUE(all_close(got.losses, want.losses, tol_for(dt), tol_for(dt)));
    EXPECT_TRUE(all_close(got.lse, want.lse, tol_for(dt), tol_for(dt)));
  }
}

TEST(CrossEntropyOp, DeferredTargetChecksKeepIgnoreIndexAndReportTheBadOne) {
  Tensor logits = ops::reshape(ops::arange(0, 12, 1, DType::f32), {3, 4});
  Tensor bad_targets = Tensor::from_vector(std::vector<int64_t>{1, -100, 4});
  const std::string immediate = message_of([&] { fused::cross_entropy_forward(logits, bad_targets, -100); });
  ASSERT_NE(immediate.find("target 4 at row 2"), std::string::npos) << immediate;
  Tensor good = Tensor::from_vector(std::vector<int64_t>{1, -100, 3});
  const fused::CrossEntropyResult want = fused::cross_entropy_forward(logits, good, -100);
  ops::DeferRangeChecksOnCpu defer;
  const fused::CrossEntropyResult got = fused::cross_entropy_forward(logits, good, -100);
  EXPECT_EQ(got.losses.to_vector<float>(), want.losses.to_vector<float>());  // ignore_index stays ignored
  EXPECT_EQ(fused::cross_entropy_backward(ops::ones({3}), logits, good, got, -100).to_vector<float>(),
            fused::cross_entropy_backward(ops::ones({3}), logits, good, want, -100).to_vector<float>());
  EXPECT_NO_THROW(ops::check_deferred_errors());
  fused::cross_entropy_forward(logits, bad_targets, -100);
  EXPECT_EQ(message_of([] { ops::check_deferred_errors(); }), immediate);
}

TEST(CrossEntropyKernel, Bf16GradientIsTheFloat32OneRoundedBitForBit) {
  // Rows of a width that leaves a tail after the sixteen- and eight-lane loops, an ignored row.
  const int64_t N = 5, V = 1003;
  Tensor logits = random_tensor({N, V}, DType::f32, 41, -9, 9);
  Tensor targets = Tensor::from_vector(std::vector<int64_t>{0, 1002, -100, 77, 500});
  const fused::CrossEntropyResult r = fused::cross_entropy_forward(logits, targets);
  Tensor dl = random_tensor({N}, DType::f32, 42, -3, 3);
  Tensor got = Tensor::empty({N, V}, DType::bf16);
  fused::cross_entropy_backward_into(got, dl, logits, targets, r);
  const Tensor want = ops::to(fused::cross_entropy_backward(dl, logits, targets, r), DType::bf16);
  EXPECT_EQ(got.to_vector<float>(), want.to_vector<float>());
  expect_error([&] { fused::cross_entropy_backward_into(Tensor::empty({N, V}, DType::f64), dl, logits, targets, r); },
               "out must be contiguous float32 or bfloat16, found float64");
  expect_error([&] { fused::cross_entropy_backward_into(ops::transpose(Tensor::empty({V, N}, DType::bf16), 0, 1), dl, logits, targets, r); },
               "out must be contiguous");
}

// The loss and its bfloat16 gradient in one visit per row (cross_entropy_with_gradient): the
// forward's losses and lse bit for bit, and the gradient within a bfloat16 rounding of the exact
// (softmax - onehot) g, as the two kernels' rounded gradient is. Rows: a tail after the sixteen- and
// eight-lane loops, an ignored row, a row of -inf only (and one ignored), a NaN, a +inf, logits far
// from 0.
TEST(CrossEntropyKernel, LossWithGradientIsTheTwoKernelsInOneVisit) {
  if (!fused::has_loss_with_gradient(Device::cpu())) GTEST_SKIP() << "skipped: no such CPU kernel";
  const int64_t N = 10, V = 1003;
  Tensor logits = random_tensor({N, V}, DType::f32, 45, -9, 9);
  float* x = logits.data<float>();
  for (int64_t j = 0; j < V; ++j) x[5 * V + j] = x[9 * V + j] = -INFINITY;  // every class masked
  x[6 * V + 17] = NAN;
  x[7 * V + 400] = INFINITY;
  for (int64_t j = 0; j < V; ++j) x[8 * V + j] += 1e4f;  // the max is subtracted first
  const std::vector<int64_t> tv = {0, 1002, -100, 77, 500, 3, 9, 10, 11, -100};
  Tensor targets = Tensor::from_vector(tv);
  Tensor dl = random_tensor({N}, DType::f32, 46, -3, 3);
  Tensor got = Tensor::empty({N, V}, DType::bf16);
  const fused::CrossEntropyResult r = fused::cross_entropy_with_gradient(logits, targets, dl, got);
  const fused::CrossEntropyResult want = fused::cross_entropy_forward(logits, targets);
  const std::vector<float> l = r.losses.to_vector<float>(), wl = want.losses.to_vector<float>();
  const std::vector<float> s = r.lse.to_vector<float>(), ws = want.lse.to_vector<float>();
  for (int64_t n = 0; n < N; ++n) {  // NaN where the forward has NaN
    EXPECT_TRUE(std::memcmp(&l[size_t(n)], &wl[size_t(n)], 4) == 0) << "loss of row " << n << ": " << l[size_t(n)] << " vs " << wl[size_t(n)];
    EXPECT_TRUE(std::memcmp(&s[size_t(n)], &ws[size_t(n)], 4) == 0) << "lse of row " << n << ": " << s[size_t(n)] << " vs " << ws[size_t(n)];
  }
  Tensor two = Tensor::empty({N, V}, DType::bf16);
  fused::cross_entropy_backward_into(two, dl, logits, targets, want);
  const std::vector<float> d = got.to_vector<float>(), d2 = two.to_vector<float>();
  const std::vector<float> xs = logits.to_vector<float>(), g = dl.to_vector<float>();
  int64_t differ = 0;
  for (int64_t n = 0; n < N; ++n) {
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, double(xs[size_t(n * V + j)]));
    for (int64_t j = 0; j < V; ++j) sum += std::exp(double(xs[size_t(n * V + j)]) - mx);
    for (int64_t j = 0; j < V; ++j) {
      const size_t e = size_t(n * V + j);
      if (n == 2 || n == 9) {
        ASSERT_EQ(d[e], 0.0f) << "ignored row, class " << j;
        continue;
      }
      if (n >= 5 && n <= 7) {  // no finite softmax: NaN wherever the two kernels give NaN
        ASSERT_EQ(std::isnan(d[e]), std::isnan(d2[e])) << "row " << n << ", class " << j;
        continue;
      }
      const double exact = (std::exp(double(xs[e]) - mx) / sum - (j == tv[size_t(n)])) * g[size_t(n)];
      // Rounded to bfloat16 (8 significant bits) from a float32 value a few ulps from exact.
      ASSERT_NEAR(d[e], exact, std::abs(exact) * 5e-3 + 1e-30) << "row " << n << ", class " << j;
      differ += d[e] != d2[e];
    }
  }
  EXPECT_LT(differ, 10 * N) << "the two routes' roundings should mostly agree";
  // Rows further apart than V (NOTE [ dlogits rows on lines ] in cross_entropy.cpp): the same rows,
  // and the padding between them untouched.
  Tensor padded = ops::full({N, V + 29}, 7.0, DType::bf16, Device::cpu());
  fused::cross_entropy_with_gradient(logits, targets, dl, ops::narrow(padded, 1, 0, V));
  EXPECT_TRUE(testing::bitwise_equal(ops::contiguous(ops::narrow(padded, 1, 0, V)), got));
  EXPECT_TRUE(testing::bitwise_equal(ops::narrow(padded, 1, V, 29), ops::full({N, 29}, 7.0, DType::bf16, Device::cpu())));
  expect_error([&] { fused::cross_entropy_with_gradient(logits, targets, dl, ops::transpose(Tensor::empty({V, N}, DType::bf16), 0, 1)); },
               "dlogits must be bfloat16 rows of unit stride (contiguous or padded), found bfloat16 with strides");
  expect_error([&] { fused::cross_entropy_with_gradient(logits, targets, dl, Tensor::empty({N, V}, DType::f32)); },
               "dlogits must be bfloat16 rows of unit stride (contiguous or padded), found float32");
  expect_error([&] { fused::cross_entropy_with_gradient(ops::to(logits, DType::f64), targets, dl, got); },
               "logits must be float32 or bfloat16, found float64");
}

// bfloat16 logits (NOTE [ bf16 logits ] in cross_entropy.cpp) are read as their widened values: the
// losses, lse and rounded gradient of the float32 logits they widen to, bit for bit, masked and
// ignored rows included, across rows that tasks split.
TEST(CrossEntropyKernel, Bf16LogitsAreTheirFloat32Values) {
  if (!fused::has_loss_with_gradient(Device::cpu())) GTEST_SKIP() << "skipped: no such CPU kernel";
  const int64_t N = 37, V = 1003;
  Tensor wide = random_tensor({N, V}, DType::f32, 47, -9, 9);
  float* x = wide.data<float>();
  for (int64_t j = 0; j < V; ++j) x[5 * V + j] = -INFINITY;
  x[7 * V + 400] = INFINITY;
  const Tensor narrow = ops::to(wide, DType::bf16), widened = ops::to(narrow, DType::f32);
  std::vector<int64_t> tv(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) tv[size_t(n)] = n % 9 == 2 ? -100 : (n * 131) % V;
  const Tensor targets = Tensor::from_vector(tv), dl = random_tensor({N}, DType::f32, 48, -3, 3);
  Tensor got = Tensor::empty({N, V}, DType::bf16), want = Tensor::empty({N, V}, DType::bf16);
  const fused::CrossEntropyResult r = fused::cross_entropy_with_gradient(narrow, targets, dl, got);
  const fused::CrossEntropyResult w = fused::cross_entropy_with_gradient(widened, targets, dl, want);
  EXPECT_TRUE(testing::bitwise_equal(r.losses, w.losses));
  EXPECT_TRUE(testing::bitwise_equal(r.lse, w.lse));
  EXPECT_TRUE(testing::bitwise_equal(got, want));
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : values(t)) m = std::max(m, std::abs(v));
  return m;
}

// linear_cross_entropy against cross_entropy(linear(x, w), t): the loss and both gradients, for an
// upstream gradient g. Under the bf16 policy, V = 131,072 makes its blocks at most 80 rows (40 MB of
// float32 logits: NOTE [ Linear cross-entropy ]), so 170 rows are three blocks, of 57, 57 and 56.
struct LossAndGrads {
  Tensor loss, dx, dw;
};
// bf16_logits: the composition with the logits rounded to bfloat16, as linear_cross_entropy makes them
// under the bf16 policy on the CPU (NOTE [ bf16 logits ] in cross_entropy.cpp).
LossAndGrads run_loss(bool fused_path, const Tensor& x, const Tensor& w, const Tensor& t, double g,
                      bool bf16_logits = false) {
  Tensor xi = ops::clone(x), wi = ops::clone(w);
  xi.requires_grad_(true);
  wi.requires_grad_(true);
  Tensor logits = fused_path ? Tensor() : linear(xi, wi, Tensor());
  if (bf16_logits) logits = to(to(logits, DType::bf16), DType::f32);
  Tensor loss = fused_path ? linear_cross_entropy(xi, wi, t) : cross_entropy(logits, t);
  backward(mul(loss, g));
  return {loss.detach(), xi.grad(), wi.grad()};
}

std::vector<int64_t> some_targets(int64_t n, int64_t V) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[size_t(i)] = i % 7 == 3 ? -100 : (i * 7919) % V;
  return t;
}

TEST(LinearCrossEntropy, IsTheComposition) {
  const int64_t B = 2, T = 37, C = 8, V = 1000;  // float32: one block
  Tensor x = random_tensor({B, T, C}, DType::f32, 31, -2, 2), w = random_tensor({V, C}, DType::f32, 32);
  Tensor t = ops::reshape(Tensor::from_vector(some_targets(B * T, V)), {B, T});
  for (double g : {1.0, -2.5}) {
    const LossAndGrads got = run_loss(true, x, w, t, g), want = run_loss(false, x, w, t, g);
    EXPECT_TRUE(all_close(got.loss, want.loss, 1e-6, 1e-6)) << "g " << g;
    EXPECT_TRUE(all_close(got.dx, want.dx, 1e-7, 1e-5)) << "g " << g;
    EXPECT_TRUE(all_close(got.dw, want.dw, 1e-7, 1e-5)) << "g " << g;
  }
  // Without a graph: the same loss, and nothing recorded.
  const Tensor want = run_loss(false, x, w, t, 1).loss;
  NoGradGuard no_grad;
  const Tensor got = linear_cross_entropy(x, w, t);
  EXPECT_FALSE(got.requires_grad());
  EXPECT_TRUE(all_close(got, want, 1e-6, 1e-6));
}

TEST(LinearCrossEntropy, UnderTheBf16PolicyIsTheCompositionUnderIt) {
  // Both round the same float32 gradient of the logits to bfloat16 for the backward's products.
  // 1,003 classes: the gradient's rows padded to 1,024 apart (NOTE [ dlogits rows on lines ]).
  for (const int64_t V : {int64_t(131072), int64_t(1003)}) {
    SCOPED_TRACE("V " + std::to_string(V));
    const int64_t T = 170, C = 4;
    Tensor x = random_tensor({T, C}, DType::f32, 33, -2, 2), w = random_tensor({V, C}, DType::f32, 34);
    Tensor t = Tensor::from_vector(some_targets(T, V));
    PrecisionGuard bf16(Precision::bf16);
    // (The bound for g != 1 is made for many classes, where each gradient is small.)
    for (double g : V > 100000 ? std::vector<double>{1.0, -2.5} : std::vector<double>{1.0}) {
      // For g = 1 the same rounded gradient; otherwise the composition rounds it times g, and
      // linear_cross_entropy multiplies by g after the products: the same within bf16's precision.
      // (Within 2e-3 of the largest gradient then: sums of rounded terms cancel.)
      const LossAndGrads got = run_loss(true, x, w, t, g), want = run_loss(false, x, w, t, g, /*bf16_logits=*/true);
      EXPECT_TRUE(all_close(got.loss, want.loss, 1e-6, 1e-6)) << "g " << g;
      for (auto [a, b] : {std::pair{got.dx, want.dx}, std::pair{got.dw, want.dw}}) {
        const double largest = max_abs(b);
        EXPECT_TRUE(g == 1.0 ? all_close(a, b, 1e-7, 1e-5) : all_close(a, b, 2e-3 * largest, 0)) << "g " << g;
      }
    }
    // And it is bf16: near the float32 loss's gradient at bf16's precision only.
    const LossAndGrads got = run_loss(true, x, w, t, 1);
    {  // Without a graph, the same loss (from the same bf16 logits).
      NoGradGuard no_grad;
      EXPECT_TRUE(testing::bitwise_equal(linear_cross_entropy(x, w, t), got.loss));
    }
    PrecisionGuard fp32(Precision::fp32);
    const LossAndGrads exact = run_loss(false, x, w, t, 1);
    EXPECT_TRUE(all_close(got.dw, exact.dw, 1e-4, 2e-2));
    EXPECT_FALSE(all_close(got.dw, exact.dw, 1e-7, 1e-5));
  }
}

TEST(LinearCrossEntropy, AFrozenWeightGetsNoGradientAndXItsOwn) {
  // As a frozen classifier under LoRA fine-tuning: only x requires grad.
  Tensor x = random_tensor({5, 6}, DType::f32, 43), w = random_tensor({9, 6}, DType::f32, 44);
  Tensor t = Tensor::from_vector(std::vector<int64_t>{0, 8, -100, 3, 3});
  Tensor xa = ops::clone(x), xb = ops::clone(x);
  xa.requires_grad_(true);
  xb.requires_grad_(true);
  backward(linear_cross_entropy(xa, w, t));
  backward(cross_entropy(linear(xb, w, Tensor()), t));
  EXPECT_FALSE(w.grad().defined());
  EXPECT_TRUE(all_close(xa.grad(), xb.grad(), 1e-7, 1e-5));
}

TEST(LinearCrossEntropy, AllIgnoredIsNaNLikeTheComposition) {
  Tensor x = random_tensor({4, 3}, DType::f32, 35), w = random_tensor({5, 3}, DType::f32, 36);
  Tensor t = Tensor::from_vector(std::vector<int64_t>{-100, -100, -100, -100});
  const LossAndGrads got = run_loss(true, x, w, t, 1), want = run_loss(false, x, w, t, 1);
  EXPECT_TRUE(std::isnan(read_element(got.loss, 0)));
  EXPECT_TRUE(std::isnan(read_element(want.loss, 0)));
  EXPECT_EQ(values(got.dx), values(want.dx));
  EXPECT_EQ(values(got.dw), values(want.dw));
}

TEST(LinearCrossEntropy, Checks) {
  Tensor x = random_tensor({2, 3, 4}, DType::f32, 37), w = random_tensor({10, 4}, DType::f32, 38);
  Tensor t = Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6});
  expect_error([&] { linear_cross_entropy(x, random_tensor({10, 5}, DType::f32, 39), ops::reshape(t, {2, 3})); },
               "linear_cross_entropy: expected x (..., C) and weight (V, C)");
  expect_error([&] { linear_cross_entropy(x, w, t); }, "expected targets shaped as x without its last axis");
  // The row named is the row among all of them, not within a block.
  Tensor bad = Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 12});
  expect_error([&] { linear_cross_entropy(x, w, ops::reshape(bad, {2, 3})); },
               "linear_cross_entropy: target 12 at row 5 is out of range for 10 classes");
  expect_error([&] { linear_cross_entropy(x, w, ops::reshape(ops::to(t, DType::f32), {2, 3})); },
               "targets must be int32 or int64");
}

}  // namespace
}  // namespace mvgpt
