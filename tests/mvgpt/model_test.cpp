#include <gtest/gtest.h>

#include <cmath>

#include <mvgpt/autograd/gradcheck.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/autograd/precision.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/gpt/hf.h>
#include <mvgpt/gpt/model.h>
#include <mvgpt/nn/mlp.h>

namespace mvgpt::gpt {
namespace {

GPTConfig tiny(bool rope, int64_t n_layer = 2) {
  GPTConfig c;
  c.vocab_size = 37;
  c.block_size = 16;
  c.n_layer = n_layer;
  c.n_head = 2;
  c.n_embd = 16;
  c.rope = rope;
  return c;
}

Tensor random_ids(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  Generator g(seed);
  Tensor u = ops::rand({B, T}, DType::f64, Device::cpu(), &g);
  std::vector<int32_t> ids;
  for (double x : u.to_vector<double>()) ids.push_back(int32_t(x * double(V)));
  return Tensor::from_vector(ids, Shape{B, T});
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = ops::to(a.detach(), DType::f64).to_vector<double>(), y = ops::to(b.detach(), DType::f64).to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

TEST(GPTConfig, PresetParameterCounts) {
  GPTConfig learned = GPTConfig::preset("series"), rope = GPTConfig::preset("series-rope");
  // The series: about 14.5M parameters with RoPE, 256 x 384 = 98,304 more with the position table.
  EXPECT_EQ(rope.num_parameters(), 14487552);
  EXPECT_EQ(learned.num_parameters() - rope.num_parameters(), 256 * 384);
  // The formula against the built models, on smaller versions of each preset (same code paths).
  Generator g(1);
  for (auto name : GPTConfig::preset_names()) {
    GPTConfig c = GPTConfig::preset(name);
    c.vocab_size = 101;
    c.n_layer = 2;
    c.n_embd = 64;
    c.n_head = 4;
    c.n_kv_head = c.n_kv_head ? 2 : 0;
    EXPECT_EQ(GPT(c, &g).num_parameters(), c.num_parameters()) << name;
  }
}

TEST(GPTConfig, OldConfigWithoutRopeIsLearnedPositions) {
  GPTConfig c = GPTConfig::from_json(R"({"vocab_size": 100, "block_size": 32, "n_layer": 1, "n_head": 2, "n_embd": 8})");
  EXPECT_FALSE(c.rope);
  EXPECT_EQ(c.vocab_size, 100);
  EXPECT_EQ(c.kv_heads(), 2);
}

TEST(GPTConfig, JsonRoundTripAndErrors) {
  GPTConfig c = GPTConfig::preset("llama-small");
  GPTConfig d = GPTConfig::from_json(c.to_json());
  EXPECT_EQ(d.to_json(), c.to_json());
  EXPECT_THROW(GPTConfig::from_json(R"({"n_head": "six"})"), std::invalid_argument);
  EXPECT_THROW(GPTConfig::from_json(R"({"n_heads": 6})"), std::invalid_argument);
  EXPECT_THROW(GPTConfig::from_json(R"({"n_embd": 100, "n_head": 6})"), std::invalid_argument);
  EXPECT_THROW(GPTConfig::from_json("{"), std::invalid_argument);
  EXPECT_THROW(GPTConfig::from_json(R"({"n_embd": 5555555555555511048, "n_head": 1})"), std::invalid_argument);
  EXPECT_THROW(GPTConfig::from_json(R"({"n_layer": 100000})"), std::invalid_argument);
  EXPECT_THROW(GPTConfig::from_json(R"({"mlp_hidden": -1})"), std::invalid_argument);
  EXPECT_NO_THROW(GPTConfig::from_json(R"({"n_embd": 1048576, "n_head": 1, "n_layer": 4096, "mlp_hidden": 4194304})").num_parameters());
  try {
    GPTConfig::from_json(R"({"norm": "batchnorm"})", "ckpt/config.json");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("ckpt/config.json: field \"norm\""), std::string::npos) << e.what();
  }
}

// The one-line error of from_json(text), or "" when it parses.
std::string config_error(const std::string& text) {
  try {
    GPTConfig::from_json(text, "run/config.json");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(GPTConfig, RopeScalingJsonRoundTripAndRefusals) {
  GPTConfig c = GPTConfig::preset("series-rope");
  const std::string plain = c.to_json();
  EXPECT_EQ(plain.find("rope_scaling"), std::string::npos);  // absent unless set: old configs are unchanged
  for (auto [type, factor] : {std::pair{RopeScalingType::linear, 4.0}, {RopeScalingType::ntk, 2.5}}) {
    c.rope_scaling = {type, factor};
    GPTConfig d = GPTConfig::from_json(c.to_json());
    EXPECT_EQ(d.rope_scaling, c.rope_scaling);
    EXPECT_EQ(d.to_json(), c.to_json());
  }
  EXPECT_NE(c.to_json().find(R"("rope_scaling": {)"), std::string::npos) << c.to_json();
  GPTConfig n = GPTConfig::from_json(R"({"rope": true, "rope_scaling": {"type": "ntk", "factor": 4}})");
  EXPECT_EQ(n.rope_scaling, (RopeScaling{RopeScalingType::ntk, 4.0}));
  EXPECT_FALSE(GPTConfig::from_json(R"({"rope": true, "rope_scaling": null})").rope_scaling.enabled());
  EXPECT_FALSE(GPTConfig::from_json(R"({"rope": true, "rope_scaling": {"type": "none"}})").rope_scaling.enabled());

  const std::string head = R"({"rope": true, "rope_scaling": )";
  auto expect_refused = [&](const std::string& value, const std::string& says) {
    const std::string e = config_error(head + value + "}");
    EXPECT_NE(e.find("run/config.json: "), std::string::npos) << value << ": " << e;
    EXPECT_NE(e.find(says), std::string::npos) << value << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  };
  expect_refused(R"({"type": "yarn", "factor": 4})", R"(field "rope_scaling" has type "yarn"; expected "linear" or "ntk")");
  expect_refused(R"({"type": "dynamic", "factor": 4})", R"(type "dynamic")");
  expect_refused(R"({"type": "linear", "factor": 0.5})", "has factor 0.5; expected a number >= 1");
  expect_refused(R"({"type": "linear", "factor": "4"})", "has factor \"4\"; expected a number");
  expect_refused(R"({"type": "linear", "factor": 1e400})", "field \"factor\": number out of range");  // the strict parser
  expect_refused(R"({"type": "linear"})", "has no \"factor\"");
  expect_refused(R"({"factor": 2})", "has no \"type\"");
  expect_refused(R"({"type": "linear", "factor": 2, "original_max_position_embeddings": 256})", "unknown field");
  expect_refused(R"("linear")", "must be an object");
  // Only a rotary model can be scaled.
  EXPECT_NE(config_error(R"({"rope": false, "rope_scaling": {"type": "ntk", "factor": 2}})").find("needs rotary positions"),
            std::string::npos);
}

// NOTE [ llama2.c's rotary pairs ]: a model whose rotations pair neighbours (2j, 2j + 1) computes the
// same function as the split-half model whose q and k rows are reordered (H, D/2, 2) -> (H, 2, D/2)
// in each head. Checked with grouped KV heads, a KV cache and positions past the first.
TEST(GPTConfig, InterleavedRopeLayoutIsSavedAndHonoured) {
  GPTConfig c = tiny(true);
  c.n_head = 4, c.n_kv_head = 2, c.norm = NormKind::rmsnorm, c.mlp = MlpKind::swiglu, c.bias = false;
  EXPECT_EQ(c.to_json().find("rope_layout"), std::string::npos);  // absent unless interleaved: old configs are unchanged
  GPTConfig ci = c;
  ci.rope_layout = RopeLayout::interleaved;
  EXPECT_NE(ci.to_json().find(R"("rope_layout": "interleaved")"), std::string::npos) << ci.to_json();
  EXPECT_EQ(GPTConfig::from_json(ci.to_json()).rope_layout, RopeLayout::interleaved);
  EXPECT_EQ(GPTConfig::from_json(R"({"rope": true, "rope_layout": "split_half"})").rope_layout, RopeLayout::split_half);
  EXPECT_NE(config_error(R"({"rope": true, "rope_layout": "neox"})").find(R"(field "rope_layout" must be "split_half" or "interleaved")"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"rope": false, "rope_layout": "interleaved"})").find("needs rotary positions"), std::string::npos);

  GPT interleaved(ci), halves(c);
  nn::NamedTensors state = interleaved.state_dict();
  {
    NoGradGuard no_grad;
    const int64_t D = c.head_dim(), H = c.n_head, K = c.kv_heads();
    auto reorder = [&](const Tensor& rows, int64_t heads) {
      return reshape(contiguous(transpose(reshape(rows, {heads, D / 2, 2, c.n_embd}), 1, 2)), rows.shape());
    };
    for (auto& [name, t] : state)
      if (name.find("attn.c_attn.weight") != std::string::npos) {
        const std::vector<Tensor> qkv = split(detach(t), {H * D, K * D, K * D}, 0);
        t = cat({reorder(qkv[0], H), reorder(qkv[1], K), qkv[2]}, 0);
      }
  }
  halves.load_state_dict(state);
  interleaved.eval(), halves.eval();
  const Tensor ids = random_ids(2, 12, c.vocab_size, 5);
  const double err = max_abs_diff(interleaved.forward(ids), halves.forward(ids));
  EXPECT_LT(err, 1e-6);
  // The layout really matters: the same weights in the other layout compute something else (the
  // init's small weights keep the logits near each other either way).
  GPT same_weights(c);
  same_weights.load_state_dict(interleaved.state_dict());
  same_weights.eval();
  EXPECT_GT(max_abs_diff(interleaved.forward(ids), same_weights.forward(ids)), 100 * err + 1e-5);
}

TEST(GPTConfig, ExactGeluIsSavedAndHonoured) {
  GPTConfig c = tiny(false);
  EXPECT_EQ(c.to_json().find("gelu_approximate"), std::string::npos);  // absent unless exact: old configs are unchanged
  GPTConfig e = c;
  e.exact_gelu = true;
  EXPECT_NE(e.to_json().find(R"("gelu_approximate": "none")"), std::string::npos) << e.to_json();
  EXPECT_TRUE(GPTConfig::from_json(e.to_json()).exact_gelu);
  EXPECT_FALSE(GPTConfig::from_json(R"({"gelu_approximate": "tanh"})").exact_gelu);
  EXPECT_NE(config_error(R"({"gelu_approximate": "erf"})").find(R"(must be "tanh" or "none")"), std::string::npos);
  EXPECT_NE(config_error(R"({"mlp": "swiglu", "gelu_approximate": "none"})").find("needs the GELU MLP"), std::string::npos);
  // The same weights through either GELU: the logits differ by about what the two functions do.
  // Weights of std 0.5, so that the MLP sees inputs of order 1 where the two GELUs part.
  GPT tanh_model(c), exact_model(e);
  nn::NamedTensors state = tanh_model.state_dict();
  Generator g(3);
  for (auto& [name, t] : state) t = ops::mul(ops::randn(t.shape(), DType::f32, Device::cpu(), &g), 0.5);
  tanh_model.load_state_dict(state), exact_model.load_state_dict(state);
  tanh_model.eval(), exact_model.eval();
  const Tensor ids = random_ids(2, 8, c.vocab_size, 9);
  const double gap = max_abs_diff(tanh_model.forward(ids), exact_model.forward(ids));
  EXPECT_GT(gap, 1e-4);  // about 1e-3 here; the float32 noise of one model is about 1e-6
  EXPECT_LT(gap, 1e-1);
}

// "mlp": "relu2": GPT-2's MLP with the squared ReLU, saved in config.json, computed by the model,
// and refused by the Hugging Face export (no transformers class computes it).
TEST(GPTConfig, Relu2MlpIsSavedComputedAndNotExported) {
  GPTConfig c = tiny(true);
  c.mlp = MlpKind::relu2;
  EXPECT_NE(c.to_json().find(R"("mlp": "relu2")"), std::string::npos) << c.to_json();
  EXPECT_EQ(GPTConfig::from_json(c.to_json()).mlp, MlpKind::relu2);
  EXPECT_EQ(c.hidden_size(), 4 * c.n_embd);
  GPT model(c);
  EXPECT_EQ(model.num_parameters(), c.num_parameters());
  model.eval();
  // The block's MLP is relu2(x W1^T + b1) W2^T + b2.
  const auto& mlp = (*model.h)[0].mlp;
  Generator g(4);
  Tensor x = ops::randn({2, 3, c.n_embd}, DType::f32, Device::cpu(), &g);
  const auto& m = dynamic_cast<const nn::MLP&>(*mlp);
  Tensor h = ops::linear(x, m.c_fc->weight.detach(), m.c_fc->bias.detach());
  Tensor want = ops::linear(ops::square(ops::relu(h)), m.c_proj->weight.detach(), m.c_proj->bias.detach());
  EXPECT_LT(max_abs_diff(mlp->forward(x), want), 1e-5);
  EXPECT_NE(config_error(R"({"mlp": "relu3"})").find(R"(must be "gelu", "swiglu" or "relu2")"), std::string::npos);
  try {
    hf::architecture(c);
    ADD_FAILURE() << "a relu2 model was given a transformers class";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("relu2"), std::string::npos) << e.what();
  }
}

TEST(GPTConfig, RopeScalingParseAndEffectiveRotation) {
  EXPECT_EQ(RopeScaling::parse("none"), RopeScaling{});
  EXPECT_EQ(RopeScaling::parse("linear:4"), (RopeScaling{RopeScalingType::linear, 4.0}));
  EXPECT_EQ(RopeScaling::parse("ntk:2.5"), (RopeScaling{RopeScalingType::ntk, 2.5}));
  EXPECT_EQ(RopeScaling::parse("ntk:2.5").to_string(), "ntk:2.5");
  for (const char* bad : {"linear", "linear:", "linear:x", "linear:4x", "linear:0.5", "linear:inf", "linear:nan", "yarn:2", ""})
    EXPECT_THROW(RopeScaling::parse(bad), std::invalid_argument) << bad;

  GPTConfig c = GPTConfig::preset("series-rope");  // head size 64
  EXPECT_EQ(c.rope_effective_base(), 10000);
  EXPECT_EQ(c.rope_position_scale(), 1);
  for (RopeScalingType t : {RopeScalingType::linear, RopeScalingType::ntk}) {
    c.rope_scaling = {t, 1.0};  // factor 1: the plain rotation exactly
    EXPECT_EQ(c.rope_effective_base(), 10000);
    EXPECT_EQ(c.rope_position_scale(), 1);
  }
  c.rope_scaling = {RopeScalingType::linear, 4};
  EXPECT_EQ(c.rope_effective_base(), 10000);
  EXPECT_EQ(c.rope_position_scale(), 0.25);
  c.rope_scaling = {RopeScalingType::ntk, 4};
  EXPECT_DOUBLE_EQ(c.rope_effective_base(), 10000 * std::pow(4.0, 64.0 / 62.0));
  EXPECT_EQ(c.rope_position_scale(), 1);
}

// Logits of the same weights under another rope_scaling (set at load time, no retraining).
Tensor logits_with(GPT& model, const RopeScaling& s, const Tensor& ids) {
  model.set_rope_scaling(s);
  return model.forward(ids);
}

TEST(GPT, RopeScalingFactorOneIsTheIdentity) {
  Generator g(3);
  GPT model(tiny(true), &g);
  NoGradGuard no_grad;
  Tensor ids = random_ids(2, 40, 37, 5);  // past the window of 16
  const auto plain = model.forward(ids).to_vector<float>();
  EXPECT_EQ(logits_with(model, {RopeScalingType::linear, 1.0}, ids).to_vector<float>(), plain);
  EXPECT_EQ(logits_with(model, {RopeScalingType::ntk, 1.0}, ids).to_vector<float>(), plain);
  EXPECT_NE(logits_with(model, {RopeScalingType::linear, 4.0}, ids).to_vector<float>(), plain);
  EXPECT_EQ(logits_with(model, {}, ids).to_vector<float>(), plain);
}

TEST(GPT, NtkScalingIsABaseChange) {
  Generator g1(3), g2(3);
  GPTConfig scaled = tiny(true), based = tiny(true);  // head size 8
  scaled.rope_scaling = {RopeScalingType::ntk, 4.0};
  based.rope_base = 10000 * std::pow(4.0, 8.0 / 6.0);
  GPT a(scaled, &g1), b(based, &g2);
  NoGradGuard no_grad;
  Tensor ids = random_ids(1, 40, 37, 6);
  EXPECT_EQ(a.forward(ids).to_vector<float>(), b.forward(ids).to_vector<float>());
}

TEST(GPT, LinearScalingSeesPositionsDividedByTheFactor) {
  // Position interpolation by 4, on a block's attention: at positions 4p it computes exactly what
  // the unscaled layer computes at p (a power of two: no rounding).
  Generator g(4);
  GPTConfig c = tiny(true, 1);
  GPT model(c, &g);
  NoGradGuard no_grad;
  auto& attn = *(*model.h)[0].attn;
  Tensor x = ops::randn({1, 6, 16}, DType::f32, Device::cpu(), &g);
  Tensor p = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 5, 9, 30});
  Tensor p4 = Tensor::from_vector(std::vector<int64_t>{0, 4, 8, 20, 36, 120});
  const auto plain = attn.forward(x, p).to_vector<float>();
  model.set_rope_scaling({RopeScalingType::linear, 4.0});
  EXPECT_EQ(attn.config.rope_position_scale, 0.25);
  EXPECT_EQ(attn.forward(x, p4).to_vector<float>(), plain);
  EXPECT_NE(attn.forward(x, p).to_vector<float>(), plain);
}

TEST(GPT, SetRopeScalingRefusesALearnedTable) {
  Generator g(3);
  GPT model(tiny(false), &g);
  EXPECT_THROW(model.set_rope_scaling({RopeScalingType::ntk, 2.0}), std::invalid_argument);
  EXPECT_FALSE(model.config().rope_scaling.enabled());
}

class ScaledCacheMatchesFull : public ::testing::TestWithParam<RopeScalingType> {};

TEST_P(ScaledCacheMatchesFull, PastTheWindowToo) {
  Generator g(3);
  GPTConfig c = tiny(true);
  c.rope_scaling = {GetParam(), 3.0};
  GPT model(c, &g);
  NoGradGuard no_grad;
  Tensor ids = random_ids(2, 40, 37, 11);
  Tensor full = model.forward(ids);  // (2, 40, V): 40 tokens, a window of 16, nothing slides
  KVCache cache(model.config(), 2, 40);
  std::vector<Tensor> parts = {model.forward(ops::narrow(ids, 1, 0, 5), &cache)};
  for (int64_t t = 5; t < 40; ++t) parts.push_back(model.forward(ops::narrow(ids, 1, t, 1), &cache));
  EXPECT_LT(max_abs_diff(ops::cat(parts, 1), full), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(LinearAndNtk, ScaledCacheMatchesFull,
                         ::testing::Values(RopeScalingType::linear, RopeScalingType::ntk));

TEST(GPT, NanoGPTParameterNames) {
  Generator g(1);
  GPT model(tiny(false, 1), &g);
  std::vector<std::string> names;
  for (auto& [name, t] : model.state_dict()) names.push_back(name + to_string(t.shape()));
  std::vector<std::string> expected = {
      "transformer.wte.weight[37, 16]",       "transformer.wpe.weight[16, 16]",
      "transformer.h.0.ln_1.weight[16]",      "transformer.h.0.ln_1.bias[16]",
      "transformer.h.0.attn.c_attn.weight[48, 16]", "transformer.h.0.attn.c_attn.bias[48]",
      "transformer.h.0.attn.c_proj.weight[16, 16]", "transformer.h.0.attn.c_proj.bias[16]",
      "transformer.h.0.ln_2.weight[16]",      "transformer.h.0.ln_2.bias[16]",
      "transformer.h.0.mlp.c_fc.weight[64, 16]", "transformer.h.0.mlp.c_fc.bias[64]",
      "transformer.h.0.mlp.c_proj.weight[16, 64]", "transformer.h.0.mlp.c_proj.bias[16]",
      "transformer.ln_f.weight[16]",          "transformer.ln_f.bias[16]"};
  EXPECT_EQ(names, expected);
}

// QK-norm: saved in config.json, counted, cached decoding equals the full pass, float64 gradients
// hold end to end, and no export format is offered it.
TEST(GPTConfig, QkNormIsSavedComputedCachedAndNotExported) {
  GPTConfig c = tiny(true);
  c.qk_norm = true;
  EXPECT_NE(c.to_json().find(R"("qk_norm": true)"), std::string::npos) << c.to_json();
  EXPECT_EQ(tiny(true).to_json().find("qk_norm"), std::string::npos);  // an older model's config.json is unchanged
  EXPECT_TRUE(GPTConfig::from_json(c.to_json()).qk_norm);
  EXPECT_NE(config_error(R"({"qk_norm": 1})").find("must be true or false"), std::string::npos);
  Generator g(3);
  GPT model(c, &g);
  EXPECT_EQ(model.num_parameters(), c.num_parameters());
  EXPECT_EQ(c.num_parameters(), tiny(true).num_parameters() + 2 * 2 * c.head_dim());
  bool named = false;
  for (const auto& [name, t] : model.state_dict()) named |= name == "transformer.h.1.attn.k_norm.weight";
  EXPECT_TRUE(named);
  {
    NoGradGuard no_grad;
    Tensor ids = random_ids(2, 16, 37, 11);
    Tensor full = model.forward(ids);
    KVCache cache(model.config(), 2);
    std::vector<Tensor> parts = {model.forward(ops::narrow(ids, 1, 0, 5), &cache)};
    for (int64_t t = 5; t < 16; ++t) parts.push_back(model.forward(ops::narrow(ids, 1, t, 1), &cache));
    EXPECT_LT(max_abs_diff(ops::cat(parts, 1), full), 1e-5);
  }
  GPTConfig small = c;
  small.vocab_size = 11, small.block_size = 8, small.n_embd = 8;
  Generator g2(2), g3(4);
  GPT f64(small, &g2);
  f64.to(DType::f64);
  {
    NoGradGuard no_grad;
    for (auto& p : f64.parameters()) ops::copy_(p, ops::add(ops::mul(ops::randn(p.shape(), DType::f64, Device::cpu(), &g3), 0.3), p.dim() == 1 ? 1.0 : 0.0));
  }
  Tensor ids = random_ids(2, 6, 11, 1), targets = random_ids(2, 6, 11, 2);
  auto result = autograd::gradcheck("gpt qk_norm", [&](const autograd::Inputs&) { return f64.loss(ids, targets); }, f64.parameters());
  EXPECT_TRUE(result.ok) << result.message;
  try {
    hf::architecture(c);
    ADD_FAILURE() << "a qk_norm model was given a transformers class";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("qk_norm"), std::string::npos) << e.what();
  }
}

// zero_init_proj: the same draw as without it, the residual projections then zeroed, so each block
// starts as the identity: the logits are the head of the final norm of the embeddings.
TEST(GPT, ZeroInitProjStartsEachBlockAsTheIdentity) {
  for (MlpKind mlp : {MlpKind::gelu, MlpKind::swiglu}) {
    SCOPED_TRACE(to_string(mlp));
    GPTConfig plain = tiny(true);
    plain.mlp = mlp;
    GPTConfig zeroed = plain;
    zeroed.zero_init_proj = true;
    EXPECT_NE(zeroed.to_json().find(R"("zero_init_proj": true)"), std::string::npos);
    EXPECT_TRUE(GPTConfig::from_json(zeroed.to_json()).zero_init_proj);
    Generator g1(5), g2(5);
    GPT a(plain, &g1), b(zeroed, &g2);
    auto sa = a.state_dict(), sb = b.state_dict();
    ASSERT_EQ(sa.size(), sb.size());
    int zeros = 0;
    for (size_t i = 0; i < sa.size(); ++i) {
      const std::string& name = sa[i].first;
      const bool projection = name.ends_with("attn.c_proj.weight") || name.ends_with("mlp.c_proj.weight") ||
                              name.ends_with("mlp.w2.weight");
      if (projection) {
        EXPECT_EQ(max_abs_diff(sb[i].second, ops::zeros(sb[i].second.shape())), 0) << name;
        EXPECT_GT(max_abs_diff(sa[i].second, ops::zeros(sa[i].second.shape())), 0) << name;
        ++zeros;
      } else {
        EXPECT_EQ(max_abs_diff(sa[i].second, sb[i].second), 0) << name;
      }
    }
    EXPECT_EQ(zeros, 2 * int(plain.n_layer));
    NoGradGuard no_grad;
    Tensor ids = random_ids(2, 7, 37, 3);
    Tensor want = ops::linear(b.ln_f->forward(b.wte->forward(ids)), b.wte->weight, Tensor());
    EXPECT_LT(max_abs_diff(b.forward(ids), want), 1e-6);
  }
}

TEST(GPT, SameSeedSameModel) {
  Generator g1(7), g2(7);
  GPT a(tiny(true), &g1), b(tiny(true), &g2);
  auto sa = a.state_dict(), sb = b.state_dict();
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_EQ(max_abs_diff(sa[i].second, sb[i].second), 0) << sa[i].first;
}

class CacheMatchesFull : public ::testing::TestWithParam<bool> {};

TEST_P(CacheMatchesFull, TokenByTokenWithinTheWindow) {
  Generator g(3);
  GPT model(tiny(GetParam()), &g);
  NoGradGuard no_grad;
  Tensor ids = random_ids(2, 16, 37, 11);
  Tensor full = model.forward(ids);  // (2, 16, V)
  KVCache cache(model.config(), 2);
  // A prompt of 5 tokens at once, then one token at a time.
  std::vector<Tensor> parts = {model.forward(ops::narrow(ids, 1, 0, 5), &cache)};
  for (int64_t t = 5; t < 16; ++t) parts.push_back(model.forward(ops::narrow(ids, 1, t, 1), &cache));
  EXPECT_EQ(cache.position, 16);
  EXPECT_LT(max_abs_diff(ops::cat(parts, 1), full), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(LearnedAndRope, CacheMatchesFull, ::testing::Values(false, true));

// Under the bf16 policy a CPU cache holds bfloat16 keys and values (cache_dtype), which the one-row
// attention reads in place: decoding token by token stays within bf16's rounding of the full
// forward under the same policy (whose products round k and v to bfloat16 as well), and as close to
// it as a float32 cache is.
TEST(GPT, Bf16CacheDecodesLikeTheFullForward) {
  using autograd::Precision;
  Generator g(3);
  GPT model(tiny(true), &g);
  NoGradGuard no_grad;
  const autograd::PrecisionGuard bf16(Precision::bf16);
  EXPECT_EQ(cache_dtype(DType::f32, Device::cpu()), DType::bf16);
  EXPECT_EQ(cache_dtype(DType::f64, Device::cpu()), DType::f64);
  Tensor ids = random_ids(2, 16, 37, 11);
  Tensor full = model.forward(ids);  // (2, 16, V)
  auto decode = [&](DType dtype) {
    KVCache cache(model.config(), 2, 0, dtype);
    model.forward(ops::narrow(ids, 1, 0, 5), &cache);  // the prompt at once (its k and v widened)
    std::vector<Tensor> parts;  // then token by token: the one-row kernel
    for (int64_t t = 5; t < 16; ++t) parts.push_back(model.forward(ops::narrow(ids, 1, t, 1), &cache));
    EXPECT_EQ(cache.layer(0).dtype(), dtype);
    return max_abs_diff(ops::cat(parts, 1), ops::narrow(full, 1, 5, 11));
  };
  const double with_bf16 = decode(cache_dtype(DType::f32, Device::cpu())), with_f32 = decode(DType::f32);
  EXPECT_LT(with_bf16, 2e-2);
  EXPECT_LT(with_bf16, 2 * with_f32 + 1e-3) << "float32 cache: " << with_f32;
}

TEST(GPT, LearnedPositionsCannotPassTheWindow) {
  Generator g(3);
  GPT model(tiny(false), &g);
  NoGradGuard no_grad;
  KVCache cache(model.config());
  model.forward(random_ids(1, 16, 37, 1), &cache);
  try {
    model.forward(random_ids(1, 1, 37, 2), &cache);
    FAIL() << "expected an error past block_size";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("learned position table"), std::string::npos) << e.what();
  }
  EXPECT_THROW(model.forward(random_ids(1, 17, 37, 3)), std::invalid_argument);
}

TEST(GPT, RopeRunsPastTheWindowAtOnce) {
  Generator g(3);
  GPT model(tiny(true), &g);
  NoGradGuard no_grad;
  Tensor logits = model.forward(random_ids(1, 40, 37, 4));
  EXPECT_EQ(logits.shape(), (Shape{1, 40, 37}));
}

// Per-token losses past the window, predicting token t from the W tokens before it.
std::vector<double> window_losses(const GPT& model, const std::vector<int32_t>& s, int64_t W) {
  std::vector<double> out;
  for (size_t t = size_t(W); t < s.size(); ++t) {
    std::vector<int32_t> x(s.begin() + (t - W), s.begin() + t), y(s.begin() + (t - W) + 1, s.begin() + t + 1);
    Tensor l = model.token_losses(Tensor::from_vector(x, Shape{1, W}), Tensor::from_vector(y, Shape{1, W}));
    out.push_back(ops::to(l, DType::f64).to_vector<double>().back());
  }
  return out;
}

std::vector<double> cache_losses(const GPT& model, const std::vector<int32_t>& s, int64_t W) {
  KVCache cache(model.config());
  std::vector<double> out;
  for (size_t t = 0; t + 1 < s.size(); ++t) {
    if (cache.length() >= W) cache.slide(W - 1);
    Tensor l = model.token_losses(Tensor::from_vector(std::vector<int32_t>{s[t]}, Shape{1, 1}),
                                  Tensor::from_vector(std::vector<int32_t>{s[t + 1]}, Shape{1, 1}), &cache);
    if (int64_t(t) + 1 >= W) out.push_back(ops::to(l, DType::f64).to_vector<double>()[0]);
  }
  return out;
}

TEST(GPT, SlidingCacheEqualsSlidingWindowForOneLayer) {
  Generator g(5);
  GPT model(tiny(true, 1), &g);
  NoGradGuard no_grad;
  auto ids = random_ids(1, 48, 37, 9).to_vector<int32_t>();
  auto w = window_losses(model, ids, 16), c = cache_losses(model, ids, 16);
  ASSERT_EQ(w.size(), c.size());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], c[i], 1e-5) << "token " << i + 16;
}

TEST(GPT, DeeperSlidingCacheAgreesUntilTheFirstSlideThenDiffers) {
  // Above the first layer, a cached key was computed while older tokens were still in view, so
  // after the first slide the cache reaches further back than the window: close, not equal.
  Generator g(5);
  GPT model(tiny(true, 2), &g);
  NoGradGuard no_grad;
  auto ids = random_ids(1, 48, 37, 9).to_vector<int32_t>();
  auto w = window_losses(model, ids, 16), c = cache_losses(model, ids, 16);
  ASSERT_EQ(w.size(), c.size());
  EXPECT_NEAR(w[0], c[0], 1e-5);  // token 16: the cache has not slid yet
  double later = 0;
  for (size_t i = 1; i < w.size(); ++i) later = std::max(later, std::abs(w[i] - c[i]));
  EXPECT_GT(later, 1e-6);
  EXPECT_LT(later, 1.0);
}

class TinyGradcheck : public ::testing::TestWithParam<bool> {};

TEST_P(TinyGradcheck, EndToEndFloat64) {
  GPTConfig c = tiny(GetParam());
  c.vocab_size = 11;
  c.block_size = 8;
  c.n_embd = 8;
  Generator g(2);
  GPT model(c, &g);
  model.to(DType::f64);
  // Larger weights than GPT-2's init, so every path carries a visible gradient.
  {
    NoGradGuard no_grad;
    Generator g2(4);
    for (auto& p : model.parameters()) ops::copy_(p, ops::mul(ops::randn(p.shape(), DType::f64, Device::cpu(), &g2), 0.3));
  }
  Tensor ids = random_ids(2, 6, 11, 1), targets = random_ids(2, 6, 11, 2);
  std::vector<Tensor> params = model.parameters();
  auto result = autograd::gradcheck("gpt", [&](const autograd::Inputs&) { return model.loss(ids, targets); }, params);
  EXPECT_TRUE(result.ok) << result.message;
  EXPECT_GT(result.checked, 500);
}

INSTANTIATE_TEST_SUITE_P(LearnedAndRope, TinyGradcheck, ::testing::Values(false, true));

}  // namespace
}  // namespace mvgpt::gpt
