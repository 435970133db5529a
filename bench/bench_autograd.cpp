// Engine overhead on tiny tensors, where the arithmetic is negligible: a chain of 1000 adds of a (4)
// tensor, y = y + x. Recording (forward with a leaf that requires grad) and backward are timed
// separately; the raw-op chain (no autograd) is the floor. Counter per_op: time per recorded op or
// per backward node. PyTorch's numbers for the same chain: bench/torch_autograd_overhead.py.
#include <benchmark/benchmark.h>

#include <mvgpt/autograd/ops.h>
#include <mvgpt/backends/ops.h>

namespace {

using namespace mvgpt;

constexpr int kChain = 1000;

void set_per_op(benchmark::State& state) {
  state.counters["per_op"] =
      benchmark::Counter(double(state.iterations()) * kChain, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_RawAddChain(benchmark::State& state) {
  Tensor x = ops::randn({4});
  for (auto _ : state) {
    Tensor y = x;
    for (int i = 0; i < kChain; ++i) y = ops::add(y, x);
    benchmark::DoNotOptimize(y.raw_data());
  }
  set_per_op(state);
}
BENCHMARK(BM_RawAddChain)->Unit(benchmark::kMicrosecond);

void BM_AutogradRecordAddChain(benchmark::State& state) {
  Tensor x = parameter(ops::randn({4}));
  for (auto _ : state) {
    Tensor y = x;
    for (int i = 0; i < kChain; ++i) y = y + x;
    benchmark::DoNotOptimize(y.raw_data());
    state.PauseTiming();
    y = Tensor();  // freeing the graph is not part of recording
    state.ResumeTiming();
  }
  set_per_op(state);
}
BENCHMARK(BM_AutogradRecordAddChain)->Unit(benchmark::kMicrosecond);

void BM_AutogradBackwardAddChain(benchmark::State& state) {
  Tensor x = parameter(ops::randn({4}));
  for (auto _ : state) {
    state.PauseTiming();
    Tensor y = x;
    for (int i = 0; i < kChain; ++i) y = y + x;
    Tensor g = ops::ones({4});
    zero_grad({x});
    state.ResumeTiming();
    backward(y, g);
  }
  set_per_op(state);
}
BENCHMARK(BM_AutogradBackwardAddChain)->Unit(benchmark::kMicrosecond);

// mul saves both inputs: the cost of SavedTensor and of a backward that computes.
void BM_AutogradRecordAndBackwardMulChain(benchmark::State& state) {
  Tensor x = parameter(ops::full({4}, 1.0));
  for (auto _ : state) {
    Tensor y = x;
    for (int i = 0; i < kChain; ++i) y = y * x;
    backward(y, ops::ones({4}));
    zero_grad({x});
  }
  set_per_op(state);
}
BENCHMARK(BM_AutogradRecordAndBackwardMulChain)->Unit(benchmark::kMicrosecond);

}  // namespace
