// The op profile over a real training step (NOTE [ The op profile ]): every layer's kernels show up
// in the phase that ran them, the products with their shapes and flops, the bf16 conversions under
// bf16 products.
#include <gtest/gtest.h>

#include <string>

#include <mvgpt/autograd/ops.h>
#include <mvgpt/autograd/precision.h>
#include <mvgpt/gpt/model.h>
#include <mvgpt/nn/optim.h>
#include <mvgpt/util/profile.h>

#include "tiny_models.h"

namespace mvgpt::gpt {
namespace {

const profile::Row* find(const profile::Report& r, const std::string& phase, const std::string& op,
                         const std::string& detail = "") {
  for (const auto& row : r.rows)
    if (row.phase == phase && row.op == op && (detail.empty() || row.detail == detail)) return &row;
  return nullptr;
}

// The rows, one a line, for failure messages.
std::string dump(const profile::Report& r) {
  std::string s;
  for (const auto& row : r.rows)
    s += row.phase + " | " + row.op + " | " + row.detail + " | " + std::to_string(row.calls) + "\n";
  return s;
}

struct Profiled {
  profile::Report report;
  size_t parameters = 0;
};

Profiled profile_one_step(Precision precision) {
  const PrecisionGuard guard(precision);
  GPTConfig c = testing::tiny(true);  // V 29, T 8, 2 layers, 2 heads, C 8
  auto model = testing::random_model(c, 3);
  nn::AdamW opt(nn::weight_decay_groups(model->named_parameters(), 0.1), {});
  const Tensor x = Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
                                       Shape{2, 8});
  profile::Recording recording;
  Tensor loss;
  {
    const profile::Phase phase("forward");
    loss = model->loss(x, x);
  }
  {
    const profile::Phase phase("backward");
    backward(loss);
  }
  {
    const profile::Phase phase("optimizer");
    opt.step();
  }
  return {recording.stop(), model->parameters().size()};
}

TEST(OpProfile, ATrainingStepShowsEachLayersKernelsInTheirPhase) {
  const Profiled p = profile_one_step(Precision::fp32);
  const profile::Report& r = p.report;
  ASSERT_EQ(r.phases.size(), 3u);
  // The qkv projection: 16 rows of 8 -> 24, one per layer, 2 * 16 * 8 * 24 flops each, and the
  // library that multiplied it (NOTE [ float32 products through oneDNN ] in blas.cpp).
  const std::string shape = "float32 16 x 8 x 24, ";
  const profile::Row* qkv = nullptr;
  for (const auto& row : r.rows)
    if (row.phase == "forward" && row.op == "linear" && row.detail.starts_with(shape)) qkv = &row;
  ASSERT_TRUE(qkv) << dump(r);
  const std::string kernel = qkv->detail.substr(shape.size());
  EXPECT_TRUE(kernel == "OpenBLAS" || kernel.starts_with("brg:") || kernel == "gemm:jit") << kernel;
  EXPECT_EQ(qkv->calls, 2);
  EXPECT_EQ(qkv->flops, 2 * 2.0 * 16 * 8 * 24);
  // The loss's gradient is made with the loss, in the forward (NOTE [ Linear cross-entropy ]).
  for (const char* op : {"attention", "layer_norm", "cross_entropy", "cross_entropy backward"})
    EXPECT_TRUE(find(r, "forward", op)) << op;
  for (const char* op : {"attention backward", "layer_norm backward", "matmul"})
    EXPECT_TRUE(find(r, "backward", op)) << op;
  // The rotation of q and k runs inside the attention's kernels (rotary_attention_packed).
  EXPECT_FALSE(find(r, "forward", "rope"));
  EXPECT_FALSE(find(r, "backward", "rope backward"));
  EXPECT_FALSE(find(r, "backward", "cross_entropy backward"));
  const profile::Row* adamw = find(r, "optimizer", "adamw");
  ASSERT_TRUE(adamw);
  EXPECT_EQ(adamw->calls, 1);  // one multi-tensor step for all p.parameters (fused/multi_tensor.h)
  EXPECT_GT(p.parameters, 1u);
  EXPECT_FALSE(find(r, "forward", "convert", "float32->bfloat16"));  // fp32 products convert nothing
  // Each kernel in the phase that ran it only.
  EXPECT_FALSE(find(r, "optimizer", "attention"));
  EXPECT_FALSE(find(r, "backward", "attention"));
  EXPECT_FALSE(find(r, "forward", "attention backward"));
  EXPECT_FALSE(find(r, "forward", "adamw"));
  EXPECT_FALSE(find(r, "backward", "adamw"));
}

// Under bf16 products each product's row also names the kernel that ran it: oneDNN's implementation
// ("brg:avx512_core_bf16", "gemm:jit", ...) or, on CPUs without bf16 kernels, the float32 fallback.
TEST(OpProfile, Bf16ProductsShowTheirOperandsConversions) {
  const profile::Report r = profile_one_step(Precision::bf16).report;
  const std::string qkv = "bfloat16 16 x 8 x 24, ";
  const profile::Row* linear = nullptr;
  for (const auto& row : r.rows)
    if (row.phase == "forward" && row.op == "linear" && row.detail.starts_with(qkv)) linear = &row;
  ASSERT_TRUE(linear) << dump(r);
  EXPECT_GT(linear->detail.size(), qkv.size()) << linear->detail;
  const profile::Row* convert = find(r, "forward", "convert", "float32->bfloat16");
  ASSERT_TRUE(convert);
  EXPECT_GT(convert->calls, 0);
}

// A decoded token rotates each layer's q and k in one rope call (their heads side by side in the
// projection), and gives the last logits a full forward gives.
TEST(OpProfile, ADecodedTokenRotatesQAndKInOneCallALayer) {
  const NoGradGuard no_grad;
  GPTConfig c = testing::tiny(true);  // RoPE, 2 layers
  auto model = testing::random_model(c, 3);
  const Tensor prompt = Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4, 5}, Shape{1, 5});
  KVCache cache(c);
  model->forward(ops::narrow(prompt, 1, 0, 4), &cache);
  profile::Recording recording;
  Tensor logits;
  {
    const profile::Phase phase("decode");
    logits = model->forward(ops::narrow(prompt, 1, 4, 1), &cache, /*last_only=*/true);
  }
  const profile::Report r = recording.stop();
  const profile::Row* rope = find(r, "decode", "rope");
  ASSERT_TRUE(rope) << dump(r);
  EXPECT_EQ(rope->calls, c.n_layer);
  const Tensor full = model->forward(prompt, nullptr, /*last_only=*/true);
  EXPECT_LT(ops::max(ops::abs(ops::sub(logits, full))).item<double>(), 1e-5);
}

}  // namespace
}  // namespace mvgpt::gpt
