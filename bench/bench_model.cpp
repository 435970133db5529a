// End-to-end cases of the series' model (14.5M parameters with RoPE, vocab 10,000): one training
// step (batch 16 x 256, AdamW) in tokens/s, and decoding in ms/token for the three methods of the
// context app (sliding cache, re-running the window, all of a long context at once). fp32, and for
// the training step and the sliding cache also --precision bf16 (the last argument 1: products in
// bf16 summed in fp32, NOTE [ Precision policy ]). The CUDA cases (BM_TrainStepCuda at 64 x 256,
// BM_DecodeCacheCuda) run on a GPU with bf16 products and count their kernel launches; skipped
// without one.
#include <benchmark/benchmark.h>

#include <mvgpt/autograd/ops.h>
#include <mvgpt/autograd/precision.h>
#include <mvgpt/backends/cuda/cuda_backend.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/gpt/kv_cache.h>
#include <mvgpt/gpt/model.h>
#include <mvgpt/nn/muon.h>
#include <mvgpt/nn/optim.h>

#include "token_ids.h"

namespace mvgpt::gpt {
namespace {

using bench::token_ids;

GPTConfig series(bool rope) { return GPTConfig::preset(rope ? "series-rope" : "series"); }

void BM_TrainStep(benchmark::State& state) {
  const bool rope = state.range(0);
  const int64_t B = state.range(1), T = 256;
  const PrecisionGuard precision(state.range(2) ? Precision::bf16 : Precision::fp32);
  Generator g(1337);
  GPT model(series(rope), &g);
  nn::AdamWOptions opt;
  opt.lr = 6e-4;
  opt.weight_decay = 0.1;
  nn::AdamW adamw(nn::weight_decay_groups(model.named_parameters(), 0.1), opt);
  Tensor x = token_ids(B, T, 10000, 1), y = token_ids(B, T, 10000, 2);
  for (auto _ : state) {
    adamw.zero_grad();
    Tensor loss = model.loss(x, y);
    backward(loss);
    adamw.step();
    benchmark::DoNotOptimize(loss.item<float>());
  }
  state.counters["tokens/s"] = benchmark::Counter(double(B * T), benchmark::Counter::kIsIterationInvariantRate);
}
// Batch 8 is --recipe speedrun's (its model adds QK-norm, and Muon replaces AdamW on the matrices:
// BM_OptimizerStep gives that difference).
BENCHMARK(BM_TrainStep)->Args({1, 16, 0})->Args({1, 8, 0})->Args({0, 16, 0})->Args({1, 16, 1})->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(5);

// The optimizer's step alone on the series' RoPE model, gradients in place: AdamW (0) or Muon on the
// hidden matrices with AdamW on the rest (1), products in fp32 (0) or bf16 (1), and Muon's
// Newton-Schulz steps (Jordan's coefficients for 5, Polar Express's for fewer, as pretrain's
// --muon-coefficients). Against BM_TrainStep it gives Muon's share of a step.
void BM_OptimizerStep(benchmark::State& state) {
  const PrecisionGuard precision(state.range(1) ? Precision::bf16 : Precision::fp32);
  Generator g(1337);
  GPT model(series(true), &g);
  backward(model.loss(token_ids(2, 64, 10000, 1), token_ids(2, 64, 10000, 2)));  // every gradient defined
  const nn::AdamWOptions adamw{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  std::unique_ptr<nn::Optimizer> opt;
  if (state.range(0) == 0) {
    opt = std::make_unique<nn::AdamW>(nn::weight_decay_groups(model.named_parameters(), 0.1), adamw);
  } else {
    nn::MuonSplit split = nn::muon_split(model, 0.0, 0.1);
    const int steps = int(state.range(2));
    const auto coefficients = steps < 5 ? nn::MuonOptions::Coefficients::polar_express : nn::MuonOptions::Coefficients::jordan;
    opt = std::make_unique<nn::Muon>(split.matrices, split.others,
                                     nn::MuonOptions{.ns_steps = steps, .coefficients = coefficients, .adamw = adamw});
  }
  for (auto _ : state) opt->step();
}
BENCHMARK(BM_OptimizerStep)
    ->Args({0, 0, 0})
    ->Args({1, 0, 5})
    ->Args({1, 0, 3})
    ->Args({1, 1, 5})
    ->Args({1, 1, 3})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(3);

// Sliding cache: one token through the model with a full window cached. 0: fp32; 1: bf16 products
// and a bf16 cache (cache_dtype); 2: bf16 products with a float32 cache, what 1 was before bf16 caches.
void BM_DecodeCache(benchmark::State& state) {
  const PrecisionGuard precision(state.range(0) ? Precision::bf16 : Precision::fp32);  // weights cast once
  Generator g(1337);
  GPT model(series(true), &g);
  NoGradGuard no_grad;
  KVCache cache(model.config(), 1, 0, state.range(0) == 2 ? DType::f32 : cache_dtype(DType::f32, Device::cpu()));
  model.forward(token_ids(1, 256, 10000, 1), &cache, true);
  Tensor one = token_ids(1, 1, 10000, 2);
  for (auto _ : state) {
    cache.slide(255);
    benchmark::DoNotOptimize(model.forward(one, &cache, true));
  }
  state.counters["ms/token"] = benchmark::Counter(1e-3, benchmark::Counter::kIsIterationInvariantRate |
                                                           benchmark::Counter::kInvert);
}
BENCHMARK(BM_DecodeCache)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3);

// Re-running the window: the last 256 tokens in full for each new token.
void BM_DecodeWindow(benchmark::State& state) {
  Generator g(1337);
  GPT model(series(state.range(0)), &g);
  NoGradGuard no_grad;
  Tensor window = token_ids(1, 256, 10000, 1);
  for (auto _ : state) benchmark::DoNotOptimize(model.forward(window, nullptr, true));
  state.counters["ms/token"] = benchmark::Counter(1e-3, benchmark::Counter::kIsIterationInvariantRate |
                                                           benchmark::Counter::kInvert);
}
BENCHMARK(BM_DecodeWindow)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3);

// All of a 768-token stream at once (RoPE only), per token.
void BM_DecodeFull(benchmark::State& state) {
  Generator g(1337);
  GPT model(series(true), &g);
  NoGradGuard no_grad;
  Tensor stream = token_ids(1, 768, 10000, 1);
  for (auto _ : state) benchmark::DoNotOptimize(model.forward(stream));
  state.counters["ms/token"] = benchmark::Counter(768e-3, benchmark::Counter::kIsIterationInvariantRate |
                                                             benchmark::Counter::kInvert);
}
BENCHMARK(BM_DecodeFull)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3);

// The cases of bench/compare --device cuda, on cuda:0 with bf16 products (tensor cores), against
// PyTorch's eager autocast: one AdamW step of the RoPE model at B x 256 (64, the size a GPU wants),
// and one sliding-cache token with the bf16 weight copies. Each counts the kernel launches it made
// (cuda::kernel_launches()). Skipped where no GPU is visible.
bool skip_without_gpu(benchmark::State& state) {
  if (cuda_available()) return false;
  static const std::string why = cuda_status().reason;  // "no CUDA GPU is visible (...)"
  state.SkipWithError(why.c_str());
  return true;
}

void BM_TrainStepCuda(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const Device device = Device::cuda();
  const int64_t B = state.range(0), T = 256;
  const PrecisionGuard precision(Precision::bf16);
  Generator g(1337);
  GPT model(series(true), &g);
  model.to(device);
  nn::AdamWOptions opt;
  opt.lr = 6e-4;
  opt.weight_decay = 0.1;
  nn::AdamW adamw(nn::weight_decay_groups(model.named_parameters(), 0.1), opt);
  const Tensor x = ops::to(token_ids(B, T, 10000, 1), device), y = ops::to(token_ids(B, T, 10000, 2), device);
  auto step = [&] {
    adamw.zero_grad();
    Tensor loss = model.loss(x, y);
    backward(loss);
    adamw.step();
    return loss;
  };
  // item() reads CPU tensors only: the copy to the host also waits for the step's kernels.
  auto wait_for = [](const Tensor& loss) { return ops::to(loss.detach(), Device::cpu()).item<float>(); };
  (void)wait_for(step());  // warm-up: the allocator's blocks, cuBLAS's first calls
  int64_t launches = 0;
  for (auto _ : state) {
    const int64_t before = cuda::kernel_launches();
    const Tensor loss = step();
    launches += cuda::kernel_launches() - before;
    benchmark::DoNotOptimize(wait_for(loss));
  }
  state.counters["tokens/s"] = benchmark::Counter(double(B * T), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["launches/step"] = double(launches) / double(state.iterations());
}
BENCHMARK(BM_TrainStepCuda)->Arg(64)->ArgName("B")->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(5);

void BM_DecodeCacheCuda(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const Device device = Device::cuda();
  const PrecisionGuard precision(Precision::bf16);  // weights cast once
  Generator g(1337);
  GPT model(series(true), &g);
  model.to(device);
  NoGradGuard no_grad;
  KVCache cache(model.config(), 1, 0, DType::f32, device);
  model.forward(ops::to(token_ids(1, 256, 10000, 1), device), &cache, true);
  const Tensor one = ops::to(token_ids(1, 1, 10000, 2), device);
  Backend& backend = backend_for(device);
  int64_t launches = 0;
  for (auto _ : state) {
    const int64_t before = cuda::kernel_launches();
    cache.slide(255);
    benchmark::DoNotOptimize(model.forward(one, &cache, true));
    launches += cuda::kernel_launches() - before;
    backend.synchronize();
  }
  state.counters["ms/token"] = benchmark::Counter(1e-3, benchmark::Counter::kIsIterationInvariantRate |
                                                           benchmark::Counter::kInvert);
  state.counters["launches/token"] = double(launches) / double(state.iterations());
}
BENCHMARK(BM_DecodeCacheCuda)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3);

}  // namespace
}  // namespace mvgpt::gpt
