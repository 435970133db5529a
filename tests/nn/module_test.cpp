#include <mvgpt/backends/ops.h>
#include <mvgpt/nn/module.h>

#include <gtest/gtest.h>

#include <mvgpt/autograd/ops.h>
#include <mvgpt/nn/embedding.h>
#include <mvgpt/nn/layer_norm.h>
#include <mvgpt/nn/linear.h>
#include <mvgpt/nn/safetensors.h>
#include "nn/temp_dir.h"

namespace mvgpt::nn {
namespace {

// A small GPT-shaped tree: wte, h.{0,1}.{ln_1, attn.c_attn}, ln_f, lm_head tied to wte.
struct Block : Module {
  std::shared_ptr<LayerNorm> ln_1;
  std::shared_ptr<Module> attn;
  std::shared_ptr<Linear> c_attn;
  explicit Block(const Init& init) {
    ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(4));
    attn = register_module("attn", std::make_shared<Module>());
    c_attn = attn->register_module("c_attn", std::make_shared<Linear>(4, 12, true, init));
  }
};

struct Toy : Module {
  std::shared_ptr<Embedding> wte;
  std::shared_ptr<ModuleList> h;
  std::shared_ptr<LayerNorm> ln_f;
  Tensor mask;
  explicit Toy(uint64_t seed = 1) {
    Generator gen(seed);
    Init init{.gen = &gen};
    wte = register_module("wte", std::make_shared<Embedding>(10, 4, init));
    h = std::make_shared<ModuleList>();
    h->push_back(std::make_shared<Block>(init));
    h->push_back(std::make_shared<Block>(init));
    register_module("h", h);
    ln_f = register_module("ln_f", std::make_shared<LayerNorm>(4));
    mask = register_buffer("mask", ops::ones({3}, DType::i64));
    register_buffer("scratch", ops::zeros({2}), /*persistent=*/false);
  }
};

std::vector<std::string> names_of(const NamedTensors& named) {
  std::vector<std::string> out;
  for (const auto& [n, t] : named) out.push_back(n);
  return out;
}

TEST(Module, RegistersInOrderWithDottedNames) {
  Toy m;
  const std::vector<std::string> expected = {
      "wte.weight",       "h.0.ln_1.weight",       "h.0.ln_1.bias",         "h.0.attn.c_attn.weight",
      "h.0.attn.c_attn.bias", "h.1.ln_1.weight",   "h.1.ln_1.bias",         "h.1.attn.c_attn.weight",
      "h.1.attn.c_attn.bias", "ln_f.weight",       "ln_f.bias"};
  EXPECT_EQ(names_of(m.named_parameters()), expected);
  for (const auto& [n, t] : m.named_parameters()) {
    EXPECT_EQ(t.name(), n);  // the tensor carries its dotted name for messages
    EXPECT_TRUE(t.requires_grad());
    EXPECT_TRUE(t.is_leaf());
  }
  EXPECT_EQ(m.parameters().size(), expected.size());
  EXPECT_EQ(m.num_parameters(), 10 * 4 + 2 * (4 + 4 + 48 + 12) + 8);
  EXPECT_EQ(names_of(m.named_buffers()), (std::vector<std::string>{"mask", "scratch"}));
  // state_dict: parameters then persistent buffers of each module, depth first.
  std::vector<std::string> sd = names_of(m.state_dict());
  EXPECT_EQ(sd.size(), expected.size() + 1);
  EXPECT_EQ(sd[0], "mask");  // a module's own entries come before its children's (as PyTorch)
  EXPECT_EQ(sd[1], "wte.weight");
  std::vector<std::string> modules;
  for (const auto& [n, mod] : m.named_modules()) modules.push_back(n + ":" + mod->type_name());
  EXPECT_EQ(modules, (std::vector<std::string>{":Module", "wte:Embedding", "h:ModuleList", "h.0:Module",
                                                "h.0.ln_1:LayerNorm", "h.0.attn:Module", "h.0.attn.c_attn:Linear",
                                                "h.1:Module", "h.1.ln_1:LayerNorm", "h.1.attn:Module",
                                                "h.1.attn.c_attn:Linear", "ln_f:LayerNorm"}));
  EXPECT_EQ(&m.h->at<Block>(1), &(*m.h)[1]);
  EXPECT_THROW(m.h->at<LayerNorm>(0), std::invalid_argument);
  EXPECT_NE(m.to_string().find("c_attn: Linear weight[12, 4] bias[12]"), std::string::npos) << m.to_string();
}

TEST(Module, RejectsBadRegistrations) {
  Module m;
  m.register_parameter("w", ops::zeros({2}));
  EXPECT_THROW(m.register_parameter("w", ops::zeros({2})), std::invalid_argument);
  EXPECT_THROW(m.register_buffer("w", ops::zeros({2})), std::invalid_argument);
  EXPECT_THROW(m.register_module("w", std::make_shared<Module>()), std::invalid_argument);
  EXPECT_THROW(m.register_parameter("a.b", ops::zeros({2})), std::invalid_argument);
  EXPECT_THROW(m.register_parameter("", ops::zeros({2})), std::invalid_argument);
  EXPECT_THROW(m.register_parameter("i", ops::zeros({2}, DType::i64)), std::invalid_argument);
  EXPECT_THROW(m.register_parameter("u", Tensor()), std::invalid_argument);
  EXPECT_THROW(m.register_module("null", std::shared_ptr<Module>()), std::invalid_argument);
  Tensor leaf = ops::ones({2});
  leaf.requires_grad_();
  Tensor nonleaf = mul(leaf, 2.0);
  EXPECT_THROW(m.register_parameter("n", nonleaf), std::invalid_argument);
}

TEST(Module, TiedParametersAppearOnceButSaveUnderEveryName) {
  Module m;
  auto a = m.register_module("a", std::make_shared<Linear>(3, 2, false));
  auto b = m.register_module("b", std::make_shared<Module>());
  b->register_parameter("weight", a->weight);
  EXPECT_EQ(m.parameters().size(), 1u);
  EXPECT_EQ(names_of(m.state_dict()), (std::vector<std::string>{"a.weight", "b.weight"}));
  m.to(DType::f64);
  EXPECT_EQ(a->weight.dtype(), DType::f64);
}

TEST(Module, TrainEvalRecurses) {
  Toy m;
  EXPECT_TRUE(m.is_training());
  m.eval();
  for (const auto& [n, mod] : m.named_modules()) EXPECT_FALSE(mod->is_training()) << n;
  m.train();
  EXPECT_TRUE(m.h->at<Block>(1).c_attn->is_training());
}

TEST(Module, ToDTypeKeepsHandlesValid) {
  Toy m;
  Tensor held = m.h->at<Block>(0).c_attn->weight;  // as an optimizer would hold it
  std::vector<double> before = held.to_vector<double>();
  held.set_grad(ops::ones(held.shape()));
  m.to(DType::f64);
  EXPECT_EQ(held.dtype(), DType::f64);  // the same handle sees the conversion
  EXPECT_EQ(held.grad().dtype(), DType::f64);
  EXPECT_EQ(held.to_vector<double>(), before);  // f32 -> f64 is exact
  EXPECT_TRUE(held.requires_grad());
  EXPECT_EQ(m.mask.dtype(), DType::i64);  // integer buffers keep their dtype
  for (const Tensor& p : m.parameters()) EXPECT_EQ(p.dtype(), DType::f64) << p.name();
  m.to(Device::cpu());  // no-op
  EXPECT_EQ(held.to_vector<double>(), before);
  EXPECT_THROW(m.to(DType::i32), std::invalid_argument);

  // Gradients still reach the converted parameter through the same handle.
  Tensor x = ops::ones({1, 4}, DType::f64);
  backward(sum(m.h->at<Block>(0).c_attn->forward(x)));
  ASSERT_TRUE(held.grad().defined());
  m.zero_grad();
  for (const Tensor& p : m.parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(Module, StateDictRoundTripsThroughSafetensors) {
  testing::TempDir dir;
  Toy a(1), b(2);
  ASSERT_NE(a.wte->weight.to_vector<float>(), b.wte->weight.to_vector<float>());
  safetensors::save(dir.file("m.safetensors"), a.state_dict());
  safetensors::File f = safetensors::load(dir.file("m.safetensors"));
  Tensor handle = b.wte->weight;
  b.load_state_dict(f.tensors);
  EXPECT_TRUE(handle.same(b.wte->weight));  // copied into, not replaced
  auto sa = a.state_dict(), sb = b.state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_EQ(sa[i].second.to_vector<double>(), sb[i].second.to_vector<double>());
}

TEST(Module, LoadStateDictNamesEveryProblem) {
  Toy m;
  NamedTensors state = m.state_dict();
  std::vector<float> wte_before = m.wte->weight.to_vector<float>();
  // Drop one, add one, mis-shape one.
  NamedTensors bad;
  for (const auto& [n, t] : state) {
    if (n == "ln_f.bias") continue;
    if (n == "h.1.attn.c_attn.weight") bad.emplace_back(n, ops::zeros({4, 12}));
    else if (n == "wte.weight") bad.emplace_back(n, ops::zeros({10, 4}));
    else bad.emplace_back(n, t);
  }
  bad.emplace_back("lm_head.weight", ops::zeros({10, 4}));
  try {
    m.load_state_dict(bad);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("missing: ln_f.bias"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unexpected: lm_head.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("h.1.attn.c_attn.weight (expected [12, 4], found [4, 12])"), std::string::npos) << msg;
  }
  EXPECT_EQ(m.wte->weight.to_vector<float>(), wte_before);  // nothing was copied
  // Not strict: missing and unexpected are fine, shapes still must match.
  EXPECT_THROW(m.load_state_dict(bad, /*strict=*/false), std::invalid_argument);
  NamedTensors partial = {{"wte.weight", ops::zeros({10, 4})}, {"extra", ops::zeros({1})}};
  m.load_state_dict(partial, /*strict=*/false);
  for (float v : m.wte->weight.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  // f64 values are converted into the f32 parameter.
  m.load_state_dict({{"wte.weight", ops::full({10, 4}, 0.5, DType::f64)}}, false);
  EXPECT_EQ(m.wte->weight.dtype(), DType::f32);
  EXPECT_EQ(m.wte->weight.to_vector<float>()[7], 0.5f);
  NamedTensors twice = {{"wte.weight", ops::zeros({10, 4})}, {"wte.weight", ops::zeros({10, 4})}};
  EXPECT_THROW(m.load_state_dict(twice, false), std::invalid_argument);
}

}  // namespace
}  // namespace mvgpt::nn
