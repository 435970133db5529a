// Every model path, written once, run on each device and compared with the CPU (like OpOnDevice in
// tests/backends/cuda_ops_test.cpp): a training step (loss, gradients, clipped norm, AdamW update) for
// learned and rotary positions with and without dropout and for the Llama preset, the KV cache and
// its slide, and generate. Without a GPU the CUDA cases skip with the reason, never removed.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <mvgpt/autograd/ops.h>
#include <mvgpt/backends/deferred_checks.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/gpt/generate.h>
#include <mvgpt/gpt/kv_cache.h>
#include <mvgpt/gpt/model.h>
#include <mvgpt/nn/optim.h>
#include "cuda_required.h"

namespace mvgpt {

// Names the device in test parameters (instead of gtest's byte dump).
void PrintTo(DeviceType t, std::ostream* os);

namespace gpt {
namespace {

struct Variant {
  std::string name;
  GPTConfig config;
};

GPTConfig tiny(bool rope, double dropout) {
  GPTConfig c;
  c.vocab_size = 37;
  c.block_size = 12;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.rope = rope;
  c.dropout = dropout;
  return c;
}

// The Llama preset's code paths (RMSNorm, SwiGLU, grouped keys and values, no biases), small.
GPTConfig llama_small() {
  GPTConfig c = GPTConfig::preset("llama-small");
  c.vocab_size = 37;
  c.block_size = 12;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 32;
  return c;
}

std::vector<Variant> variants() {
  return {{"learned", tiny(false, 0)},
          {"rope", tiny(true, 0)},
          {"learned_dropout", tiny(false, 0.1)},
          {"rope_dropout", tiny(true, 0.1)},
          {"llama_small", llama_small()}};
}

Device device_of(DeviceType t) { return t == DeviceType::cuda ? Device::cuda(0) : Device::cpu(); }

// Skips a CUDA case where no GPU is usable, saying why.
#define SKIP_WITHOUT(dev)                                                                              \
  if ((dev).is_cuda()) {                                                                               \
    MVGPT_SKIP_WITHOUT_CUDA("this model path runs against the CPU on a GPU machine (scripts/gpu-check.sh)"); \
  }

std::vector<int32_t> tokens(int64_t n, int64_t vocab, uint64_t seed) {
  Generator g(seed);
  std::vector<int32_t> out;
  for (double u : ops::rand({n}, DType::f64, Device::cpu(), &g).to_vector<double>()) out.push_back(int32_t(u * double(vocab)));
  return out;
}

Tensor ids_on(const std::vector<int32_t>& v, int64_t B, Device dev) {
  return ops::to(Tensor::from_vector(v, Shape{B, int64_t(v.size()) / B}), dev);
}

std::vector<double> host(const Tensor& t) {
  return ops::to(ops::to(t.detach(), Device::cpu()), DType::f64).to_vector<double>();
}

// |got - want| <= tol (1 + |want|) element by element, naming the first few that differ.
void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(to_string(got.shape()), to_string(want.shape())) << what;
  const std::vector<double> g = host(got), w = host(want);
  int failures = 0;
  for (size_t i = 0; i < w.size() && failures < 5; ++i)
    if (!(std::abs(g[i] - w[i]) <= tol * (1 + std::abs(w[i])))) {
      ++failures;
      ADD_FAILURE() << what << " element " << i << ": got " << g[i] << ", cpu " << w[i];
    }
}

// One training step as pretrain takes it: loss, backward, clip, AdamW. Returns the loss and the
// clipped norm; the gradients and the updated weights stay in the model.
struct StepResult {
  double loss = 0, norm = 0;
};

StepResult train_step(GPT& model, nn::AdamW& opt, const Tensor& idx, const Tensor& targets) {
  model.train();
  manual_seed(11);  // dropout's masks: Philox, the same numbers on every device
  Tensor loss = model.loss(idx, targets);
  opt.zero_grad();
  backward(loss);
  const double norm = nn::clip_grad_norm_(model.parameters(), 1.0);
  opt.step();
  return {host(loss)[0], norm};
}

class ModelOnDevice : public ::testing::TestWithParam<std::tuple<DeviceType, size_t>> {
 protected:
  Device dev() const { return device_of(std::get<0>(GetParam())); }
  const Variant& variant() const {
    static const std::vector<Variant> all = variants();
    return all[std::get<1>(GetParam())];
  }
  // The same weights on the CPU and on the device under test.
  std::shared_ptr<GPT> make(Device d) const {
    Generator g(5);
    auto m = std::make_shared<GPT>(variant().config, &g);
    m->to(d);
    return m;
  }
};

TEST_P(ModelOnDevice, TrainingStepMatchesCpu) {
  SKIP_WITHOUT(dev());
  const GPTConfig& c = variant().config;
  auto cpu = make(Device::cpu()), on = make(dev());
  nn::AdamWOptions o;
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  // Adam's first steps move each weight by about lr * g / (|g| + eps): with the default eps a
  // gradient near zero, whose sign float rounding decides, would move by +-lr on either device.
  // A larger eps keeps the update a smooth function of the gradient (the kernel itself is compared
  // bit for bit in cuda_ops_test.cpp).
  o.eps = 1e-4;
  nn::AdamW cpu_opt(cpu->parameters(), o), opt(on->parameters(), o);
  const std::vector<int32_t> s = tokens(2 * (c.block_size + 1), c.vocab_size, 3);
  std::vector<int32_t> in, out;
  for (int b = 0; b < 2; ++b)
    for (int64_t t = 0; t < c.block_size; ++t) {
      in.push_back(s[size_t(b * (c.block_size + 1) + t)]);
      out.push_back(s[size_t(b * (c.block_size + 1) + t + 1)]);
    }
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE(variant().name + " step " + std::to_string(step));
    const StepResult want = train_step(*cpu, cpu_opt, ids_on(in, 2, Device::cpu()), ids_on(out, 2, Device::cpu()));
    const StepResult got = train_step(*on, opt, ids_on(in, 2, dev()), ids_on(out, 2, dev()));
    EXPECT_NEAR(got.loss, want.loss, 1e-5 * (1 + want.loss));
    EXPECT_NEAR(got.norm, want.norm, 1e-4 * (1 + want.norm));
    const auto cpu_params = cpu->named_parameters(), params = on->named_parameters();
    ASSERT_EQ(params.size(), cpu_params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(params[i].second.device() == dev()) << params[i].first;
      expect_close(params[i].second.grad(), cpu_params[i].second.grad(), 1e-4, params[i].first + " gradient");
      expect_close(params[i].second, cpu_params[i].second, 1e-5, params[i].first);
    }
  }
}

// NOTE [ Deferred range checks ]: the step's host synchronisations do not grow with the model. On
// CUDA: the batch's two transfers, and the loss read and the clipped norm's read, each after one
// read of the range checks deferred since the last read; none on the CPU.
TEST_P(ModelOnDevice, HostSyncsPerStepDoNotGrowWithTheModel) {
  SKIP_WITHOUT(dev());
  std::vector<uint64_t> syncs;
  for (int64_t layers : {1, 3}) {
    GPTConfig c = variant().config;
    c.n_layer = layers;
    Generator g(5);
    GPT model(c, &g);
    model.to(dev());
    nn::AdamW opt(model.parameters());
    const std::vector<int32_t> s = tokens(2 * c.block_size, c.vocab_size, 8);
    const std::vector<int32_t> t = tokens(2 * c.block_size, c.vocab_size, 9);
    train_step(model, opt, ids_on(s, 2, dev()), ids_on(t, 2, dev()));  // warm-up: the allocator's first blocks
    const uint64_t before = ops::host_sync_count();
    train_step(model, opt, ids_on(s, 2, dev()), ids_on(t, 2, dev()));
    syncs.push_back(ops::host_sync_count() - before);
  }
  if (dev().is_cpu()) {
    EXPECT_EQ(syncs[0] + syncs[1], 0u);
  } else {
    EXPECT_EQ(syncs[0], syncs[1]) << "a deeper model waits for the GPU more often";
    EXPECT_LE(syncs[1], 6u);
  }
}

// A token id past the vocabulary: the CPU throws at the embedding, a GPU at the next read of a
// result (NOTE [ Deferred range checks ]); the message is the same, and nothing is read past it.
TEST_P(ModelOnDevice, ATokenPastTheVocabularyFailsWithTheCpusMessage) {
  SKIP_WITHOUT(dev());
  const GPTConfig& c = variant().config;
  auto model = make(dev());
  std::vector<int32_t> in = tokens(c.block_size, c.vocab_size, 10), out = in;
  in[3] = int32_t(c.vocab_size);
  try {
    host(model->loss(ids_on(in, 1, dev()), ids_on(out, 1, dev())));
    ADD_FAILURE() << "no error for token id " << c.vocab_size;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("index " + std::to_string(c.vocab_size) + " is out of range for axis 0 of size " +
                                         std::to_string(c.vocab_size)),
              std::string::npos)
        << e.what();
  }
  // The next step is not blamed for it.
  EXPECT_NO_THROW(host(model->loss(ids_on(out, 1, dev()), ids_on(out, 1, dev()))));
}

// Token by token through the cache equals the full forward, and past the window (RoPE) the slid
// cache gives the CPU's logits.
TEST_P(ModelOnDevice, KvCacheAndItsSlideMatchCpu) {
  SKIP_WITHOUT(dev());
  const GPTConfig& c = variant().config;
  auto cpu = make(Device::cpu()), on = make(dev());
  cpu->eval();
  on->eval();
  NoGradGuard no_grad;
  const int64_t n = c.rope ? 2 * c.block_size + 3 : c.block_size;
  const std::vector<int32_t> s = tokens(n, c.vocab_size, 4);
  KVCache cpu_cache(c), cache(c, 1, 0, DType::f32, dev());
  Tensor full = on->forward(ids_on(std::vector<int32_t>(s.begin(), s.begin() + c.block_size), 1, dev()));  // (1, T, V)
  for (int64_t t = 0; t < n; ++t) {
    if (cache.length() >= c.block_size) {
      cache.slide(c.block_size - 1);
      cpu_cache.slide(c.block_size - 1);
    }
    const std::vector<int32_t> one{s[size_t(t)]};
    Tensor got = on->forward(ids_on(one, 1, dev()), &cache);
    Tensor want = cpu->forward(ids_on(one, 1, Device::cpu()), &cpu_cache);
    expect_close(got, want, 1e-4, variant().name + " cached token " + std::to_string(t));
    if (t < c.block_size)
      expect_close(got, ops::narrow(full, 1, t, 1), 1e-4, variant().name + " cache vs full at " + std::to_string(t));
  }
  EXPECT_EQ(cache.position, cpu_cache.position);
}

TEST_P(ModelOnDevice, GenerateMatchesCpu) {
  SKIP_WITHOUT(dev());
  const GPTConfig& c = variant().config;
  // Weights far larger than GPT-2's init: the greedy choice is never a near tie float rounding flips.
  Generator g(9);
  GPT cpu(c, &g);
  {
    NoGradGuard no_grad;
    for (auto& p : cpu.parameters()) ops::copy_(p, ops::mul(ops::randn(p.shape(), DType::f32, Device::cpu(), &g), 0.5));
  }
  cpu.eval();
  Generator g2(9);
  GPT on(c, &g2);
  {
    NoGradGuard no_grad;
    const auto src = cpu.parameters(), dst = on.parameters();
    for (size_t i = 0; i < src.size(); ++i) ops::copy_(dst[i], src[i]);
  }
  on.to(dev());
  on.eval();
  const std::vector<int32_t> prompt = tokens(5, c.vocab_size, 6);
  for (bool use_cache : {true, false}) {
    SampleOptions o;
    o.temperature = 0;
    o.use_cache = use_cache;
    // Past the window: RoPE slides its cache, learned positions re-run the last window.
    const int64_t n = 2 * c.block_size;
    EXPECT_EQ(generate(on, prompt, n, o), generate(cpu, prompt, n, o)) << variant().name << " cache " << use_cache;
    SampleOptions sampled = o;
    sampled.temperature = 0.8;
    sampled.top_k = 5;
    sampled.seed = 3;
    EXPECT_EQ(generate(on, prompt, 8, sampled), generate(cpu, prompt, 8, sampled)) << variant().name;
  }
}

// The deferred range checks a GPU uses, run through the whole model on the CPU: a training step
// gives bit for bit the loss and gradients of the immediate checks, and a bad id fails at the check.
TEST(ModelDeferredChecks, ATrainingStepIsUnchangedAndABadIdFailsAtTheCheck) {
  const GPTConfig c = tiny(true, 0);
  const std::vector<int32_t> in = tokens(2 * c.block_size, c.vocab_size, 12), out = tokens(2 * c.block_size, c.vocab_size, 13);
  auto run = [&](bool deferred) {
    std::optional<ops::DeferRangeChecksOnCpu> defer;
    if (deferred) defer.emplace();
    Generator g(5);
    GPT model(c, &g);
    Tensor loss = model.loss(ids_on(in, 2, Device::cpu()), ids_on(out, 2, Device::cpu()));
    backward(loss);
    ops::check_deferred_errors();
    std::vector<Tensor> r{loss};
    for (const Tensor& p : model.parameters()) r.push_back(p.grad());
    return r;
  };
  const std::vector<Tensor> want = run(false), got = run(true);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(host(got[i]), host(want[i])) << i;

  ops::DeferRangeChecksOnCpu defer;
  Generator g(5);
  GPT model(c, &g);
  std::vector<int32_t> bad = in;
  bad[5] = int32_t(c.vocab_size + 3);
  Tensor loss = model.loss(ids_on(bad, 2, Device::cpu()), ids_on(out, 2, Device::cpu()));  // no throw yet
  EXPECT_THROW(
      {
        try {
          ops::check_deferred_errors();
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find("index 40 is out of range for axis 0 of size 37"), std::string::npos)
              << e.what();
          throw;
        }
      },
      std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Devices, ModelOnDevice,
                         ::testing::Combine(::testing::Values(DeviceType::cpu, DeviceType::cuda),
                                            ::testing::Range<size_t>(0, variants().size())),
                         [](const ::testing::TestParamInfo<ModelOnDevice::ParamType>& info) {
                           return std::string(std::get<0>(info.param) == DeviceType::cuda ? "cuda_" : "cpu_") +
                                  variants()[std::get<1>(info.param)].name;
                         });

}  // namespace
}  // namespace gpt

void PrintTo(DeviceType t, std::ostream* os) { *os << (t == DeviceType::cuda ? "cuda" : "cpu"); }

}  // namespace mvgpt
