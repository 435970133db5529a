// Layer norm and RMS norm (autograd/fused/norms.h): the CPU kernels against naive double loops and
// their backward against finite differences; the ops' layouts, dtypes and errors; the kernels
// against the slow reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include <mvgpt/autograd/ops.h>
#include <mvgpt/autograd/precision.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/fused/norms.h>
#include <mvgpt/fused/cross_entropy.h>
#include <mvgpt/fused/bias_gelu.h>
#include "backends/fused_test_util.h"

namespace mvgpt {
namespace {

using namespace fused_test;
using Vec = std::vector<double>;

// The CPU kernels themselves, without the op's checks and preparation.
const fused::NormKernels& cpu() { return cpu_kernels<fused::norms_cpu_kernels>(); }

// Naive layer norm / RMS norm in double over rows of length C; w/b empty = absent.
Vec naive_layer_norm(const Vec& x, const Vec& w, const Vec& b, int64_t C, double eps, Vec* mean = nullptr,
                     Vec* rstd = nullptr) {
  const int64_t N = int64_t(x.size()) / C;
  Vec y(x.size());
  for (int64_t r = 0; r < N; ++r) {
    double mu = 0, var = 0;
    for (int64_t i = 0; i < C; ++i) mu += x[r * C + i];
    mu /= C;
    for (int64_t i = 0; i < C; ++i) var += (x[r * C + i] - mu) * (x[r * C + i] - mu);
    var /= C;
    const double rs = 1 / std::sqrt(var + eps);
    if (mean) mean->push_back(mu);
    if (rstd) rstd->push_back(rs);
    for (int64_t i = 0; i < C; ++i)
      y[r * C + i] = (x[r * C + i] - mu) * rs * (w.empty() ? 1 : w[i]) + (b.empty() ? 0 : b[i]);
  }
  return y;
}

Vec naive_rms_norm(const Vec& x, const Vec& w, int64_t C, double eps, Vec* rstd = nullptr) {
  const int64_t N = int64_t(x.size()) / C;
  Vec y(x.size());
  for (int64_t r = 0; r < N; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < C; ++i) ms += x[r * C + i] * x[r * C + i];
    const double rs = 1 / std::sqrt(ms / C + eps);
    if (rstd) rstd->push_back(rs);
    for (int64_t i = 0; i < C; ++i) y[r * C + i] = x[r * C + i] * rs * (w.empty() ? 1 : w[i]);
  }
  return y;
}

// Central differences of f at x.
Vec finite_diff(const std::function<double(const Vec&)>& f, Vec x, double h = 1e-6) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f(x);
    x[i] = x0 - h;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

struct NormCase {
  int64_t N, C;
  bool affine, with_bias;
};

class LayerNormKernel : public ::testing::TestWithParam<NormCase> {};

TEST_P(LayerNormKernel, ForwardMatchesNaiveLoops) {
  const auto [N, C, affine, with_bias] = GetParam();
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor x = random_tensor({N, C}, dt, 1, -2, 3);
    Tensor w = affine ? random_tensor({C}, dt, 2) : Tensor();
    Tensor b = with_bias ? random_tensor({C}, dt, 3) : Tensor();
    Tensor y = empty_like(x), mean = empty_of({N}, dt), rstd = empty_of({N}, dt);
    cpu().layer_norm(x, w, b, 1e-5, y, mean, rstd);
    Vec want_mean, want_rstd;
    Vec want = naive_layer_norm(values(x), w ? values(w) : Vec{}, b ? values(b) : Vec{}, C, 1e-5, &want_mean,
                                &want_rstd);
    const double tol = dt == DType::f64 ? 1e-12 : 2e-5;
    EXPECT_TRUE(all_close(y, want, tol, tol)) << dtype_name(dt);
    EXPECT_TRUE(all_close(mean, want_mean, tol, tol)) << dtype_name(dt);
    EXPECT_TRUE(all_close(rstd, want_rstd, tol, tol)) << dtype_name(dt);
  }
}

TEST_P(LayerNormKernel, BackwardMatchesFiniteDifferences) {
  auto [N, C, affine, with_bias] = GetParam();
  N = std::min<int64_t>(N, 5);  // finite differences cost O(size^2)
  C = std::min<int64_t>(C, 19);
  Tensor x = random_tensor({N, C}, DType::f64, 4, -2, 2);
  Tensor w = affine ? random_tensor({C}, DType::f64, 5) : Tensor();
  Tensor b = with_bias ? random_tensor({C}, DType::f64, 6) : Tensor();
  Tensor dy = random_tensor({N, C}, DType::f64, 7);
  Tensor y = empty_like(x), mean = empty_of({N}, DType::f64), rstd = empty_of({N}, DType::f64);
  cpu().layer_norm(x, w, b, 1e-5, y, mean, rstd);
  Tensor dx = empty_like(x);
  Tensor dw = affine ? empty_of({C}, DType::f64) : Tensor();
  Tensor db = with_bias ? empty_of({C}, DType::f64) : Tensor();
  cpu().layer_norm_backward(dy, x, w, mean, rstd, dx, dw, db);

  const Vec xv = values(x), wv = w ? values(w) : Vec{}, bv = b ? values(b) : Vec{}, dyv = values(dy);
  EXPECT_TRUE(all_close(dx, finite_diff([&](const Vec& xs) { return dot(naive_layer_norm(xs, wv, bv, C, 1e-5), dyv); }, xv),
                        1e-7, 1e-7));
  if (affine) {
    EXPECT_TRUE(all_close(
        dw, finite_diff([&](const Vec& ws) { return dot(naive_layer_norm(xv, ws, bv, C, 1e-5), dyv); }, wv), 1e-7, 1e-7));
  }
  if (with_bias) {
    EXPECT_TRUE(all_close(
        db, finite_diff([&](const Vec& bs) { return dot(naive_layer_norm(xv, wv, bs, C, 1e-5), dyv); }, bv), 1e-7, 1e-7));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, LayerNormKernel,
                         ::testing::Values(NormCase{7, 384, true, true}, NormCase{3, 5, true, false},
                                           NormCase{4, 33, false, false}, NormCase{2, 17, false, true},
                                           NormCase{1000, 40, true, true}));

TEST(LayerNormKernel, ParameterGradientsAreSumsOverManyRows) {
  // Many rows: several chunks and threads must sum to the naive double sum.
  const int64_t N = 3000, C = 24;
  Tensor x = random_tensor({N, C}, DType::f64, 8), w = random_tensor({C}, DType::f64, 9);
  Tensor b = random_tensor({C}, DType::f64, 10), dy = random_tensor({N, C}, DType::f64, 11);
  Tensor y = empty_like(x), mean = empty_of({N}, DType::f64), rstd = empty_of({N}, DType::f64);
  cpu().layer_norm(x, w, b, 1e-5, y, mean, rstd);
  Tensor dx = empty_like(x), dw = empty_of({C}, DType::f64), db = empty_of({C}, DType::f64);
  cpu().layer_norm_backward(dy, x, w, mean, rstd, dx, dw, db);
  const Vec xv = values(x), dyv = values(dy), mv = values(mean), rv = values(rstd);
  Vec want_dw(C, 0), want_db(C, 0);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t i = 0; i < C; ++i) {
      want_dw[i] += dyv[r * C + i] * (xv[r * C + i] - mv[r]) * rv[r];
      want_db[i] += dyv[r * C + i];
    }
  EXPECT_TRUE(all_close(dw, want_dw, 1e-10, 1e-12));
  EXPECT_TRUE(all_close(db, want_db, 1e-10, 1e-12));
  // Deterministic: a second run gives identical bits.
  Tensor dw2 = empty_of({C}, DType::f64), db2 = empty_of({C}, DType::f64), dx2 = empty_like(x);
  cpu().layer_norm_backward(dy, x, w, mean, rstd, dx2, dw2, db2);
  EXPECT_EQ(values(dw), values(dw2));
  EXPECT_EQ(values(dx), values(dx2));
}

TEST(LayerNormKernel, ZeroRows) {
  Tensor x = empty_of({0, 8}, DType::f32), w = random_tensor({8}, DType::f32, 1), b = random_tensor({8}, DType::f32, 2);
  Tensor y = empty_like(x), mean = empty_of({0}, DType::f32), rstd = empty_of({0}, DType::f32);
  cpu().layer_norm(x, w, b, 1e-5, y, mean, rstd);
  Tensor dw = empty_of({8}, DType::f32), db = empty_of({8}, DType::f32), dx = empty_like(x);
  cpu().layer_norm_backward(x, x, w, mean, rstd, dx, dw, db);
  EXPECT_EQ(values(dw), Vec(8, 0.0));
  EXPECT_EQ(values(db), Vec(8, 0.0));
}

TEST(LayerNormKernel, ZeroChannelsStillWritesEveryRowStatistic) {
  Tensor x = empty_of({3, 0}, DType::f32), y = empty_like(x);
  Tensor mean = empty_of({3}, DType::f32), rstd = empty_of({3}, DType::f32);
  for (int64_t i = 0; i < 3; ++i) write_element(rstd, i, 123);
  cpu().layer_norm(x, Tensor(), Tensor(), 1e-5, y, mean, rstd);
  for (int64_t i = 0; i < 3; ++i) EXPECT_NE(read_element(rstd, i), 123.0);  // NaN (0/0 mean), as PyTorch
}

class RmsNormKernel : public ::testing::TestWithParam<NormCase> {};

TEST_P(RmsNormKernel, ForwardMatchesNaiveLoops) {
  const auto [N, C, affine, with_bias] = GetParam();
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor x = random_tensor({N, C}, dt, 12, -2, 3);
    Tensor w = affine ? random_tensor({C}, dt, 13) : Tensor();
    Tensor y = empty_like(x), rstd = empty_of({N}, dt);
    cpu().rms_norm(x, w, 1e-6, y, rstd);
    Vec want_rstd;
    Vec want = naive_rms_norm(values(x), w ? values(w) : Vec{}, C, 1e-6, &want_rstd);
    const double tol = dt == DType::f64 ? 1e-12 : 2e-5;
    EXPECT_TRUE(all_close(y, want, tol, tol)) << dtype_name(dt);
    EXPECT_TRUE(all_close(rstd, want_rstd, tol, tol)) << dtype_name(dt);
  }
}

TEST_P(RmsNormKernel, BackwardMatchesFiniteDifferences) {
  auto [N, C, affine, with_bias] = GetParam();
  N = std::min<int64_t>(N, 5);
  C = std::min<int64_t>(C, 19);
  Tensor x = random_tensor({N, C}, DType::f64, 14, -2, 2);
  Tensor w = affine ? random_tensor({C}, DType::f64, 15) : Tensor();
  Tensor dy = random_tensor({N, C}, DType::f64, 16);
  Tensor y = empty_like(x), rstd = empty_of({N}, DType::f64);
  cpu().rms_norm(x, w, 1e-6, y, rstd);
  Tensor dx = empty_like(x), dw = affine ? empty_of({C}, DType::f64) : Tensor();
  cpu().rms_norm_backward(dy, x, w, rstd, dx, dw);
  const Vec xv = values(x), wv = w ? values(w) : Vec{}, dyv = values(dy);
  EXPECT_TRUE(all_close(dx, finite_diff([&](const Vec& xs) { return dot(naive_rms_norm(xs, wv, C, 1e-6), dyv); }, xv),
                        1e-7, 1e-7));
  if (affine) {
    EXPECT_TRUE(
        all_close(dw, finite_diff([&](const Vec& ws) { return dot(naive_rms_norm(xv, ws, C, 1e-6), dyv); }, wv), 1e-7, 1e-7));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormKernel,
                         ::testing::Values(NormCase{7, 384, true, false}, NormCase{3, 5, true, false},
                                           NormCase{4, 33, false, false}, NormCase{1000, 40, true, false}));

// ---- the ops: layouts, dtypes, errors, reference

TEST(NormOps, LayerNormAcceptsAnyLayoutAndKeepsBatchShape) {
  // x (B, T, C) as a transposed view of a (B, C, T) buffer.
  Tensor buf = random_tensor({2, 8, 5}, DType::f32, 1);
  Tensor x = buf.as_strided({2, 5, 8}, {40, 1, 5}, 0);
  Tensor w = random_tensor({8}, DType::f32, 2), b = random_tensor({8}, DType::f32, 3);
  fused::NormResult got = fused::layer_norm_forward(x, w, b, 1e-5);
  fused::NormResult want = fused::layer_norm_forward(packed(x, DType::f32), w, b, 1e-5);
  EXPECT_EQ(got.y.shape(), (Shape{2, 5, 8}));
  EXPECT_EQ(got.mean.shape(), (Shape{2, 5}));
  EXPECT_EQ(values(got.y), values(want.y));
  auto grads = fused::layer_norm_backward(got.y, x, w, b, got);
  ASSERT_EQ(grads.size(), 3u);
  EXPECT_EQ(grads[0].shape(), x.shape());
  EXPECT_EQ(grads[1].shape(), (Shape{8}));
}

TEST(NormOps, Bfloat16IsWidenedAndCastBack) {
  Tensor x = packed(random_tensor({3, 16}, DType::f32, 4), DType::bf16);
  Tensor xf = packed(x, DType::f32);  // the same values in float32
  Tensor w = random_tensor({16}, DType::f32, 5);
  fused::NormResult r = fused::layer_norm_forward(x, w, Tensor(), 1e-5);
  EXPECT_EQ(r.y.dtype(), DType::bf16);
  EXPECT_EQ(r.rstd.dtype(), DType::f32);
  EXPECT_TRUE(all_close(r.y, fused::layer_norm_forward(xf, w, Tensor(), 1e-5).y, 2e-2, 1e-2));
  auto g = fused::layer_norm_backward(r.y, x, w, Tensor(), r);
  EXPECT_EQ(g[0].dtype(), DType::bf16);
  EXPECT_EQ(g[1].dtype(), DType::f32);
  EXPECT_FALSE(g[2].defined());

  EXPECT_EQ(fused::rms_norm_forward(x, Tensor(), 1e-6).y.dtype(), DType::bf16);
}

// NOTE [ Norms made for products ]: the rounded forward is the float32 forward's y rounded, bit for
// bit (rows of 384, the kernel's sixteen-lane path, and 21, its row loop; with and without the
// affine parameters), and the backward on a bfloat16 dy is the backward on dy widened, bit for bit.
TEST(NormOps, ANormMadeForAProductIsTheRoundedNormBitForBit) {
  for (int64_t C : {int64_t(384), int64_t(21)}) {
    for (int affine = 0; affine < 3; ++affine) {
      SCOPED_TRACE("C " + std::to_string(C) + ", affine " + std::to_string(affine));
      const Tensor x = random_tensor({37, C}, DType::f32, 11);
      const Tensor w = affine > 0 ? random_tensor({C}, DType::f32, 12) : Tensor();
      const Tensor b = affine > 1 ? random_tensor({C}, DType::f32, 13) : Tensor();
      const fused::NormResult full = fused::layer_norm_forward(x, w, b, 1e-5);
      const fused::NormResult r = fused::layer_norm_forward_rounded(x, w, b, 1e-5);
      ASSERT_EQ(r.y.dtype(), DType::bf16);
      const Tensor want = ops::to(full.y, DType::bf16);
      EXPECT_EQ(std::memcmp(r.y.raw_data(), want.raw_data(), want.nbytes()), 0);
      EXPECT_EQ(r.mean.to_vector<float>(), full.mean.to_vector<float>());
      EXPECT_EQ(r.rstd.to_vector<float>(), full.rstd.to_vector<float>());
      const Tensor dy = ops::to(random_tensor({37, C}, DType::f32, 14), DType::bf16);
      const auto got = fused::layer_norm_backward(dy, x, w, b, r);
      const auto ref = fused::layer_norm_backward(ops::to(dy, DType::f32), x, w, b, r);
      for (size_t k = 0; k < 3; ++k) {
        ASSERT_EQ(got[k].defined(), ref[k].defined());
        if (got[k].defined()) {
          EXPECT_EQ(got[k].to_vector<float>(), ref[k].to_vector<float>()) << "gradient " << k;
        }
      }
    }
  }
}

// The differentiable op: bfloat16 under the bf16 policy, its gradients those of layer_norm on the
// bfloat16 gradient widened; layer_norm itself under float32 products and for float64 x.
TEST(NormOps, LayerNormForProductFollowsThePolicy) {
  const Tensor x0 = random_tensor({2, 5, 384}, DType::f32, 21), w0 = random_tensor({384}, DType::f32, 22);
  const Tensor b0 = random_tensor({384}, DType::f32, 23);
  const Tensor r = random_tensor({2, 5, 384}, DType::f32, 24);
  Tensor x = ops::clone(x0).requires_grad_(), w = ops::clone(w0).requires_grad_(), b = ops::clone(b0).requires_grad_();
  {
    PrecisionGuard bf16(Precision::bf16);
    const Tensor y = layer_norm_for_product(x, w, b, 1e-5);
    ASSERT_EQ(y.dtype(), DType::bf16);
    EXPECT_EQ(y.shape(), x.shape());
    const Tensor want = ops::to(layer_norm(x0, w0, b0, 1e-5), DType::bf16);
    EXPECT_EQ(std::memcmp(y.raw_data(), want.raw_data(), want.nbytes()), 0);
    backward(sum(mul(to(y, DType::f32), r)));  // y's gradient: r rounded to bfloat16
  }
  Tensor xr = ops::clone(x0).requires_grad_(), wr = ops::clone(w0).requires_grad_(), br = ops::clone(b0).requires_grad_();
  backward(sum(mul(layer_norm(xr, wr, br, 1e-5), ops::to(ops::to(r, DType::bf16), DType::f32))));
  EXPECT_EQ(x.grad().to_vector<float>(), xr.grad().to_vector<float>());
  EXPECT_EQ(w.grad().to_vector<float>(), wr.grad().to_vector<float>());
  EXPECT_EQ(b.grad().to_vector<float>(), br.grad().to_vector<float>());
  EXPECT_EQ(layer_norm_for_product(x0, w0, b0, 1e-5).dtype(), DType::f32);  // float32 products
  PrecisionGuard bf16(Precision::bf16);
  EXPECT_EQ(layer_norm_for_product(ops::to(x0, DType::f64), ops::to(w0, DType::f64), Tensor(), 1e-5).dtype(),
            DType::f64);
}

Tensor uniform_cpu(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return ops::rand(shape, DType::f32, Device::cpu(), &g) * 2.0 - 1.0;
}
bool same_cpu_values(const Tensor& a, const Tensor& b) { return a.to_vector<double>() == b.to_vector<double>(); }

// The fused MLP and the classifier take such an activation too: the values of its float32 copy,
// and its gradient rounded once (the classifier's after the upstream gradient, here 0.3, scales it).
TEST(NormOps, TheFusedMlpAndClassifierTakeANormMadeForThem) {
  const Tensor x0 = ops::to(ops::to(uniform_cpu({6, 5, 64}, 11), DType::bf16), DType::f32);
  const Tensor w1 = uniform_cpu({96, 64}, 12), b1 = uniform_cpu({96}, 13), w2 = uniform_cpu({64, 96}, 14), b2 = uniform_cpu({64}, 15);
  const Tensor wv = uniform_cpu({50, 64}, 16);
  const Tensor targets = ops::to(ops::mul(ops::add(uniform_cpu({30}, 17), 1.0), 24.0), DType::i64);  // [0, 48)
  auto rounded = [](const Tensor& t) { return ops::to(ops::to(t, DType::bf16), DType::f32); };
  auto run = [&](bool as_bf16, bool classifier) {
    Tensor x = ops::clone(x0).requires_grad_();
    PrecisionGuard bf16(Precision::bf16);
    const Tensor in = as_bf16 ? to(x, DType::bf16) : x;
    Tensor y = classifier ? mul(linear_cross_entropy(reshape(in, {30, 64}), parameter(ops::clone(wv)), targets), 0.3)
                          : linear_gelu_linear(in, parameter(ops::clone(w1)), parameter(ops::clone(b1)),
                                               parameter(ops::clone(w2)), parameter(ops::clone(b2)));
    backward(sum(y));
    return std::vector<Tensor>{y, x.grad()};
  };
  for (bool classifier : {false, true}) {
    SCOPED_TRACE(classifier ? "linear_cross_entropy" : "linear_gelu_linear");
    const auto got = run(true, classifier), ref = run(false, classifier);
    EXPECT_TRUE(same_cpu_values(got[0], ref[0]));
    EXPECT_TRUE(same_cpu_values(got[1], rounded(ref[1])));
  }
}

TEST(NormOps, NormErrors) {
  Tensor x = random_tensor({2, 4}, DType::f32, 7);
  expect_error([&] { fused::layer_norm_forward(x, random_tensor({5}, DType::f32, 1), Tensor(), 1e-5); }, "weight must have shape [4], found [5]");
  expect_error([&] { fused::layer_norm_forward(Tensor::from_vector(std::vector<int64_t>{1, 2}), Tensor(), Tensor(), 1e-5); },
               "layer_norm: x must be floating point, found int64");
  expect_error([&] { fused::rms_norm_forward(x, Tensor(), -1); }, "rms_norm: eps must be >= 0");
  fused::NormResult r = fused::layer_norm_forward(x, Tensor(), Tensor(), 1e-5);
  expect_error([&] { fused::layer_norm_backward(random_tensor({2, 3}, DType::f32, 8), x, Tensor(), Tensor(), r); },
               "layer_norm_backward: dy must have shape [2, 4], found [2, 3]");
  expect_error([&] { fused::rms_norm_backward(x, x, Tensor(), fused::NormResult{}); }, "rms_norm_backward: rstd is undefined");
}

TEST(NormOps, KernelsMatchTheSlowReference) {
  for (DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? 1e-12 : 3e-5;
    Tensor x = random_tensor({3, 5, 48}, dt, 1, -3, 3), w = random_tensor({48}, dt, 2), b = random_tensor({48}, dt, 3);
    EXPECT_TRUE(all_close(fused::layer_norm_forward(x, w, b, 1e-5).y, fused::reference::layer_norm(x, w, b, 1e-5), tol, tol));
    EXPECT_TRUE(all_close(fused::layer_norm_forward(x, Tensor(), Tensor(), 1e-5).y,
                          fused::reference::layer_norm(x, Tensor(), Tensor(), 1e-5), tol, tol));
    EXPECT_TRUE(all_close(fused::rms_norm_forward(x, w, 1e-6).y, fused::reference::rms_norm(x, w, 1e-6), tol, tol));
  }
}

}  // namespace
}  // namespace mvgpt
