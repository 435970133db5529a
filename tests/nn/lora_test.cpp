// LoRA adapters (nn/lora.h): the adapter path's gradient against finite differences, a frozen base,
// an adapter that starts as the identity, merging, and the adapter file.
#include <gtest/gtest.h>

#include <cmath>

#include <mvgpt/autograd/engine.h>
#include <mvgpt/autograd/gradcheck.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/autograd/precision.h>
#include <mvgpt/nn/lora.h>
#include <mvgpt/nn/mlp.h>
#include "nn/test_util.h"
#include "nn/temp_dir.h"
#include <mvgpt/tensor/generator.h>

namespace mvgpt::nn {
namespace {

using testing::vals;

// A two-layer model whose names look like the GPT's attention and MLP.
class Tiny : public Module {
 public:
  explicit Tiny(DType dtype) {
    Generator gen(5);  // the same weights for every Tiny, as a checkpoint loaded twice
    const Init init{.dtype = dtype, .gen = &gen, .std = 0.3};
    attn = register_module("attn", std::make_shared<Module>());
    c_attn = attn->register_module("c_attn", std::make_shared<Linear>(6, 5, true, init));
    c_proj = attn->register_module("c_proj", std::make_shared<Linear>(5, 6, true, init));
    mlp = register_module("mlp", std::make_shared<MLP>(6, 8, true, init));
  }
  Tensor forward(const Tensor& x) const override { return (*mlp)((*c_proj)((*c_attn)(x))); }
  std::shared_ptr<Module> attn;
  std::shared_ptr<Linear> c_attn, c_proj;
  std::shared_ptr<MLP> mlp;
};

double max_abs_diff(const Tensor& a, const Tensor& b) {
  double worst = 0;
  const auto va = vals(a), vb = vals(b);
  for (size_t i = 0; i < va.size(); ++i) worst = std::max(worst, std::abs(va[i] - vb[i]));
  return worst;
}

TEST(LoRA, TheAdapterPathMatchesFiniteDifferences) {
  Tiny m(DType::f64);
  add_lora(m, {.rank = 2, .alpha = 3});
  { NoGradGuard no_grad; ops::copy_(m.c_attn->lora_B->weight, testing::randn({5, 2}, 4, DType::f64)); }  // B = 0 would hide A's gradient
  { NoGradGuard no_grad; ops::copy_(m.c_proj->lora_B->weight, testing::randn({6, 2}, 5, DType::f64)); }
  std::vector<Tensor> inputs{testing::randn({3, 6}, 1, DType::f64), m.c_attn->lora_A->weight, m.c_attn->lora_B->weight,
                             m.c_proj->lora_A->weight, m.c_proj->lora_B->weight};
  auto r = autograd::gradcheck("LoRA", [&](const autograd::Inputs& in) { return m(in[0]); }, inputs);
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_GT(r.checked, 0);
}

TEST(LoRA, OnlyTheAdaptersTrainAndTheyStartAsTheIdentity) {
  Tiny m(DType::f32);
  const Tensor x = testing::randn({4, 6}, 2);
  const Tensor before = m(x);
  const NamedTensors trained = add_lora(m, {});  // attention projections by default
  std::vector<std::string> names;
  for (const auto& [n, p] : trained) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"attn.c_attn.lora_A.weight", "attn.c_attn.lora_B.weight",
                                             "attn.c_proj.lora_A.weight", "attn.c_proj.lora_B.weight"}));
  EXPECT_EQ(max_abs_diff(m(x), before), 0.0) << "B = 0: the adapted model is the model";
  backward(sum(m(x)));
  for (const auto& [n, p] : m.named_parameters()) {
    const bool lora = n.find("lora_") != std::string::npos;
    EXPECT_EQ(p.requires_grad(), lora) << n;
    EXPECT_EQ(p.grad().defined(), lora) << n << ": the base gets no gradient";
  }
  EXPECT_THROW(add_lora(m, {}), std::invalid_argument);  // already adapted
  Tiny other(DType::f32);
  EXPECT_THROW(add_lora(other, {.targets = {"nothing"}}), std::invalid_argument);
  EXPECT_THROW(add_lora(other, {.targets = {"c_attn", "c_fcc"}}), std::invalid_argument);  // one typo is enough
  add_lora(other, {.targets = {"c_fc", "mlp.c_proj"}});  // the MLP's, not attention's c_proj
  EXPECT_TRUE(other.mlp->c_fc->lora_A && other.mlp->c_proj->lora_A);
  EXPECT_FALSE(other.c_proj->lora_A);
}

// A fresh adapter on either MLP layer takes the MLP off its one-op road (linear_gelu_linear); its
// hidden activation is then made as that op makes it, so under bf16 products too (the pre-activation
// and the GELU kept in bfloat16: NOTE [ The MLP's activations in bf16 ]) the adapted model is the
// model.
TEST(LoRA, AFreshMlpAdapterIsTheIdentityUnderBf16ProductsToo) {
  using autograd::Precision;
  const Tensor x = testing::randn({40, 6}, 7);
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    autograd::PrecisionGuard guard(p);
    for (const std::vector<std::string>& targets :
         std::vector<std::vector<std::string>>{{"c_fc"}, {"mlp.c_proj"}, {"c_fc", "mlp.c_proj"}}) {
      Tiny plain(DType::f32), adapted(DType::f32);
      add_lora(adapted, {.targets = targets});
      EXPECT_EQ(max_abs_diff(adapted(x), plain(x)), 0.0)
          << (p == Precision::bf16 ? "bf16" : "fp32") << ", adapters on " << targets.size() << " layer(s)";
    }
  }
}

TEST(LoRA, MergedEqualsUnmergedAndLeavesAnOrdinaryModel) {
  Tiny m(DType::f32);
  add_lora(m, {.rank = 3, .alpha = 6, .targets = {"c_attn", "attn.c_proj", "c_fc"}});
  // A trained adapter's size: updates of about a tenth of the weights (outputs of order one, so float32
  // rounding stays near 1e-7 of them).
  for (const auto& [n, p] : lora_parameters(m))
    { NoGradGuard no_grad; ops::copy_(p, ops::mul(testing::randn(p.shape(), uint64_t(n.size()), DType::f32), 0.1)); }
  const Tensor x = testing::randn({5, 6}, 3);
  const Tensor adapted = m(x);
  merge_lora(m);
  EXPECT_LT(max_abs_diff(m(x), adapted), 1e-5);
  EXPECT_TRUE(lora_parameters(m).empty());
  for (const auto& [n, p] : m.named_parameters()) {
    EXPECT_EQ(n.find("lora_"), std::string::npos) << n;
    EXPECT_TRUE(p.requires_grad()) << n;
  }
  EXPECT_FALSE(m.c_attn->lora_A);
}

TEST(LoRA, TheAdapterFileRoundTrips) {
  testing::TempDir dir;
  Tiny m(DType::f32);
  const LoRAOptions options{.rank = 2, .alpha = 4, .dropout = 0.1, .targets = {"c_attn", "c_fc"}};
  add_lora(m, options);
  for (const auto& [n, p] : lora_parameters(m)) { NoGradGuard no_grad; ops::copy_(p, testing::randn(p.shape(), uint64_t(7 + n.size()), DType::f32)); }
  m.eval();
  const Tensor x = testing::randn({2, 6}, 8);
  const std::string path = dir.file("adapter.safetensors");
  save_adapter(path, m, options);

  Tiny fresh(DType::f32);  // the same base (the same draws): a checkpoint loaded again
  const Adapter a = load_adapter(path);
  EXPECT_EQ(a.options.rank, 2);
  EXPECT_EQ(a.options.alpha, 4);
  EXPECT_EQ(a.options.dropout, 0.1);
  EXPECT_EQ(a.options.targets, options.targets);
  apply_adapter(fresh, a);
  fresh.eval();
  EXPECT_EQ(max_abs_diff(fresh(x), m(x)), 0.0);
  // An adapter of another rank does not fit.
  Tiny third(DType::f32);
  Adapter wrong = a;
  wrong.options.rank = 3;
  EXPECT_THROW(apply_adapter(third, wrong), std::invalid_argument);
}

}  // namespace
}  // namespace mvgpt::nn
