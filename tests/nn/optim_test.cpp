#include <mvgpt/nn/optim.h>

#include <gtest/gtest.h>

#include <cmath>

#include <mvgpt/autograd/ops.h>
#include <mvgpt/autograd/precision.h>
#include <mvgpt/util/profile.h>
#include <mvgpt/nn/linear.h>
#include <mvgpt/nn/lr_schedule.h>
#include <mvgpt/nn/safetensors.h>
#include "nn/temp_dir.h"
#include "nn/test_util.h"

namespace mvgpt::nn {
namespace {

using testing::expect_close;
using testing::vals;

Tensor param(std::vector<double> v, Shape shape, const std::string& name) {
  Tensor t = Tensor::from_vector<double>(v, shape);
  t.requires_grad_();
  t.set_name(name);
  return t;
}

// Gradients and learning rates of the three steps below.
const std::vector<std::vector<double>> kGradW = {{0.1, -0.2, 0.3, 0.0}, {-0.5, 0.4, 0.0, 2.0}, {1.0, 1.0, -1.0, 1e-3}};
const std::vector<std::vector<double>> kGradB = {{0.5, 0.0}, {-0.5, 3.0}, {0.1, -0.1}};
const double kLr[] = {0.01, 0.01, 0.005};

TEST(AdamW, MatchesTorchAndHandComputedSteps) {
  Tensor w = param({0.5, -1.0, 2.0, 0.125}, {2, 2}, "w"), b = param({0.25, -0.75}, {2}, "b");
  AdamW opt({{{w}, 0.1}, {{b}, 0.0}}, {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8});

  // Produced once with /usr/bin/python3 (torch 1.13, Debian python3-torch), float64:
  //   torch.optim.AdamW([{"params": [w], "weight_decay": 0.1}, {"params": [b], "weight_decay": 0.0}],
  //                     lr=0.01, betas=(0.9, 0.95), eps=1e-8, foreach=False)
  // with the gradients kGradW / kGradB and lr set to kLr[s] before step s; printed with repr().
  const std::vector<std::vector<double>> torch_w = {
      {0.4895000009999999, -0.9890000004999999, 1.9880000003333334, 0.124875},
      {0.49492582951048825, -0.9916447398902383, 1.979225523188992, 0.11740052502827951},
      {0.49291723261751047, -0.9945737856437645, 1.9805044761880952, 0.11446286633858749}};
  const std::vector<std::vector<double>> torch_b = {{0.2400000002, -0.75},
                                                    {0.24052631597894739, -0.7573495999888258},
                                                    {0.24027715027147178, -0.760118772444494}};

  // The textbook update in double, written independently of the kernel.
  struct Naive {
    std::vector<double> p, m, v;
    void step(const std::vector<double>& g, double lr, double wd, int t) {
      for (size_t i = 0; i < p.size(); ++i) {
        p[i] -= lr * wd * p[i];
        m[i] = 0.9 * m[i] + 0.1 * g[i];
        v[i] = 0.95 * v[i] + 0.05 * g[i] * g[i];
        double mhat = m[i] / (1 - std::pow(0.9, t)), vhat = v[i] / (1 - std::pow(0.95, t));
        p[i] -= lr * mhat / (std::sqrt(vhat) + 1e-8);
      }
    }
  } nw{vals(w), std::vector<double>(4), std::vector<double>(4)}, nb{vals(b), std::vector<double>(2), std::vector<double>(2)};

  for (int s = 0; s < 3; ++s) {
    opt.set_lr(kLr[s]);
    w.set_grad(Tensor::from_vector<double>(kGradW[size_t(s)], {2, 2}));
    b.set_grad(Tensor::from_vector<double>(kGradB[size_t(s)], {2}));
    opt.step();
    nw.step(kGradW[size_t(s)], kLr[s], 0.1, s + 1);
    nb.step(kGradB[size_t(s)], kLr[s], 0.0, s + 1);
    expect_close(w, torch_w[size_t(s)], 1e-14, "torch w step " + std::to_string(s + 1));
    expect_close(b, torch_b[size_t(s)], 1e-14, "torch b step " + std::to_string(s + 1));
    expect_close(w, nw.p, 1e-12, "naive w");
    expect_close(b, nb.p, 1e-12, "naive b");
  }
  EXPECT_EQ(opt.step_count(), 3);
  auto state = opt.state_tensors();
  ASSERT_EQ(state.size(), 4u);
  EXPECT_EQ(state[0].first, "w.exp_avg");
  EXPECT_EQ(state[3].first, "b.exp_avg_sq");
  expect_close(state[0].second, nw.m, 1e-12);
  expect_close(state[1].second, nw.v, 1e-12);
}

TEST(AdamW, SkipsParametersWithoutGradientAndChecksArguments) {
  Tensor a = param({1, 2}, {2}, "a"), b = param({3}, {1}, "b");
  AdamW opt(std::vector<Tensor>{a, b}, {.lr = 0.1, .weight_decay = 0.5});
  EXPECT_EQ(*opt.groups()[0].weight_decay, 0.5);
  a.set_grad(ops::ones({2}, DType::f64));
  opt.step();
  EXPECT_EQ(vals(b), std::vector<double>{3});  // no gradient: untouched, no state
  EXPECT_EQ(opt.state_tensors().size(), 2u);
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
  EXPECT_THROW(AdamW(std::vector<Tensor>{a, a}), std::invalid_argument);  // given twice
  Tensor plain = ops::ones({2});
  EXPECT_THROW(AdamW(std::vector<Tensor>{plain}), std::invalid_argument);  // does not require grad
  EXPECT_THROW(AdamW(std::vector<Tensor>{a}, {.beta1 = 1.0}), std::invalid_argument);
  EXPECT_THROW(opt.set_lr(-1), std::invalid_argument);
  EXPECT_THROW(opt.set_lr(NAN), std::invalid_argument);
}

TEST(AdamW, WeightDecayGroupsExcludeVectors) {
  Linear lin(3, 2);
  auto groups = weight_decay_groups(lin.named_parameters(), 0.1);
  ASSERT_EQ(groups.size(), 2u);
  ASSERT_EQ(groups[0].params.size(), 1u);
  EXPECT_TRUE(groups[0].params[0].same(lin.weight));
  EXPECT_EQ(*groups[0].weight_decay, 0.1);
  EXPECT_TRUE(groups[1].params[0].same(lin.bias));
  EXPECT_EQ(*groups[1].weight_decay, 0.0);
  auto custom = weight_decay_groups(lin.named_parameters(), 0.1, [](const std::string& n, const Tensor&) {
    return n == "bias";
  });
  EXPECT_TRUE(custom[0].params[0].same(lin.bias));
}

// Per-group rates: the chosen parameters move to copies of their groups at lr_scale times the rate,
// with the same weight decay, and update as an optimizer at that rate would.
TEST(AdamW, ParametersGivenTheirOwnRateStepAsAtThatRate) {
  Tensor w = param({0.5, -0.3, 0.2, 0.9}, {2, 2}, "w"), b = param({0.1, -0.1}, {2}, "b");
  Tensor w_alone = param(vals(w), {2, 2}, "w"), b_alone = param(vals(b), {2}, "b");
  auto groups = with_lr_scale(weight_decay_groups({{"w", w}, {"b", b}}, 0.1), {w.impl()}, 2.5);
  ASSERT_EQ(groups.size(), 2u);  // the decayed group, left empty, is dropped
  EXPECT_TRUE(groups[0].params[0].same(b));
  EXPECT_EQ(*groups[0].weight_decay, 0.0);
  EXPECT_EQ(groups[0].lr_scale, 1.0);
  ASSERT_EQ(groups[1].params.size(), 1u);
  EXPECT_TRUE(groups[1].params[0].same(w));
  EXPECT_EQ(*groups[1].weight_decay, 0.1);
  EXPECT_EQ(groups[1].lr_scale, 2.5);

  AdamW both(groups, {.lr = 0.01});
  AdamW w_only({ParamGroup{.params = {w_alone}, .weight_decay = 0.1}}, {.lr = 0.025});
  AdamW b_only({ParamGroup{.params = {b_alone}, .weight_decay = 0.0}}, {.lr = 0.01});
  for (int step = 0; step < 3; ++step) {
    for (Tensor* t : {&w, &w_alone}) t->set_grad(Tensor::from_vector<double>(kGradW[size_t(step)], Shape{2, 2}));
    for (Tensor* t : {&b, &b_alone}) t->set_grad(Tensor::from_vector<double>(kGradB[size_t(step)], Shape{2}));
    both.step();
    w_only.step();
    b_only.step();
  }
  expect_close(w, vals(w_alone), 1e-15, "w at 2.5 x the rate");
  expect_close(b, vals(b_alone), 1e-15, "b at the rate");
  EXPECT_NE(vals(w), vals(param({0.5, -0.3, 0.2, 0.9}, {2, 2}, "w")));  // it moved
}

TEST(AdamW, FollowsTheModelThroughTo) {
  Linear lin(2, 2);
  AdamW opt(lin.parameters(), {.lr = 0.1});
  backward(sum(lin(ops::ones({1, 2}))));
  opt.step();
  lin.to(DType::f64);  // after the optimizer was made and has state
  lin.zero_grad();
  backward(sum(lin(ops::ones({1, 2}, DType::f64))));
  opt.step();
  for (const auto& [n, t] : opt.state_tensors()) EXPECT_EQ(t.dtype(), DType::f64) << n;
}

// NOTE [ Weights rounded by the optimizer ]: under bf16 products AdamW writes the bfloat16 copy of a
// weight that a product multiplied, in its own pass, and the next forward multiplies it as it is: the
// bits of rounding the updated weight, one conversion fewer a step, and the same losses, bit for bit,
// as a model whose copies are made again by the forward (its weight's version bumped after each step).
TEST(AdamW, WritesTheBf16CopiesOfWeightsTheProductsMultiply) {
  const PrecisionGuard bf16(Precision::bf16);
  const Tensor x = ops::reshape(ops::mul(ops::arange(0, 60, 1, DType::f32), 0.05), {6, 10});
  std::vector<double> losses[2];
  int64_t conversions[2] = {0, 0};
  for (int remake = 0; remake < 2; ++remake) {
    Linear lin(10, 7);
    for (const Tensor& p : lin.parameters()) {
      std::vector<float> w(size_t(p.numel()));
      for (size_t i = 0; i < w.size(); ++i) w[i] = float(0.3 * std::cos(double(i)));
      const NoGradGuard no_grad;
      ops::copy_(p, Tensor::from_vector(w, p.shape()));
    }
    AdamW opt(lin.parameters(), {.lr = 0.05});
    for (int step = 0; step < 4; ++step) {
      opt.zero_grad();
      profile::Recording rec;
      Tensor loss = sum(mul(lin(x), lin(x)));
      const profile::Report report = rec.stop();
      for (const profile::Row& row : report.rows) conversions[remake] += row.op == "convert" && step > 0 ? row.calls : 0;
      losses[remake].push_back(loss.item<double>());
      backward(loss);
      opt.step();
      if (remake) lin.weight.bump_version();  // the copy AdamW wrote is not the weight's any more
    }
    if (!remake) {
      // The copy the next product takes is the updated weight, rounded; the one a graph may still
      // hold is left as it was.
      const Tensor old_copy = autograd::detail::product_operand(lin.weight);
      const std::vector<double> old_bits = vals(old_copy);
      backward(sum(lin(x)));
      opt.step();
      EXPECT_EQ(vals(old_copy), old_bits);
      const Tensor copy = autograd::detail::product_operand(lin.weight);
      EXPECT_NE(copy.raw_data(), old_copy.raw_data());
      const NoGradGuard no_grad;  // raw ops on the weight
      EXPECT_EQ(vals(copy), vals(ops::to(ops::to(lin.weight, DType::bf16), DType::f32)));
    }
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_EQ(conversions[0], conversions[1] - 3) << "AdamW's copies were made again (one a step after the first)";
}

TEST(SGD, MatchesTorch) {
  // From torch.optim.SGD (float64, /usr/bin/python3, torch 1.13) with the same gradients.
  const std::vector<std::vector<double>> grads = {{0.5, -1.0}, {0.25, 0.5}, {-1.0, 0.0}};
  {
    // SGD([p], lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)
    const std::vector<std::vector<double>> want = {
        {0.949, -1.898}, {0.8797459, -1.8494917999999998}, {0.90662543869, -1.80416987738}};
    Tensor p = param({1, -2}, {2}, "p");
    SGD opt(std::vector<Tensor>{p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
    for (size_t s = 0; s < 3; ++s) {
      p.set_grad(Tensor::from_vector<double>(grads[s]));
      opt.step();
      expect_close(p, want[s], 1e-14, "momentum step " + std::to_string(s + 1));
    }
  }
  {
    // SGD([p], lr=0.1, momentum=0.9, nesterov=True)
    const std::vector<std::vector<double>> want = {{0.905, -1.81}, {0.8170000000000001, -1.824}, {0.9503, -1.7916}};
    Tensor p = param({1, -2}, {2}, "p");
    SGD opt(std::vector<Tensor>{p}, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
    for (size_t s = 0; s < 3; ++s) {
      p.set_grad(Tensor::from_vector<double>(grads[s]));
      opt.step();
      expect_close(p, want[s], 1e-14, "nesterov step " + std::to_string(s + 1));
    }
  }
  Tensor p = param({1}, {1}, "p");
  SGD plain(std::vector<Tensor>{p}, {.lr = 0.5});
  p.set_grad(Tensor::from_vector<double>({2.0}, {1}));
  plain.step();
  EXPECT_EQ(vals(p), std::vector<double>{0.0});
  EXPECT_TRUE(plain.state_tensors().empty());  // no momentum, no state
  EXPECT_THROW(SGD(std::vector<Tensor>{p}, {.nesterov = true}), std::invalid_argument);
}

TEST(ClipGradNorm, ScalesToMaxNormAndReturnsTheNorm) {
  Tensor a = param({0, 0, 0}, {3}, "a"), c = param({0, 0, 0, 0}, {2, 2}, "c"), none = param({0}, {1}, "none");
  a.set_grad(Tensor::from_vector<float>({3, 4, 0}));
  c.set_grad(Tensor::from_vector<float>({1, -2, 0.5, 12}, {2, 2}));
  double norm = clip_grad_norm_({a, c, none}, 1.0);
  // torch.nn.utils.clip_grad_norm_ gives 13.200379371643066 (float32) and these gradients.
  EXPECT_NEAR(norm, std::sqrt(9 + 16 + 1 + 4 + 0.25 + 144), 1e-12);
  expect_close(a.grad(), {0.22726619243621826, 0.3030215799808502, 0.0}, 1e-6);
  expect_close(c.grad(), {0.07575539499521255, -0.1515107899904251, 0.03787769749760628, 0.909064769744873}, 1e-6);
  // Below the limit: untouched.
  double small = clip_grad_norm_({a, c}, 10.0);
  EXPECT_NEAR(small, 1.0, 1e-6);
  expect_close(a.grad(), {0.22726619243621826, 0.3030215799808502, 0.0}, 1e-6);
  a.set_grad(Tensor::from_vector<float>({INFINITY, 0, 0}));
  EXPECT_TRUE(std::isinf(clip_grad_norm_({a}, 1.0)));
  EXPECT_THROW(clip_grad_norm_({a}, 0.0), std::invalid_argument);
}

// Warm-up-stable-decay: the peak holds, then a straight line to the floor over the last part.
TEST(WarmupDecaySchedule, StableThenLinearDecayOverTheLastFraction) {
  const WarmupDecaySchedule s{.max_lr = 1.0, .min_lr = 0.0, .warmup_steps = 2, .decay_steps = 12,
                              .shape = DecayShape::linear, .decay_fraction = 0.4};
  // Warm-up: steps 0, 1; stable: 2..7; decay over [8, 12).
  EXPECT_DOUBLE_EQ(s(0), 0.5);
  EXPECT_DOUBLE_EQ(s(1), 1.0);
  for (int64_t step = 2; step <= 8; ++step) EXPECT_DOUBLE_EQ(s(step), 1.0) << step;
  EXPECT_DOUBLE_EQ(s(9), 0.75);
  EXPECT_DOUBLE_EQ(s(10), 0.5);
  EXPECT_DOUBLE_EQ(s(11), 0.25);
  EXPECT_DOUBLE_EQ(s(12), 0.0);
  EXPECT_DOUBLE_EQ(s(100), 0.0);
  // Cosine over the whole span is the fraction 1 (nanoGPT's, the default).
  const WarmupDecaySchedule cos{.max_lr = 1.0, .min_lr = 0.0, .warmup_steps = 0, .decay_steps = 10};
  EXPECT_NEAR(cos(5), 0.5, 1e-15);
  EXPECT_THROW((WarmupDecaySchedule{.decay_steps = 4, .decay_fraction = 0}(0)), std::invalid_argument);
}

TEST(WarmupCosineSchedule, WarmsUpThenDecaysToTheFloor) {
  WarmupCosineSchedule s{.max_lr = 1.0, .min_lr = 0.1, .warmup_steps = 4, .decay_steps = 14};
  EXPECT_DOUBLE_EQ(s(0), 0.25);
  EXPECT_DOUBLE_EQ(s(3), 1.0);
  EXPECT_DOUBLE_EQ(s(4), 1.0);                            // start of the decay
  EXPECT_NEAR(s(9), 0.1 + 0.9 * 0.5, 1e-15);              // half way
  EXPECT_NEAR(s(6), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.2)), 1e-15);
  EXPECT_DOUBLE_EQ(s(14), 0.1);
  EXPECT_DOUBLE_EQ(s(1000), 0.1);
  for (int64_t t = 4; t < 14; ++t) EXPECT_GT(s(t), s(t + 1));  // monotone decay
  WarmupCosineSchedule none{.max_lr = 2.0, .min_lr = 0.0, .warmup_steps = 0, .decay_steps = 10};
  EXPECT_DOUBLE_EQ(none(0), 2.0);
  EXPECT_THROW(s(-1), std::invalid_argument);
  EXPECT_THROW((WarmupCosineSchedule{.warmup_steps = 5, .decay_steps = 2}(0)), std::invalid_argument);
}

// A few training steps of a small model; resuming from saved model + optimizer state after step
// `stop` must give bit-identical parameters to training straight through.
TEST(OptimizerState, SaveLoadResumesExactly) {
  testing::TempDir dir;
  auto make = [] {
    Generator gen(77);
    return std::make_shared<Linear>(4, 3, true, Init{.gen = &gen});
  };
  Tensor x = testing::randn({5, 4}, 1);
  auto train_step = [&](Linear& m, AdamW& opt, int step) {
    opt.set_lr(WarmupCosineSchedule{.max_lr = 0.1, .min_lr = 0.01, .warmup_steps = 2, .decay_steps = 6}(step));
    m.zero_grad();
    backward(sum(square(m(x))));
    opt.step();
  };
  auto straight = make();
  AdamW opt1(weight_decay_groups(straight->named_parameters(), 0.1), {.lr = 0.1});
  for (int s = 0; s < 5; ++s) train_step(*straight, opt1, s);

  auto first = make();
  AdamW opt2(weight_decay_groups(first->named_parameters(), 0.1), {.lr = 0.1});
  for (int s = 0; s < 3; ++s) train_step(*first, opt2, s);
  safetensors::save(dir.file("model.safetensors"), first->state_dict());
  opt2.save(dir.file("optim.safetensors"));

  auto resumed = make();
  AdamW opt3(weight_decay_groups(resumed->named_parameters(), 0.1), {.lr = 0.1});
  resumed->load_state_dict(safetensors::load(dir.file("model.safetensors")).tensors);
  opt3.load(dir.file("optim.safetensors"));
  EXPECT_EQ(opt3.step_count(), 3);
  for (int s = 3; s < 5; ++s) train_step(*resumed, opt3, s);
  EXPECT_EQ(vals(resumed->weight), vals(straight->weight));  // bit for bit
  EXPECT_EQ(vals(resumed->bias), vals(straight->bias));

  auto meta = safetensors::read_header(dir.file("optim.safetensors")).metadata;
  EXPECT_EQ(meta.at("optimizer"), "AdamW");
  EXPECT_EQ(meta.at("step"), "3");
}

TEST(OptimizerState, LoadRejectsMismatches) {
  testing::TempDir dir;
  Linear a(2, 3), b(3, 3);
  AdamW oa(a.parameters()), ob(b.parameters());
  backward(sum(a(ops::ones({1, 2}))));
  oa.step();
  oa.save(dir.file("a.safetensors"));
  try {
    ob.load(dir.file("a.safetensors"));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("weight.exp_avg: expected shape [3, 3], found [3, 2]"), std::string::npos)
        << e.what();
  }
  Linear c(2, 3, false);  // no bias: the file's bias state is unknown
  AdamW oc(c.parameters());
  try {
    oc.load(dir.file("a.safetensors"));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("bias.exp_avg: no parameter of that name"), std::string::npos) << e.what();
  }
  SGD sgd(a.parameters(), {.momentum = 0.9});
  EXPECT_THROW(sgd.load(dir.file("a.safetensors")), std::invalid_argument);  // AdamW state into SGD
  EXPECT_EQ(ob.step_count(), 0);  // nothing changed on failure
}


// One AdamW step of Linear(2, 3) saved to `path`; returns the file's tensors and metadata.
safetensors::File one_step_state(const std::string& path) {
  Linear a(2, 3);
  AdamW opt(a.parameters());
  backward(sum(a(ops::ones({1, 2}))));
  opt.step();
  opt.save(path);
  return safetensors::load(path, {.mmap = false});
}

std::string load_error(Optimizer& opt, const std::string& path) {
  try {
    opt.load(path);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

// A file that lost some parameters' moments would restart them at zero: the "exact resume" breaks.
TEST(OptimizerState, LoadRequiresTheStateOfEveryParameterThatHadIt) {
  testing::TempDir dir;
  safetensors::File file = one_step_state(dir.file("a.safetensors"));
  safetensors::NamedTensors kept;
  for (const auto& [n, t] : file.tensors)
    if (n.rfind("bias.", 0) != 0) kept.emplace_back(n, t);
  ASSERT_EQ(kept.size(), 2u);
  safetensors::save(dir.file("cut.safetensors"), kept, file.metadata);
  Linear b(2, 3);
  AdamW opt(b.parameters());
  const std::string e = load_error(opt, dir.file("cut.safetensors"));
  EXPECT_NE(e.find(dir.file("cut.safetensors")), std::string::npos) << e;
  EXPECT_NE(e.find("no state for 1 parameter(s): bias"), std::string::npos) << e;
  EXPECT_EQ(opt.step_count(), 0);

  // The same from a file written before save() recorded the parameters without state.
  safetensors::Metadata old_meta = file.metadata;
  old_meta.erase("without_state");
  safetensors::save(dir.file("cut-old.safetensors"), kept, old_meta);
  EXPECT_NE(load_error(opt, dir.file("cut-old.safetensors")).find("no state for 1 parameter(s): bias"), std::string::npos);
  // ... where a file with no state at all (saved before the first step) is whole.
  safetensors::save(dir.file("empty-old.safetensors"), {}, old_meta);
  opt.load(dir.file("empty-old.safetensors"));
  EXPECT_EQ(opt.step_count(), 1);
}

TEST(OptimizerState, AParameterThatNeverHadAGradientNeedsNoState) {
  testing::TempDir dir;
  Linear a(2, 3);
  Tensor frozen = param({1, 2}, {2}, "frozen");
  std::vector<Tensor> params = a.parameters();
  params.push_back(frozen);
  AdamW opt(params);
  backward(sum(a(ops::ones({1, 2}))));
  opt.step();  // `frozen` has no gradient: no state
  opt.save(dir.file("s.safetensors"));
  EXPECT_EQ(safetensors::read_header(dir.file("s.safetensors")).metadata.at("without_state"), "frozen");
  Linear b(2, 3);
  std::vector<Tensor> params_b = b.parameters();
  params_b.push_back(param({1, 2}, {2}, "frozen"));
  AdamW back(params_b);
  back.load(dir.file("s.safetensors"));
  EXPECT_EQ(back.step_count(), 1);
}

TEST(OptimizerState, LoadRefusesNonFiniteOrIntegerMoments) {
  testing::TempDir dir;
  safetensors::File file = one_step_state(dir.file("a.safetensors"));
  for (int variant = 0; variant < 2; ++variant) {
    safetensors::NamedTensors edited;
    for (const auto& [n, t] : file.tensors) {
      if (n != "weight.exp_avg_sq") {
        edited.emplace_back(n, t);
      } else if (variant == 0) {
        Tensor nan = ops::clone(t);
        nan.data<float>()[4] = NAN;
        edited.emplace_back(n, nan);
      } else {
        edited.emplace_back(n, ops::zeros(t.shape(), DType::i32));
      }
    }
    safetensors::save(dir.file("bad.safetensors"), edited, file.metadata);
    Linear b(2, 3);
    AdamW opt(b.parameters());
    const std::string e = load_error(opt, dir.file("bad.safetensors"));
    EXPECT_NE(e.find(variant == 0 ? "weight.exp_avg_sq: element 4 is not finite" : "weight.exp_avg_sq: expected a float dtype, found int32"),
              std::string::npos) << e;
  }
}

}  // namespace
}  // namespace mvgpt::nn
