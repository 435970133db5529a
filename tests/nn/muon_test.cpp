// Muon against a float64 reference written from its definition, the orthogonalised update's singular
// values, an exact resume from saved state, and the usual split of a model's parameters.
#include <mvgpt/nn/muon.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include <mvgpt/autograd/ops.h>
#include <mvgpt/nn/embedding.h>
#include <mvgpt/nn/layer_norm.h>
#include <mvgpt/nn/linear.h>
#include "nn/temp_dir.h"
#include "nn/test_util.h"

namespace mvgpt::nn {
namespace {

using testing::expect_close;
using testing::vals;

// Row-major (r, c) matrices in double.
struct Mat {
  int64_t r, c;
  std::vector<double> v;
  double& at(int64_t i, int64_t j) { return v[size_t(i * c + j)]; }
  double at(int64_t i, int64_t j) const { return v[size_t(i * c + j)]; }
};
Mat mm(const Mat& a, const Mat& b) {
  Mat o{a.r, b.c, std::vector<double>(size_t(a.r * b.c))};
  for (int64_t i = 0; i < a.r; ++i)
    for (int64_t j = 0; j < b.c; ++j) {
      double s = 0;
      for (int64_t k = 0; k < a.c; ++k) s += a.at(i, k) * b.at(k, j);
      o.at(i, j) = s;
    }
  return o;
}
Mat tr(const Mat& a) {
  Mat o{a.c, a.r, std::vector<double>(a.v.size())};
  for (int64_t i = 0; i < a.r; ++i)
    for (int64_t j = 0; j < a.c; ++j) o.at(j, i) = a.at(i, j);
  return o;
}
Mat lin(double x, const Mat& a, double y, const Mat& b) {  // x a + y b
  Mat o = a;
  for (size_t i = 0; i < o.v.size(); ++i) o.v[i] = x * a.v[i] + y * b.v[i];
  return o;
}

// The quintic Newton-Schulz iteration of the definition, in double; each step's (a, b, c) from
// newton_schulz_step (whose table is checked against the paper's figures below).
Mat newton_schulz_reference(Mat g, const MuonOptions& o) {
  const bool tall = g.r > g.c;
  if (tall) g = tr(g);
  double n = 0;
  for (double x : g.v) n += x * x;
  n = o.coefficients == MuonOptions::Coefficients::jordan ? std::max(std::sqrt(n), o.eps) : 1.02 * std::sqrt(n) + o.eps;
  for (double& x : g.v) x /= n;
  for (int k = 0; k < o.ns_steps; ++k) {
    const auto [ka, kb, kc] = newton_schulz_step(o, k);
    Mat a = mm(g, tr(g));
    Mat b = lin(kb, a, kc, mm(a, a));
    g = lin(ka, g, 1.0, mm(b, g));
  }
  return tall ? tr(g) : g;
}

using Coefficients = MuonOptions::Coefficients;

Tensor leaf(const Shape& shape, uint64_t seed) {
  Tensor t = testing::randn(shape, seed, DType::f64);
  t.requires_grad_();
  return t;
}

std::vector<ParamGroup> one_group(std::vector<Tensor> params) { return {ParamGroup{.params = std::move(params)}}; }

TEST(Muon, StepsMatchAFloat64ReferenceForWideAndTallMatrices) {
  for (auto [coefficients, steps] : {std::pair{Coefficients::jordan, 5}, {Coefficients::polar_express, 5},
                                     {Coefficients::polar_express, 3}, {Coefficients::jordan, 2}})
  for (Shape shape : {Shape{3, 5}, Shape{6, 4}}) {
    SCOPED_TRACE(to_string(shape) + " " + to_string(coefficients) + " " + std::to_string(steps));
    const MuonOptions o{.lr = 0.05, .weight_decay = 0.1, .ns_steps = steps, .coefficients = coefficients};
    Tensor w = leaf(shape, 1);
    Muon opt(one_group({w}), {}, o);
    Mat want{shape[0], shape[1], vals(w)}, buf{shape[0], shape[1], std::vector<double>(size_t(w.numel()))};
    for (int step = 0; step < 3; ++step) {
      Tensor g = testing::randn(shape, 10 + step, DType::f64);
      w.set_grad(g);
      opt.step();
      // The definition (torch.optim.Muon's arithmetic).
      Mat gm{shape[0], shape[1], vals(g)};
      buf = lin(o.momentum, buf, 1 - o.momentum, gm);
      Mat u = lin(1 - o.momentum, gm, o.momentum, buf);  // Nesterov
      Mat upd = newton_schulz_reference(u, o);
      const double scale = std::sqrt(std::max(1.0, double(shape[0]) / double(shape[1])));
      want = lin(1 - o.lr * o.weight_decay, want, -o.lr * scale, upd);
      expect_close(w, want.v, 1e-12, "step " + std::to_string(step));
    }
  }
}

// Matrices of one shape are orthogonalised together (batched products): the same updates as one by one.
TEST(Muon, MatricesOfOneShapeUpdateAsTheyWouldAlone) {
  std::vector<Tensor> together, alone;
  for (int k = 0; k < 4; ++k) {
    const Shape shape = k < 3 ? Shape{4, 6} : Shape{6, 4};
    together.push_back(leaf(shape, 30 + k));
    alone.push_back(leaf(shape, 30 + k));
  }
  Muon all(one_group(together), {});
  std::vector<std::unique_ptr<Muon>> each;
  for (const Tensor& p : alone) each.push_back(std::make_unique<Muon>(one_group({p}), std::vector<ParamGroup>{}));
  for (int step = 0; step < 2; ++step) {
    for (int k = 0; k < 4; ++k) {
      Tensor g = testing::randn(together[size_t(k)].shape(), 40 + 4 * step + k, DType::f64);
      together[size_t(k)].set_grad(g);
      alone[size_t(k)].set_grad(g);
      each[size_t(k)]->step();
    }
    all.step();
  }
  for (int k = 0; k < 4; ++k) expect_close(together[size_t(k)], vals(alone[size_t(k)]), 1e-13, std::to_string(k));
}

// Eigenvalues of a symmetric matrix (cyclic Jacobi), for the singular values of the update.
std::vector<double> symmetric_eigenvalues(Mat a) {
  const int64_t n = a.r;
  for (int sweep = 0; sweep < 60; ++sweep)
    for (int64_t p = 0; p < n; ++p)
      for (int64_t q = p + 1; q < n; ++q) {
        if (std::abs(a.at(p, q)) < 1e-15) continue;
        const double theta = 0.5 * std::atan2(2 * a.at(p, q), a.at(q, q) - a.at(p, p));
        const double c = std::cos(theta), s = std::sin(theta);
        for (int64_t k = 0; k < n; ++k) {  // A <- A J (columns p, q)
          const double akp = a.at(k, p), akq = a.at(k, q);
          a.at(k, p) = c * akp - s * akq;
          a.at(k, q) = s * akp + c * akq;
        }
        for (int64_t k = 0; k < n; ++k) {  // A <- J^T A (rows p, q)
          const double apk = a.at(p, k), aqk = a.at(q, k);
          a.at(p, k) = c * apk - s * aqk;
          a.at(q, k) = s * apk + c * aqk;
        }
      }
  std::vector<double> e;
  for (int64_t i = 0; i < n; ++i) e.push_back(a.at(i, i));
  return e;
}

TEST(Muon, TheOrthogonalisedUpdateHasSingularValuesNearOne) {
  // A random gradient, and one whose rows span two orders of magnitude (condition number ~ 300).
  Tensor g = testing::randn({12, 40}, 3, DType::f64);
  Tensor rows = Tensor::from_vector<double>({0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3}, Shape{12, 1});
  for (const Tensor& grad : {g, mul(g, rows)}) {
    for (bool tall : {false, true}) {
      Tensor o = newton_schulz(tall ? contiguous(transpose(grad, 0, 1)) : grad);
      Mat m{12, 40, vals(contiguous(tall ? transpose(o, 0, 1) : o))};
      for (double e : symmetric_eigenvalues(mm(m, tr(m)))) {
        // The quintic coefficients trade exactness for speed: 5 iterations put every singular value
        // in about [0.7, 1.2] (modded-nanogpt), not at 1.
        const double sv = std::sqrt(std::max(e, 0.0));
        EXPECT_GT(sv, 0.6);
        EXPECT_LT(sv, 1.25);
      }
    }
  }
}

// The spectrum after `steps` iterations: each singular value of newton_schulz(grad) (12 x 40, both ways up).
std::vector<double> singular_values_after(const Tensor& grad, const MuonOptions& o, bool tall) {
  Tensor out = newton_schulz(tall ? contiguous(transpose(grad, 0, 1)) : grad, o);
  Mat m{12, 40, vals(contiguous(tall ? transpose(out, 0, 1) : out))};
  std::vector<double> svs;
  for (double e : symmetric_eigenvalues(mm(m, tr(m)))) svs.push_back(std::sqrt(std::max(e, 0.0)));
  return svs;
}

TEST(Muon, PolarExpressCoefficientsAreThePapersAndReachOneInFewerSteps) {
  const MuonOptions pe{.coefficients = Coefficients::polar_express};
  // Amsel et al.'s first and last (a, b, c) for 5 steps; past them the last repeats.
  EXPECT_EQ(newton_schulz_step(pe, 0), (std::array<double, 3>{8.156554524902461, -22.48329292557795, 15.878769915207462}));
  EXPECT_EQ(newton_schulz_step(pe, 4), (std::array<double, 3>{2.3465413258596377, -1.7097828382687081, 0.42323551169305323}));
  EXPECT_EQ(newton_schulz_step(pe, 9), newton_schulz_step(pe, 4));
  EXPECT_EQ(newton_schulz_step(MuonOptions{}, 3), (std::array<double, 3>{3.4445, -4.7750, 2.0315}));
  EXPECT_EQ(muon_coefficients_from_string(to_string(Coefficients::polar_express)), Coefficients::polar_express);
  EXPECT_THROW(muon_coefficients_from_string("polar"), std::invalid_argument);

  // A gradient whose rows span two orders of magnitude: after 5 steps Polar Express holds every
  // singular value near 1, and after 3 steps it has lifted the smallest nearly twice as far as Jordan's.
  Tensor rows = Tensor::from_vector<double>({0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3}, Shape{12, 1});
  Tensor grad = mul(testing::randn({12, 40}, 3, DType::f64), rows);
  auto smallest = [](const std::vector<double>& svs) { return *std::min_element(svs.begin(), svs.end()); };
  for (bool tall : {false, true}) {
    SCOPED_TRACE(tall ? "tall" : "wide");
    for (double sv : singular_values_after(grad, pe, tall)) {
      EXPECT_GT(sv, 0.8);
      EXPECT_LT(sv, 1.2);
    }
    const double pe3 = smallest(singular_values_after(grad, {.ns_steps = 3, .coefficients = Coefficients::polar_express}, tall));
    const double jordan3 = smallest(singular_values_after(grad, {.ns_steps = 3}, tall));
    EXPECT_GT(pe3, 1.5 * jordan3) << "Polar Express " << pe3 << ", Jordan " << jordan3;
  }
}

// NOTE [ Newton-Schulz on the Gram matrix ]: the same polynomial, fewer products for wide matrices.
TEST(Muon, TheGramIterationEqualsTheUsualOne) {
  EXPECT_TRUE(use_gram_iteration(384, 1536, 5));  // the series' MLP matrices
  EXPECT_TRUE(use_gram_iteration(384, 1152, 3));  // its fused QKV
  EXPECT_FALSE(use_gram_iteration(384, 384, 5));  // square: the usual way is cheaper
  EXPECT_FALSE(use_gram_iteration(384, 1536, 1));
  for (auto [coefficients, steps] : {std::pair{Coefficients::jordan, 5}, {Coefficients::polar_express, 5},
                                     {Coefficients::polar_express, 3}, {Coefficients::jordan, 2}}) {
    SCOPED_TRACE(to_string(coefficients) + " " + std::to_string(steps));
    const MuonOptions o{.ns_steps = steps, .coefficients = coefficients};
    // Rows over two orders of magnitude, as a gradient's spectrum spreads.
    Tensor rows = Tensor::from_vector<double>({0.01, 0.1, 0.3, 1, 3}, Shape{5, 1});
    Tensor g = mul(testing::randn({2, 5, 16}, 21, DType::f64), rows);  // a batch of two wide matrices
    const Tensor got = newton_schulz(g, o);
    for (int64_t k = 0; k < 2; ++k) {
      const Tensor gk = contiguous(select(g, 0, k));
      const Mat want = newton_schulz_reference(Mat{5, 16, vals(gk)}, o);
      expect_close(contiguous(select(got, 0, k)), want.v, 1e-11, "float64, matrix " + std::to_string(k));
      // float32: R holds squared singular values, yet the result stays close to float64's.
      const Tensor f32 = newton_schulz(to(gk, DType::f32), o);
      expect_close(to(f32, DType::f64), want.v, 2e-4, "float32, matrix " + std::to_string(k));
    }
  }
}

TEST(Muon, ResumesBitForBitFromSavedState) {
  testing::TempDir tmp;
  auto make = [](Tensor& w, Tensor& b) {
    w = leaf({4, 6}, 7);
    b = leaf({4}, 8);
    w.set_name("w");
    b.set_name("b");
  };
  auto train = [](Muon& opt, Tensor& w, Tensor& b, int from, int to) {
    for (int s = from; s < to; ++s) {
      w.set_grad(testing::randn({4, 6}, 100 + s, DType::f64));
      b.set_grad(testing::randn({4}, 200 + s, DType::f64));
      opt.step();
    }
  };
  Tensor w1, b1, w2, b2;
  make(w1, b1);
  make(w2, b2);
  Muon whole(one_group({w1}), one_group({b1}));
  train(whole, w1, b1, 0, 4);
  {
    Muon first(one_group({w2}), one_group({b2}));
    train(first, w2, b2, 0, 2);
    first.save(tmp.file("opt.safetensors"));
  }
  Muon second(one_group({w2}), one_group({b2}));
  second.load(tmp.file("opt.safetensors"));
  EXPECT_EQ(second.step_count(), 2);
  train(second, w2, b2, 2, 4);
  EXPECT_EQ(vals(w1), vals(w2));
  EXPECT_EQ(vals(b1), vals(b2));
  // Its state names say which slot each tensor is: Muon's momentum, AdamW's moments.
  std::vector<std::string> names;
  for (const auto& [n, t] : second.state_tensors()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"w.momentum_buffer", "b.exp_avg", "b.exp_avg_sq"}));
}

TEST(Muon, RefusesAVectorAsAMatrixAndSplitsAModelTheUsualWay) {
  Tensor v = leaf({5}, 1);
  EXPECT_THROW(Muon(one_group({v}), {}), std::invalid_argument);

  Module model;
  model.register_module("embed", std::make_shared<Embedding>(10, 8));
  model.register_module("fc", std::make_shared<Linear>(8, 16));
  model.register_module("norm", std::make_shared<LayerNorm>(16));
  model.register_module("lm_head", std::make_shared<Linear>(16, 10, false));
  MuonSplit split = muon_split(model, 0.01, 0.1);
  ASSERT_EQ(split.matrices.size(), 1u);
  ASSERT_EQ(split.matrices[0].params.size(), 1u);
  EXPECT_EQ(split.matrices[0].params[0].name(), "fc.weight");
  std::vector<std::string> decayed, plain;
  for (const Tensor& p : split.others[0].params) decayed.push_back(p.name());
  for (const Tensor& p : split.others[1].params) plain.push_back(p.name());
  EXPECT_EQ(decayed, (std::vector<std::string>{"embed.weight", "lm_head.weight"}));
  EXPECT_EQ(plain, (std::vector<std::string>{"fc.bias", "norm.weight", "norm.bias"}));
  // The AdamW groups' rate follows the Muon rate in proportion.
  Muon opt(split.matrices, split.others, {.lr = 0.02, .adamw = {.lr = 0.004}});
  opt.set_lr(0.01);
  EXPECT_DOUBLE_EQ(opt.groups()[1].lr_scale * opt.lr(), 0.002);
}

}  // namespace
}  // namespace mvgpt::nn
