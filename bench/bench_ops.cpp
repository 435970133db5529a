// Raw-op throughput at the model's shapes (B*T = 4096 tokens, C = 384, MLP 1536, vocab 10000).
// GEMMs report GFLOP/s; memory-bound ops report GB/s of tensor bytes read and written.
#include <benchmark/benchmark.h>

#include <vector>

#include <mvgpt/backends/cpu/amx_gemm.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/fused/bias_gelu.h>

namespace mvgpt {
namespace {

Tensor input(const Shape& shape) {
  Generator g(1);
  return ops::randn(shape, DType::f32, Device::cpu(), &g);
}

void set_bytes(benchmark::State& state, double bytes) {
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// op(A) (M x K) @ op(B) (K x N) with operands of type `operands`, each a transposed view where ta
// or tb (A stored (K, M), B stored (N, K)); GFLOP/s, and GB/s of the operands read once and the
// float32 result written, what bounds the one-row (GEMV) cases.
void product_case(benchmark::State& state, DType operands, int64_t M, int64_t K, int64_t N, bool ta, bool tb) {
  Tensor a = ta ? ops::transpose(ops::to(input({K, M}), operands), 0, 1) : ops::to(input({M, K}), operands);
  Tensor b = tb ? ops::transpose(ops::to(input({N, K}), operands), 0, 1) : ops::to(input({K, N}), operands);
  for (auto _ : state) benchmark::DoNotOptimize(ops::matmul(a, b, DType::f32));
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * double(M) * double(N) * double(K) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  set_bytes(state, double((M * K + K * N) * int64_t(dtype_size(operands)) + M * N * 4));
}

// (M x K) @ (K x N); the last argument 1 means the right operand is a transposed view (x @ W^T).
// In float32 (BM_Sgemm), or with bfloat16 operands summed in float32 (BM_Bf16Gemm: oneDNN, or
// for one row mvgpt's GEMV, bf16_gemm.h; the operands converted beforehand, as the precision
// policy's weight copies are).
void gemm_case(benchmark::State& state, DType operands) {
  product_case(state, operands, state.range(0), state.range(1), state.range(2), false, state.range(3) != 0);
}
void BM_Sgemm(benchmark::State& state) { gemm_case(state, DType::f32); }
// The last argument for bf16, tiles: 1 lets mvgpt's AMX kernel take the product where it would (NOTE
// [ Large products on AMX tiles ]), 0 sends it to oneDNN, on a CPU with AMX; elsewhere both are oneDNN.
void BM_Bf16Gemm(benchmark::State& state) {
  cpu::amx::set_large_enabled(state.range(4) != 0);
  gemm_case(state, DType::bf16);
  cpu::amx::set_large_enabled(true);
}
// The model's products, decoding's one-row ones (a GEMV: GB/s is the figure), and for bf16 the
// 3072^3 peak (MFU under bf16 in bench/compare).
BENCHMARK(BM_Sgemm)
    ->Args({4096, 384, 1152, 0})
    ->Args({4096, 384, 1536, 0})
    ->Args({4096, 1536, 384, 0})
    ->Args({4096, 384, 10000, 0})
    ->Args({4096, 384, 1152, 1})
    ->Args({1, 384, 1536, 1})
    ->Args({1, 384, 10000, 1})
    ->ArgNames({"M", "K", "N", "bT"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Bf16Gemm)
    ->ArgsProduct({{4096}, {384}, {1152, 1536}, {0, 1}, {1, 0}})
    ->ArgsProduct({{4096}, {1536}, {384}, {0}, {1, 0}})
    ->ArgsProduct({{1024}, {384}, {10000}, {1}, {1, 0}})
    ->Args({4096, 384, 10000, 0, 1})
    ->Args({1, 384, 1536, 1, 1})
    ->Args({1, 384, 10000, 1, 1})
    ->Args({3072, 3072, 3072, 0, 1})
    ->ArgNames({"M", "K", "N", "bT", "tiles"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The weight gradients' products, dW (M, N) = dY^T (M, K = B*T) X (K, N), with aT = 1 as the
// backward has them (A = dY stored (K, M), a transposed view) and aT = 0 with dY^T stored dense:
// oneDNN may hand the two to different kernels (the op profile names them).
void BM_Bf16WeightGradient(benchmark::State& state) {
  product_case(state, DType::bf16, state.range(0), state.range(1), state.range(2), state.range(3) != 0, false);
}
BENCHMARK(BM_Bf16WeightGradient)
    ->Args({1152, 4096, 384, 1})
    ->Args({1152, 4096, 384, 0})
    ->Args({384, 4096, 384, 1})
    ->Args({384, 4096, 384, 0})
    ->Args({1536, 4096, 384, 1})
    ->Args({1536, 4096, 384, 0})
    ->Args({384, 4096, 1536, 1})
    ->Args({384, 4096, 1536, 0})
    ->ArgNames({"M", "K", "N", "aT"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The series' float32 products as the step has them: the forward's x W^T (bT), the backward's
// dY W and dW = dY^T X (aT); the classifier's three with 10,000 classes.
void BM_SgemmModel(benchmark::State& state) {
  product_case(state, DType::f32, state.range(0), state.range(1), state.range(2), state.range(3) != 0,
               state.range(4) != 0);
}
BENCHMARK(BM_SgemmModel)
    ->Args({4096, 384, 1152, 0, 1})->Args({4096, 384, 384, 0, 1})->Args({4096, 384, 1536, 0, 1})
    ->Args({4096, 1536, 384, 0, 1})->Args({4096, 384, 10000, 0, 1})
    ->Args({4096, 1152, 384, 0, 0})->Args({4096, 384, 384, 0, 0})->Args({4096, 1536, 384, 0, 0})
    ->Args({4096, 384, 1536, 0, 0})->Args({4096, 10000, 384, 0, 0})
    ->Args({1152, 4096, 384, 1, 0})->Args({384, 4096, 384, 1, 0})->Args({1536, 4096, 384, 1, 0})
    ->Args({384, 4096, 1536, 1, 0})->Args({10000, 4096, 384, 1, 0})
    ->ArgNames({"M", "K", "N", "aT", "bT"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// A decoded token's products alone, in the series' model's order: per block x W^T for the fused
// qkv (1152 x 384), the attention's output (384 x 384), the MLP's two (1536 x 384, 384 x 1536), then
// the head (10000 x 384); every weight matrix a different allocation, as in the model (28.9 MB in
// bf16). Against BM_DecodeCache/1, what the rest of a token costs; against BM_ReadBandwidth at
// 28 MiB, how far the products are from streaming their weights.
void BM_DecodeProducts(benchmark::State& state) {
  const DType operands = state.range(0) ? DType::bf16 : DType::f32;
  std::vector<Tensor> weights;
  for (int layer = 0; layer < 6; ++layer)
    for (Shape s : {Shape{1152, 384}, Shape{384, 384}, Shape{1536, 384}, Shape{384, 1536}})
      weights.push_back(ops::to(input(s), operands));
  weights.push_back(ops::to(input({10000, 384}), operands));
  Tensor x384 = ops::to(input({1, 384}), operands), x1536 = ops::to(input({1, 1536}), operands);
  double bytes = 0;
  for (const Tensor& w : weights) bytes += double(w.numel()) * double(dtype_size(operands));
  for (auto _ : state)
    for (const Tensor& w : weights)
      benchmark::DoNotOptimize(ops::matmul(w.size(1) == 384 ? x384 : x1536, ops::transpose(w, 0, 1), DType::f32));
  set_bytes(state, bytes);
}
BENCHMARK(BM_DecodeProducts)->Arg(0)->Arg(1)->ArgName("bf16")->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2);

// The machine's 2-thread sgemm rate on a large square product: the denominator of model FLOPs
// utilisation (bench/compare).
void BM_SgemmPeak(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = input({n, n}), b = input({n, n});
  for (auto _ : state) benchmark::DoNotOptimize(ops::matmul(a, b));
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * double(n) * double(n) * double(n) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_SgemmPeak)->Arg(3072)->ArgName("n")->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2);

// Memory read bandwidth: summing a working set of the given size, again and again. Decoding one
// token reads every weight once, so bench/compare measures it at the size of the weights (float32:
// 55 MiB, bf16 copies: 28 MiB, which may sit in a large L3) for the floor under ms/token; 512 MB is
// far past the caches (DRAM). One tensor of 2 MB or more is on huge pages (the CPU allocator), as
// decoding's weights are (the bf16 copies' arena, tensor/host_arena.h).
void BM_ReadBandwidth(benchmark::State& state) {
  Tensor a = ops::full({state.range(0) * (int64_t(1) << 20) / 4}, 1.0);  // MiB of float32
  for (auto _ : state) benchmark::DoNotOptimize(ops::sum(a));
  set_bytes(state, 4.0 * double(a.numel()));
}
BENCHMARK(BM_ReadBandwidth)->Arg(512)->Arg(55)->Arg(28)->ArgName("MiB")->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2);

// Attention-like batch: (B*H, T, D) @ (B*H, D, T) with many small matrices.
void BM_BatchedSmallGemm(benchmark::State& state) {
  const int64_t BH = state.range(0), T = state.range(1), D = 64;
  Tensor q = input({BH, T, D});
  Tensor k = ops::transpose(input({BH, T, D}), 1, 2);
  for (auto _ : state) benchmark::DoNotOptimize(ops::matmul(q, k));
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * double(BH * T * T * D) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_BatchedSmallGemm)->Args({96, 256})->ArgNames({"BH", "T"})->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Add(benchmark::State& state) {
  Tensor a = input({4096, 1536}), b = input({4096, 1536});
  for (auto _ : state) benchmark::DoNotOptimize(ops::add(a, b));
  set_bytes(state, 3.0 * 4 * double(a.numel()));
}
BENCHMARK(BM_Add)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_AddBiasRow(benchmark::State& state) {
  Tensor a = input({4096, 1536}), bias = input({1536});
  for (auto _ : state) benchmark::DoNotOptimize(ops::add(a, bias));
  set_bytes(state, 2.0 * 4 * double(a.numel()));
}
BENCHMARK(BM_AddBiasRow)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Gelu(benchmark::State& state) {
  Tensor a = input({4096, 1536});
  for (auto _ : state) benchmark::DoNotOptimize(ops::gelu(a));
  set_bytes(state, 2.0 * 4 * double(a.numel()));
}
BENCHMARK(BM_Gelu)->Unit(benchmark::kMicrosecond)->UseRealTime();

// GELU's backward at the MLP's shape: one fused pass over x and the gradient.
void BM_GeluBackward(benchmark::State& state) {
  Tensor x = input({4096, 1536}), g = input({4096, 1536});
  for (auto _ : state) benchmark::DoNotOptimize(ops::unary_backward(UnaryOp::gelu, x, g));
  set_bytes(state, 3.0 * 4 * double(x.numel()));
}
BENCHMARK(BM_GeluBackward)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The MLP's GELU as a bf16 product's operand (fused/bias_gelu.h): bfloat16(gelu(x)) in one pass,
// against BM_Gelu and then a conversion.
// bf16:1 reads a bfloat16 pre-activation, as the MLP's product writes it under bf16 products (NOTE
// [ GELU of a bfloat16 by table ] in autograd/fused/bias_gelu_cpu.cpp).
void BM_GeluRounded(benchmark::State& state) {
  Tensor a = input({4096, 1536});
  if (state.range(0)) a = ops::to(a, DType::bf16);
  for (auto _ : state) benchmark::DoNotOptimize(fused::gelu_rounded(a));
  set_bytes(state, (state.range(0) ? 4.0 : 6.0) * double(a.numel()));
}
BENCHMARK(BM_GeluRounded)->ArgName("bf16")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

// NOTE [ Cold cases ]
// A training step's ops read activations the cache lost long ago and write into memory it does not
// hold (hundreds of MB live between a forward op and its backward). The cold cases write evict:N
// MiB between iterations (outside the timing) so their tensors come from memory, as in the step;
// evict:0 is the same case hot. On the 2-core AMX Xeon these showed what the step profile hid: the
// GELU took 3.4x its hot time before it fetched ahead (NOTE [ Prefetching ahead ] in
// backends/cpu/vec_math.h), and a product waits on its float32 output (NOTE [ bf16 results ] in
// backends/cpu/blas.cpp).
void evict_caches(benchmark::State& state, std::vector<float>& sweep) {
  state.PauseTiming();
  for (size_t i = 0; i < sweep.size(); i += 16) sweep[i] += 1.0f;  // one write a cache line
  state.ResumeTiming();
}
std::vector<float> eviction_buffer(benchmark::State& state) { return std::vector<float>(size_t(state.range(0)) << 18); }

void BM_GeluRoundedCold(benchmark::State& state) {
  Tensor a = input({4096, 1536});
  std::vector<float> sweep = eviction_buffer(state);
  for (auto _ : state) {
    evict_caches(state, sweep);
    benchmark::DoNotOptimize(fused::gelu_rounded(a));
  }
  set_bytes(state, 6.0 * double(a.numel()));
}
BENCHMARK(BM_GeluRoundedCold)->ArgName("evict")->Arg(0)->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();

// A conversion: a few cycles a cache line, where the hardware prefetchers keep up better.
void BM_ConvertCold(benchmark::State& state) {
  Tensor a = input({4096, 1536});
  std::vector<float> sweep = eviction_buffer(state);
  for (auto _ : state) {
    evict_caches(state, sweep);
    benchmark::DoNotOptimize(ops::to(a, DType::bf16));
  }
  set_bytes(state, 6.0 * double(a.numel()));
}
BENCHMARK(BM_ConvertCold)->ArgName("evict")->Arg(0)->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The MLP's first product (N 1,536), bf16 operands, with a float32 result (bf16:0) or a bfloat16 one
// (bf16:1); N 384: the attention's output projection (a float32 result the residual add reads next).
void BM_Bf16GemmCold(benchmark::State& state) {
  const int64_t M = 4096, K = 384, N = state.range(2);
  const DType result = state.range(1) ? DType::bf16 : DType::f32;
  Tensor a = ops::to(input({M, K}), DType::bf16);
  Tensor b = ops::transpose(ops::to(input({N, K}), DType::bf16), 0, 1);
  std::vector<float> sweep = eviction_buffer(state);
  for (auto _ : state) {
    evict_caches(state, sweep);
    benchmark::DoNotOptimize(ops::matmul(a, b, result));
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * double(M) * double(N) * double(K) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Bf16GemmCold)
    ->ArgNames({"evict", "bf16", "N"})
    ->Args({0, 0, 1536})
    ->Args({256, 0, 1536})
    ->Args({0, 1, 1536})
    ->Args({256, 1, 1536})
    ->Args({0, 0, 384})
    ->Args({256, 0, 384})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The weight gradients as the step meets them: dW (M, N) = dY^T X with dY (K, M) and X (K, N) read
// from memory (evict:256 writes 256 MB between products), where the transposed operand's 32-column
// panels are a line of each of K rows far apart. The classifier's (10,000 x 4,096 x 384) reads an
// 82 MB dY^T.
void BM_Bf16WeightGradientCold(benchmark::State& state) {
  const int64_t M = state.range(1), K = 4096, N = state.range(2);
  Tensor a = ops::transpose(ops::to(input({K, M}), DType::bf16), 0, 1);
  Tensor b = ops::to(input({K, N}), DType::bf16);
  std::vector<float> sweep = eviction_buffer(state);
  for (auto _ : state) {
    evict_caches(state, sweep);
    benchmark::DoNotOptimize(ops::matmul(a, b, DType::f32));
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * double(M) * double(N) * double(K) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Bf16WeightGradientCold)
    ->ArgNames({"evict", "M", "N"})
    ->ArgsProduct({{0, 256}, {384}, {1536}})
    ->ArgsProduct({{0, 256}, {1536}, {384}})
    ->ArgsProduct({{0, 256}, {10000}, {384}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Its backward as the first layer's operand: bfloat16(grad * gelu'(x)) and the bias gradient in one
// pass, against BM_GeluBackward and then a conversion and a column sum (BM_Sum/cols0_rows1_all2:0).
// bf16:1, the MLP's under bf16 products: x and grad in bfloat16 (NOTE [ The MLP's activations in
// bf16 ] in autograd/fused/bias_gelu.h).
void BM_GeluBackwardRounded(benchmark::State& state) {
  const DType dt = state.range(0) ? DType::bf16 : DType::f32;
  Tensor a = ops::to(input({4096, 1536}), dt), g = ops::to(input({4096, 1536}), dt);
  for (auto _ : state) benchmark::DoNotOptimize(fused::gelu_backward_rounded(a, g));
  set_bytes(state, (2.0 * double(dtype_size(dt)) + 2.0) * double(a.numel()));
}
BENCHMARK(BM_GeluBackwardRounded)->ArgName("bf16")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The classifier's two backward products over its bf16 gradient dlogits (4,096 x 10,000) from
// memory: dW = dlogits^T x (prod:0) and dX = dlogits W (prod:1), with dlogits's rows 10,000 apart
// (pad:0: 20,000 bytes, every other row off a 64-byte boundary) or 10,016 (pad:1, 64-byte rows).
void BM_Bf16ClassifierBackwardCold(benchmark::State& state) {
  const int64_t N = 4096, V = 10000, C = 384, Vp = state.range(1) ? 10016 : V;
  Tensor d = ops::narrow(ops::to(input({N, Vp}), DType::bf16), 1, 0, V);
  Tensor x = ops::to(input({N, C}), DType::bf16), w = ops::to(input({V, C}), DType::bf16);
  std::vector<float> sweep = eviction_buffer(state);
  for (auto _ : state) {
    evict_caches(state, sweep);
    if (state.range(2)) benchmark::DoNotOptimize(ops::matmul(d, w, DType::f32));
    else benchmark::DoNotOptimize(ops::matmul(ops::transpose(d, 0, 1), x, DType::f32));
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * double(N) * double(V) * double(C) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Bf16ClassifierBackwardCold)
    ->ArgNames({"evict", "pad", "prod"})
    ->ArgsProduct({{256}, {0, 1}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// nn.Linear at the MLP's first layer, bias folded into the GEMM.
void BM_Linear(benchmark::State& state) {
  const int64_t M = state.range(0), K = state.range(1), N = state.range(2);
  Tensor x = input({M, K}), w = input({N, K}), b = input({N});
  for (auto _ : state) benchmark::DoNotOptimize(ops::linear(x, w, b));
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * double(M) * double(N) * double(K) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Linear)->Args({4096, 384, 1536})->Args({1, 384, 1536})->Args({1, 384, 10000})
    ->ArgNames({"M", "K", "N"})->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_ContiguousOfTranspose(benchmark::State& state) {
  Tensor a = ops::transpose(input({1536, 4096}), 0, 1);
  for (auto _ : state) benchmark::DoNotOptimize(ops::contiguous(a));
  set_bytes(state, 2.0 * 4 * double(a.numel()));
}
BENCHMARK(BM_ContiguousOfTranspose)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Softmax(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1);
  Tensor a = input({rows, cols});
  for (auto _ : state) benchmark::DoNotOptimize(ops::softmax(a, -1));
  set_bytes(state, 2.0 * 4 * double(a.numel()));
}
BENCHMARK(BM_Softmax)->Args({24576, 256})->Args({1024, 10000})->ArgNames({"rows", "cols"})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

// 0: over axis 0 (columns, a bias gradient); 1: over axis 1 (rows); 2: everything.
void BM_Sum(benchmark::State& state) {
  Tensor a = input({4096, 1536});
  const int64_t which = state.range(0);
  for (auto _ : state) {
    if (which == 2) benchmark::DoNotOptimize(ops::sum(a));
    else benchmark::DoNotOptimize(ops::sum(a, {int(which == 0 ? 0 : 1)}));
  }
  set_bytes(state, 4.0 * double(a.numel()));
}
BENCHMARK(BM_Sum)->Arg(0)->Arg(1)->Arg(2)->ArgName("cols0_rows1_all2")->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace mvgpt
