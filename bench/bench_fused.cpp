// The fused CPU kernels at the model's shapes (d_model 384, 6 heads of 64, T 256, batch 16, vocab
// 10000, 14.5M parameters), called on the backend directly so that only the kernel is timed.
// Counters: GFLOP/s for attention (matrix-product flops, halved when causal), GB/s (bytes each
// kernel must read and write) for the memory-bound ones.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>

#include <mvgpt/backends/backend.h>
#include <mvgpt/backends/cpu/amx.h>
#include <mvgpt/backends/cpu/blas.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/fused/adamw.h>
#include <mvgpt/fused/attention.h>
#include <mvgpt/fused/cross_entropy.h>
#include <mvgpt/fused/norms.h>
#include <mvgpt/fused/rope.h>

namespace {

using namespace mvgpt;

const fused::AttentionKernels& attention_cpu() {
  static const fused::AttentionKernels k = fused::attention_cpu_kernels();
  return k;
}
const fused::NormKernels& cpu_norms() {
  static const fused::NormKernels k = fused::norms_cpu_kernels();
  return k;
}

Tensor filled(const Shape& shape, DType dt = DType::f32, float lo = -1, float hi = 1, uint32_t seed = 1) {
  Tensor t = Tensor::empty(shape, dt);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  if (dt == DType::f32) {
    float* p = t.data<float>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = dist(gen);
  } else {
    for (int64_t i = 0; i < t.numel(); ++i) write_element(t, i, dist(gen));
  }
  return t;
}

void set_bytes(benchmark::State& state, double bytes) {
  state.counters["GB/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}
void set_flops(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// bf16:1, the norm made for a product under the bf16 policy (NOTE [ Norms made for products ]):
// y written in bfloat16, against bf16:0's float32 y and then a conversion (BM_ConvertCold's).
void BM_LayerNormForward(benchmark::State& state) {
  const int64_t N = 4096, C = 384;
  const DType yt = state.range(0) ? DType::bf16 : DType::f32;
  Tensor x = filled({N, C}), w = filled({C}), b = filled({C}), y = Tensor::empty({N, C}, yt);
  Tensor mean = Tensor::empty({N}, DType::f32), rstd = Tensor::empty({N}, DType::f32);
  for (auto _ : state) cpu_norms().layer_norm(x, w, b, 1e-5, y, mean, rstd);
  set_bytes(state, double(N * C) * (4.0 + double(dtype_size(yt))));
}
BENCHMARK(BM_LayerNormForward)->ArgName("bf16")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_LayerNormBackward(benchmark::State& state) {
  const int64_t N = 4096, C = 384;
  Tensor x = filled({N, C}), w = filled({C}), b = filled({C}), y = Tensor::empty({N, C}, DType::f32);
  Tensor mean = Tensor::empty({N}, DType::f32), rstd = Tensor::empty({N}, DType::f32);
  cpu_norms().layer_norm(x, w, b, 1e-5, y, mean, rstd);
  const DType dyt = state.range(0) ? DType::bf16 : DType::f32;  // bf16:1, a norm made for a product's gradient
  Tensor dy = ops::to(filled({N, C}), dyt), dx = Tensor::empty({N, C}, DType::f32);
  Tensor dw = Tensor::empty({C}, DType::f32), db = Tensor::empty({C}, DType::f32);
  for (auto _ : state) cpu_norms().layer_norm_backward(dy, x, w, mean, rstd, dx, dw, db);
  set_bytes(state, double(N * C) * (8.0 + double(dtype_size(dyt))));  // read dy and x, write dx
}
BENCHMARK(BM_LayerNormBackward)->ArgName("bf16")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

Tensor positions(int64_t T) {
  Tensor p = Tensor::empty({T}, DType::i64);
  for (int64_t t = 0; t < T; ++t) p.data<int64_t>()[t] = t;
  return p;
}

void BM_Rope(benchmark::State& state) {
  const int64_t B = 16, H = 6, T = 256, D = 64;
  Tensor x = filled({B, H, T, D}), out = Tensor::empty({B, H, T, D}, DType::f32), pos = positions(T);
  const fused::RopeKernels rope_cpu = fused::rope_cpu_kernels();
  for (auto _ : state) rope_cpu.rotate(x, pos, 10000, RopeLayout::split_half, false, 1.0, out);
  set_bytes(state, 2.0 * B * H * T * D * 4);
}
BENCHMARK(BM_Rope)->Unit(benchmark::kMicrosecond)->UseRealTime();

// As the model calls it: q is a view of the fused qkv projection's output (B, T, 3C), each head's
// rows 3C apart (argument 3; 1 and 2 narrow the gap). On the 2-core Zen 3 the gap made it 5-6x
// slower than contiguous rows: the rows it skips are fetched all the same and the whole (B, T, 3C)
// no longer fits the share of L3 this VM sees.
void BM_RopeFromQkv(benchmark::State& state) {
  const int64_t B = 16, H = 6, T = 256, D = 64, C = H * D, W = state.range(0) * C;
  Tensor qkv = filled({B, T, W}), out = Tensor::empty({B, H, T, D}, DType::f32), pos = positions(T);
  Tensor q = qkv.as_strided({B, H, T, D}, {T * W, D, W, 1}, 0);
  const fused::RopeKernels rope_cpu = fused::rope_cpu_kernels();
  for (auto _ : state) rope_cpu.rotate(q, pos, 10000, RopeLayout::split_half, false, 1.0, out);
  set_bytes(state, 2.0 * B * H * T * D * 4);
}
BENCHMARK(BM_RopeFromQkv)->Arg(1)->Arg(2)->Arg(3)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Attention: q (B, H, Tq, D), k/v (B, H, Tk, D); args {Tq, Tk}.
struct AttentionInputs {
  int64_t B = 16, H = 6, Tq, Tk, D = 64;
  Tensor q, k, v, out, lse;
  AttentionInputs(int64_t tq, int64_t tk) : Tq(tq), Tk(tk) {
    q = filled({B, H, Tq, D}, DType::f32, -1, 1, 1);
    k = filled({B, H, Tk, D}, DType::f32, -1, 1, 2);
    v = filled({B, H, Tk, D}, DType::f32, -1, 1, 3);
    out = Tensor::empty({B, H, Tq, D}, DType::f32);
    lse = Tensor::empty({B, H, Tq}, DType::f32);
  }
  // Matrix-product flops of the visible (query, key) pairs: 2 D each for QK^T and for PV.
  double forward_flops() const {
    double pairs = 0;
    for (int64_t i = 0; i < Tq; ++i) pairs += double(std::min(Tk, Tk - Tq + i + 1));
    return 4.0 * B * H * D * pairs;
  }
};

void BM_AttentionForward(benchmark::State& state) {
  AttentionInputs a(state.range(0), state.range(1));
  const double scale = 1 / std::sqrt(double(a.D));
  const bool bf16 = state.range(2);  // products in bf16 summed in fp32 (NOTE [ Precision policy ])
  for (auto _ : state) attention_cpu().forward(a.q, a.k, a.v, scale, true, bf16, a.out, a.lse);
  set_flops(state, a.forward_flops());
  // K and V must be streamed at least once: the bound that matters for decode.
  set_bytes(state, 4.0 * (a.q.numel() + a.k.numel() + a.v.numel() + a.out.numel()));
}
BENCHMARK(BM_AttentionForward)->Args({256, 256, 0})->Args({256, 256, 1})->Args({1, 256, 0})->ArgNames({"Tq", "Tk", "bf16"})->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_AttentionBackward(benchmark::State& state) {
  AttentionInputs a(256, 256);
  const double scale = 1 / std::sqrt(double(a.D));
  const bool bf16 = state.range(0);
  attention_cpu().forward(a.q, a.k, a.v, scale, true, bf16, a.out, a.lse);
  Tensor dout = filled(a.out.shape(), DType::f32, -1, 1, 4);
  Tensor dq = Tensor::empty(a.q.shape(), DType::f32), dk = Tensor::empty(a.k.shape(), DType::f32),
         dv = Tensor::empty(a.v.shape(), DType::f32);
  for (auto _ : state) attention_cpu().backward(dout, a.q, a.k, a.v, a.out, a.lse, scale, true, bf16, dq, dk, dv);
  set_flops(state, 2.5 * a.forward_flops());  // five products of the forward's size (S, dV, dP, dQ, dK)
}
BENCHMARK(BM_AttentionBackward)->Arg(0)->Arg(1)->ArgName("bf16")->Unit(benchmark::kMicrosecond)->UseRealTime();

// The model's heads: q, k and v split out of one packed (16, 256, 18, 64) projection, and rope's
// table (and its inverse) for 256 positions.
struct RotaryInputs {
  static constexpr int64_t B = 16, H = 6, T = 256, D = 64;
  Tensor qkv = filled({B, T, 3 * H, D}, DType::f32, -1, 1, 5);
  Tensor heads(const Tensor& t, int64_t which) const {
    return ops::transpose(ops::narrow(t, 2, which * H, H), 1, 2);
  }
  Tensor q = heads(qkv, 0), k = heads(qkv, 1), v = heads(qkv, 2);
  fused::RopeTable table = fused::rope_table(ops::arange(0, double(T), 1, DType::i64, Device::cpu()), D, 10000, false, 1.0);
  fused::RopeTable inverse = fused::inverse_rope_table(table);
  double scale = 1 / std::sqrt(double(D));
};

// The model's attention forward: rotary, q, k and v split out of one packed projection, bf16
// products keeping their rounded operands for the backward (keep:1: NOTE [ Kept bf16 operands ]),
// and the probabilities too (keep:2, as training does: NOTE [ Kept probabilities ]), or nothing
// (keep:0, as inference does).
void BM_RotaryAttentionForward(benchmark::State& state) {
  const RotaryInputs in;
  const int64_t B = in.B, H = in.H, T = in.T, D = in.D;
  Tensor out = Tensor::empty({B, H, T, D}, DType::f32), lse = Tensor::empty({B, H, T}, DType::f32);
  std::vector<Tensor> keep;
  const int64_t kept = state.range(0) == 0 ? 0 : state.range(0) == 1 ? 3 : 4;
  for (int64_t i = 0; i < kept; ++i)
    keep.push_back(Tensor::empty(i < 3 ? Shape{B, H, T, D} : Shape{B, H, T, T}, DType::bf16));
  for (auto _ : state)
    attention_cpu().forward_rotary(in.q, in.k, in.v, in.scale, true, true, in.table, RopeLayout::split_half, out, lse,
                                   keep.empty() ? nullptr : &keep);
}
BENCHMARK(BM_RotaryAttentionForward)->DenseRange(0, 2)->ArgName("keep")->Unit(benchmark::kMicrosecond)->UseRealTime();

// The rotary kernels' backward as the series' model runs it (16 x 256, 6 heads of 64; bf16:1 bf16
// products, bf16:0 float32): q, k and v heads of one packed (B, T, 3H, D) projection; dq, dk and dv
// contiguous (packed:0, as rotary_attention makes them) or the blocks of a packed gradient
// (packed:1, rotary_attention_packed). kept:1 reads the bf16 operands the forward kept (NOTE [ Kept
// bf16 operands ]), kept:2 the probabilities too (NOTE [ Kept probabilities ]): as training runs it.
void BM_RotaryAttentionBackward(benchmark::State& state) {
  const RotaryInputs in;
  const int64_t B = in.B, H = in.H, T = in.T, D = in.D;
  Tensor out = Tensor::empty(in.q.shape(), DType::f32), lse = Tensor::empty({B, H, T}, DType::f32);
  const bool packed = state.range(0) != 0, bf16 = state.range(1) != 0;
  const int64_t kept = state.range(2);
  std::vector<Tensor> keep;
  for (int i = 0; i < (kept == 0 ? 0 : kept == 1 ? 3 : 4); ++i)
    keep.push_back(Tensor::empty(i < 3 ? Shape{B, H, T, D} : Shape{B, H, T, T}, DType::bf16));
  attention_cpu().forward_rotary(in.q, in.k, in.v, in.scale, true, bf16, in.table, RopeLayout::split_half, out, lse,
                                 kept ? &keep : nullptr);
  const Tensor dout = filled(out.shape(), DType::f32, -1, 1, 4);
  const Tensor dqkv = Tensor::empty(in.qkv.shape(), DType::f32);
  const Tensor dq = packed ? in.heads(dqkv, 0) : Tensor::empty(in.q.shape(), DType::f32);
  const Tensor dk = packed ? in.heads(dqkv, 1) : Tensor::empty(in.k.shape(), DType::f32);
  const Tensor dv = packed ? in.heads(dqkv, 2) : Tensor::empty(in.v.shape(), DType::f32);
  const Tensor &q = kept ? keep[0] : in.q, &k = kept ? keep[1] : in.k, &v = kept ? keep[2] : in.v;
  for (auto _ : state)
    attention_cpu().backward_rotary(dout, q, k, v, out, lse, in.scale, true, bf16, in.table, in.inverse,
                                    RopeLayout::split_half, dq, dk, dv, kept == 2 ? &keep[3] : nullptr);
}
BENCHMARK(BM_RotaryAttentionBackward)
    ->Args({0, 1, 0})
    ->Args({1, 1, 0})
    ->Args({1, 0, 0})
    ->Args({1, 1, 1})
    ->Args({1, 1, 2})
    ->ArgNames({"packed", "bf16", "kept"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The products of one query block of the attention kernels (NOTE [ bf16 attention ]; bf16 0: the
// float32 kernels' OpenBLAS calls), on one thread as the kernels run them: 64 query rows against
// `width` keys, head size 64, dense operands.
// product: 0 S = Q K^T, 1 O = P V, 2 dV += P^T dO, 3 dP = dO V^T, 4 dQ = dS K, 5 dK += dS^T Q.
template <typename T>
void block_product(benchmark::State& state) {
  const int64_t kind = state.range(0), w = state.range(1), R = 64, D = 64;
  struct Shape6 {
    bool ta, tb;
    int64_t M, N, K;
    float beta;
  };
  const Shape6 shapes[] = {{false, true, R, w, D, 0}, {false, false, R, D, w, 0}, {true, false, w, D, R, 1},
                           {false, true, R, w, D, 0}, {false, false, R, D, w, 0}, {true, false, w, D, R, 1}};
  const Shape6 s = shapes[kind];
  Tensor a = ops::to(filled({s.ta ? s.K : s.M, s.ta ? s.M : s.K}), dtype_v<T>);
  Tensor b = ops::to(filled({s.tb ? s.N : s.K, s.tb ? s.K : s.N}), dtype_v<T>);
  Tensor c = filled({s.M, s.N});
  const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
  for (auto _ : state)
    cpu::blas::gemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, a.data<T>(), lda, b.data<T>(), ldb, s.beta, c.data<float>(), s.N,
                    /*parallel=*/false);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(s.M * s.N * s.K) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
void BM_AttentionBlockProduct(benchmark::State& state) {
  if (state.range(2)) block_product<bfloat16>(state);
  else block_product<float>(state);
}
BENCHMARK(BM_AttentionBlockProduct)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5}, {64, 256}, {1, 0}})
    ->ArgNames({"product", "width", "bf16"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The same products on AMX tiles (backends/cpu/amx.h) as the attention kernels run them there: B
// packed beforehand (once a head), A read where it lies; the transposed products as their
// transposes (dV^T += dO^T P, dK^T += Q^T dS), whose B (P, dS) is packed here, each block.
void BM_AmxBlockProduct(benchmark::State& state) {
  namespace amx = cpu::amx;
  if (!amx::usable()) return state.SkipWithError("skipped: no AMX tiles on this CPU");
  const int64_t kind = state.range(0), w = state.range(1), R = 64, D = 64;
  // (M, N, K) as AMX multiplies them; B packed per block for products 2 and 5.
  struct Shape3 {
    int64_t M, N, K;
  };
  const Shape3 shapes[] = {{R, w, D}, {R, D, w}, {D, w, R}, {R, w, D}, {R, D, w}, {D, w, R}};
  const Shape3 s = shapes[kind];
  const bool per_block = kind == 2 || kind == 5;
  Tensor a = ops::to(filled({s.M, amx::round_up(s.K, 32)}), DType::bf16);
  Tensor b = ops::to(filled({s.K, s.N}), DType::bf16);
  std::vector<bfloat16> packed(size_t(amx::vnni_elems(s.K, s.N)));
  amx::pack_vnni(b.data<bfloat16>(), s.N, s.K, s.N, packed.data());
  Tensor c = filled({s.M, s.N});
  for (auto _ : state) {
    if (per_block) amx::pack_vnni(b.data<bfloat16>(), s.N, s.K, s.N, packed.data());
    amx::gemm(s.M, s.N, s.K, 1.0f, a.data<bfloat16>(), amx::round_up(s.K, 32), packed.data(), s.K, per_block ? 1.0f : 0.0f,
              c.data<float>(), s.N);
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(s.M * s.N * s.K) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AmxBlockProduct)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5}, {64, 256}})
    ->ArgNames({"product", "width"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The series' loss: 16 x 256 rows of 10,000 float32 logits, their targets, and an upstream gradient
// of 1 / N per row (the mean).
struct CrossEntropyInputs {
  static constexpr int64_t N = 4096, V = 10000;
  Tensor logits = filled({N, V}, DType::f32, -4, 4), targets = Tensor::empty({N}, DType::i64);
  Tensor losses = Tensor::empty({N}, DType::f32), lse = Tensor::empty({N}, DType::f32);
  Tensor dl = filled({N}, DType::f32, 1.0f / N, 1.0f / N);
  CrossEntropyInputs() {
    for (int64_t n = 0; n < N; ++n) targets.data<int64_t>()[n] = (n * 7919) % V;
  }
};

void BM_CrossEntropyForwardBackward(benchmark::State& state) {
  CrossEntropyInputs c;
  Tensor d = Tensor::empty({c.N, c.V}, DType::f32);
  const fused::CrossEntropyKernels ce_cpu = fused::cross_entropy_cpu_kernels();
  for (auto _ : state) {
    ce_cpu.forward(c.logits, c.targets, -100, c.losses, c.lse);
    ce_cpu.backward(c.dl, c.logits, c.targets, c.lse, -100, d);
  }
  set_bytes(state, 3.0 * c.N * c.V * 4);  // logits read twice, dlogits written once
}
BENCHMARK(BM_CrossEntropyForwardBackward)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same loss with its gradient rounded to bfloat16 in one visit per row (loss_with_gradient: one
// exp pass where the two kernels take two), as linear_cross_entropy runs it under the bf16 policy;
// one_visit:0 is the two kernels, the backward rounding in its own pass. bf16:1, one visit to bf16
// logits, as the bf16 step has them (NOTE [ bf16 logits ] in cross_entropy.cpp).
void BM_CrossEntropyWithGradient(benchmark::State& state) {
  CrossEntropyInputs c;
  Tensor d = Tensor::empty({c.N, c.V}, DType::bf16);
  const fused::CrossEntropyKernels ce_cpu = fused::cross_entropy_cpu_kernels();
  const bool one_visit = state.range(0) != 0, narrow = state.range(1) != 0;
  if (one_visit && !ce_cpu.loss_with_gradient) return state.SkipWithError("no loss_with_gradient kernel");
  const Tensor logits = narrow ? ops::to(c.logits, DType::bf16) : c.logits;
  for (auto _ : state) {
    if (one_visit) {
      ce_cpu.loss_with_gradient(logits, c.targets, -100, c.dl, c.losses, c.lse, d);
    } else {
      ce_cpu.forward(c.logits, c.targets, -100, c.losses, c.lse);
      ce_cpu.backward(c.dl, c.logits, c.targets, c.lse, -100, d);
    }
  }
  // The logits read once or twice, the bfloat16 dlogits written.
  set_bytes(state, (one_visit ? (narrow ? 2.0 : 4.0) : 8.0) * c.N * c.V + 2.0 * c.N * c.V);
}
BENCHMARK(BM_CrossEntropyWithGradient)
    ->ArgNames({"one_visit", "bf16"})
    ->Args({0, 0})
    ->Args({1, 0})
    ->Args({1, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_AdamW(benchmark::State& state) {
  const int64_t n = 14'500'000;
  Tensor p = filled({n}), g = filled({n}, DType::f32, -1, 1, 2), m = filled({n}, DType::f32, 0, 0),
         v = filled({n}, DType::f32, 0, 0);
  AdamWParams a;
  a.weight_decay = 0.1;
  const fused::AdamWKernels adamw_cpu = fused::adamw_cpu_kernels();
  // rounded:1 writes the weights' bf16 copies too (NOTE [ Weights rounded by the optimizer ]).
  const Tensor rounded = Tensor::empty({n}, DType::bf16);
  const bool round = state.range(0) != 0;
  for (auto _ : state) {
    adamw_cpu.step(p, g, m, v, a, round ? &rounded : nullptr);
    ++a.step;
  }
  set_bytes(state, (7.0 * 4 + (round ? 2.0 : 0.0)) * double(n));  // read p, g, m, v; write p, m, v (and the copy)
}
BENCHMARK(BM_AdamW)->ArgName("rounded")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
