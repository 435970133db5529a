// Attention (autograd/fused/attention.h): the CPU kernels (forward and backward) against naive double
// loops and finite differences: causal and not, KV-cache offsets (Tq < Tk), decode (Tq = 1), grouped
// kv heads, strided inputs; the op's checks and dtypes; the kernels against the slow reference.
#include <gtest/gtest.h>
#include <tbb/task_arena.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include <mvgpt/backends/cpu/amx.h>
#include <mvgpt/backends/cpu/fused_common.h>  // round_to_bf16
#include <mvgpt/autograd/engine.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/autograd/precision.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/fused/attention.h>
#include <mvgpt/fused/rope.h>
#include <mvgpt/fused/unit.h>  // uniform_on
#include <mvgpt/util/profile.h>
#include "backends/device_compare.h"  // bitwise_equal
#include "backends/fused_test_util.h"
#include "cuda_required.h"

namespace mvgpt {
namespace {

using namespace fused_test;
using Vec = std::vector<double>;

// The CPU kernels themselves, without the op's checks and preparation.
const fused::AttentionKernels& cpu() { return cpu_kernels<fused::attention_cpu_kernels>(); }

struct Naive {
  Vec out, lse, dq, dk, dv;
};

double round_bf16(double x) { return double(float(bfloat16(float(x)))); }
Vec rounded_bf16(Vec v) {
  for (double& x : v) x = round_bf16(x);
  return v;
}

// Full-matrix attention in double; query head h reads kv head h / (H / Hkv). bf16: every product's
// operands rounded to bfloat16 as the bf16 kernels round them (q, k, v, dout, the probabilities, dS;
// NOTE [ bf16 attention ]), the sums exact.
// kept_p (with bf16): dS from the rounded probabilities, as the backward on the forward's kept ones
// (NOTE [ Kept probabilities ] in attention_cpu.cpp).
Naive naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* dout, double scale,
                      bool causal, bool bf16 = false, bool kept_p = false) {
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3), Hkv = k.size(1), Tk = k.size(2);
  auto operand = [bf16](Vec x) { return bf16 ? rounded_bf16(std::move(x)) : x; };
  auto r16 = [bf16](double x) { return bf16 ? round_bf16(x) : x; };
  const Vec qv = operand(values(q)), kv = operand(values(k)), vv = operand(values(v)),
            dout_raw = dout ? values(*dout) : Vec(qv.size()), dov = operand(dout_raw);
  Naive r{Vec(qv.size()), Vec(size_t(B * H * Tq)), Vec(qv.size()), Vec(kv.size(), 0), Vec(vv.size(), 0)};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / (H / Hkv);
      auto Q = [&](int64_t i, int64_t c) { return qv[((b * H + h) * Tq + i) * D + c]; };
      auto K = [&](int64_t j, int64_t c) { return kv[((b * Hkv + hk) * Tk + j) * D + c]; };
      auto V = [&](int64_t j, int64_t c) { return vv[((b * Hkv + hk) * Tk + j) * D + c]; };
      auto dO = [&](int64_t i, int64_t c) { return dov[((b * H + h) * Tq + i) * D + c]; };
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t n = causal ? std::min(Tk, Tk - Tq + i + 1) : Tk;
        Vec s(static_cast<size_t>(n), 0.0);
        double m = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          for (int64_t c = 0; c < D; ++c) s[j] += Q(i, c) * K(j, c);
          s[j] *= scale;
          m = std::max(m, s[j]);
        }
        double l = 0;
        for (int64_t j = 0; j < n; ++j) l += std::exp(s[j] - m);
        const double lse = m + std::log(l);
        r.lse[(b * H + h) * Tq + i] = lse;
        Vec p(static_cast<size_t>(n)), o(static_cast<size_t>(D), 0.0);
        for (int64_t j = 0; j < n; ++j) {
          p[j] = std::exp(s[j] - lse);
          for (int64_t c = 0; c < D; ++c) o[c] += r16(p[j]) * V(j, c);
        }
        for (int64_t c = 0; c < D; ++c) r.out[((b * H + h) * Tq + i) * D + c] = o[c];
        // Backward of this row: dp_j = dO . v_j, ds_j = p_j (dp_j - sum_j' p_j' dp_j').
        Vec dp(static_cast<size_t>(n), 0.0);
        double pdp = 0;
        for (int64_t j = 0; j < n; ++j) {
          for (int64_t c = 0; c < D; ++c) dp[j] += dO(i, c) * V(j, c);
          pdp += p[j] * dp[j];
        }
        if (bf16) {  // the kernels' rowsum(dO * O): the unrounded dO and the output of bf16 products
          pdp = 0;
          for (int64_t c = 0; c < D; ++c) pdp += dout_raw[size_t(((b * H + h) * Tq + i) * D + c)] * o[c];
        }
        for (int64_t j = 0; j < n; ++j) {
          const double ds = r16((kept_p ? r16(p[j]) : p[j]) * (dp[j] - pdp));
          for (int64_t c = 0; c < D; ++c) {
            r.dq[((b * H + h) * Tq + i) * D + c] += ds * K(j, c) * scale;
            r.dk[((b * Hkv + hk) * Tk + j) * D + c] += ds * Q(i, c) * scale;
            r.dv[((b * Hkv + hk) * Tk + j) * D + c] += r16(p[j]) * dO(i, c);
          }
        }
      }
    }
  return r;
}

struct Result {
  Tensor out, lse, dq, dk, dv;
};

Result run_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, double scale, bool causal) {
  const DType dt = q.dtype();
  Result r;
  r.out = Tensor::empty({q.size(0), q.size(1), q.size(2), q.size(3)}, dt);
  r.lse = Tensor::empty({q.size(0), q.size(1), q.size(2)}, dt);
  cpu().forward(q, k, v, scale, causal, false, r.out, r.lse);
  r.dq = Tensor::empty(r.out.shape(), dt);
  r.dk = Tensor::empty(k.shape(), dt);
  r.dv = Tensor::empty(v.shape(), dt);
  cpu().backward(dout, q, k, v, r.out, r.lse, scale, causal, false, r.dq, r.dk, r.dv);
  return r;
}

struct AttnCase {
  int64_t B, H, Hkv, Tq, Tk, D;
  bool causal;
};

class AttentionKernel : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionKernel, MatchesNaiveLoops) {
  const auto [B, H, Hkv, Tq, Tk, D, causal] = GetParam();
  const double scale = 1 / std::sqrt(double(D));
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor q = random_tensor({B, H, Tq, D}, dt, 1, -2, 2), k = random_tensor({B, Hkv, Tk, D}, dt, 2, -2, 2);
    Tensor v = random_tensor({B, Hkv, Tk, D}, dt, 3), dout = random_tensor({B, H, Tq, D}, dt, 4);
    Result got = run_attention(q, k, v, dout, scale, causal);
    Naive want = naive_attention(q, k, v, &dout, scale, causal);
    const double tol = dt == DType::f64 ? 1e-12 : 2e-5;
    EXPECT_TRUE(all_close(got.out, want.out, tol, tol)) << dtype_name(dt);
    EXPECT_TRUE(all_close(got.lse, want.lse, tol, tol)) << dtype_name(dt);
    EXPECT_TRUE(all_close(got.dq, want.dq, tol, 10 * tol)) << dtype_name(dt);
    EXPECT_TRUE(all_close(got.dk, want.dk, tol, 10 * tol)) << dtype_name(dt);
    EXPECT_TRUE(all_close(got.dv, want.dv, tol, 10 * tol)) << dtype_name(dt);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionKernel,
    ::testing::Values(AttnCase{2, 3, 3, 9, 9, 8, true},       // plain causal
                      AttnCase{2, 3, 3, 9, 9, 8, false},      // non-causal
                      AttnCase{1, 4, 1, 7, 7, 4, true},       // multi-query (Hkv = 1)
                      AttnCase{2, 4, 2, 5, 5, 6, true},       // grouped (Hkv = 2)
                      AttnCase{1, 4, 2, 3, 11, 8, true},      // KV cache: queries sit at keys 8..10
                      AttnCase{2, 2, 2, 1, 13, 8, true},      // decode: one query sees every key
                      AttnCase{1, 2, 1, 1, 13, 8, false},     // decode, non-causal, grouped
                      AttnCase{1, 2, 2, 70, 70, 16, true},    // several query blocks, a 1-row tail
                      AttnCase{1, 2, 1, 130, 150, 8, true},   // several blocks with a cache offset, grouped
                      AttnCase{1, 1, 1, 129, 129, 4, false},
                      // decode at the head sizes whose row stays in registers (attend_row_registers):
                      // keys a multiple of 4 and not, grouped, a 1-row tail after a block
                      AttnCase{1, 6, 6, 1, 256, 64, true}, AttnCase{2, 4, 2, 1, 7, 32, true},
                      AttnCase{1, 2, 1, 1, 10, 128, false}, AttnCase{1, 2, 2, 65, 65, 64, true}));

TEST(AttentionKernel, BackwardMatchesFiniteDifferences) {
  // loss = sum(out * R): dq, dk, dv by central differences of the kernel's own forward, in f64.
  const int64_t B = 1, H = 2, Hkv = 1, Tq = 3, Tk = 4, D = 3;
  const double scale = 0.7;
  Tensor q = random_tensor({B, H, Tq, D}, DType::f64, 5), k = random_tensor({B, Hkv, Tk, D}, DType::f64, 6);
  Tensor v = random_tensor({B, Hkv, Tk, D}, DType::f64, 7), R = random_tensor({B, H, Tq, D}, DType::f64, 8);
  Result got = run_attention(q, k, v, R, scale, true);
  auto loss = [&]() {
    Tensor out = Tensor::empty(R.shape(), DType::f64), lse = Tensor::empty({B, H, Tq}, DType::f64);
    cpu().forward(q, k, v, scale, true, false, out, lse);
    double s = 0;
    for (int64_t i = 0; i < out.numel(); ++i) s += read_element(out, i) * read_element(R, i);
    return s;
  };
  for (auto [t, grad] : {std::pair{q, got.dq}, {k, got.dk}, {v, got.dv}})
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double x0 = read_element(t, i), h = 1e-6;
      write_element(t, i, x0 + h);
      const double lp = loss();
      write_element(t, i, x0 - h);
      const double lm = loss();
      write_element(t, i, x0);
      EXPECT_NEAR(read_element(grad, i), (lp - lm) / (2 * h), 1e-8) << "element " << i;
    }
}

// bf16 products (the precision policy): the forward matches the reference over bf16-rounded operands
// (q, k, the probabilities, v): float32 sums in another order, and a probability that sits on a bf16
// rounding boundary may round the other way in one of the two (a 2^-8 step of one term), so 3e-4
// where the float32 kernel is 1e-2 away; the backward is within bf16's error of the exact gradients
// and not the float32 kernel's (the flag is honoured); several query blocks, a cache offset, grouped
// heads.
TEST(AttentionKernel, Bf16ProductsRoundTheOperandsOfEveryProduct) {
  const int64_t B = 1, H = 4, Hkv = 2, Tq = 130, Tk = 140, D = 16;
  const double scale = 0.25;
  Tensor q = random_tensor({B, H, Tq, D}, DType::f32, 11, -2, 2), k = random_tensor({B, Hkv, Tk, D}, DType::f32, 12, -2, 2);
  Tensor v = random_tensor({B, Hkv, Tk, D}, DType::f32, 13), dout = random_tensor({B, H, Tq, D}, DType::f32, 14);
  const fused::AttentionResult bf16 = fused::attention_forward(q, k, v, scale, true, true);
  const fused::AttentionResult ref = fused::reference::attention(q, k, v, scale, true, true);
  const fused::AttentionResult f32 = fused::attention_forward(q, k, v, scale, true, false);
  EXPECT_TRUE(all_close(bf16.out, values(ref.out), 3e-4, 3e-4));
  EXPECT_TRUE(all_close(bf16.lse, values(ref.lse), 1e-5, 1e-5));
  EXPECT_FALSE(all_close(bf16.out, values(f32.out), 2e-3, 2e-3)) << "the operands were not rounded";

  const Naive exact = naive_attention(q, k, v, &dout, scale, true);
  const std::vector<Tensor> g16 = fused::attention_backward(dout, q, k, v, bf16, scale, true, true);
  const std::vector<Tensor> g32 = fused::attention_backward(dout, q, k, v, f32, scale, true, false);
  const Vec* want[] = {&exact.dq, &exact.dk, &exact.dv};
  for (int i = 0; i < 3; ++i) {
    double top = 0;
    for (double x : *want[i]) top = std::max(top, std::abs(x));
    EXPECT_TRUE(all_close(g16[size_t(i)], *want[i], 2e-2 * top, 0)) << "gradient " << i;  // bf16: 8 bits of mantissa
    EXPECT_FALSE(all_close(g16[size_t(i)], values(g32[size_t(i)]), 1e-4 * top, 0)) << "gradient " << i;
  }
}

// q, k and v (B, H, T, D) as views of one (B, T, 3, H, D) tensor, as the attention's projection
// writes them.
std::tuple<Tensor, Tensor, Tensor> packed_qkv_heads(int64_t B, int64_t H, int64_t T, int64_t D, uint32_t seed) {
  Tensor qkv = random_tensor({B, T, 3, H, D}, DType::f32, seed, -2, 2);
  auto head = [&](int64_t which) {
    return qkv.as_strided({B, H, T, D}, {T * 3 * H * D, D, 3 * H * D, 1}, qkv.offset() + which * H * D);
  };
  return {head(0), head(1), head(2)};
}

// The bf16 kernels against the double loops over the operands they round (NOTE [ bf16 attention ]):
// q, k, v, dout, the probabilities and dS in bfloat16, exact sums. What is left is the float32 sums
// and a probability or a dS on a rounding boundary that one side rounds the other way (one term moves
// by 2^-8 of itself): 1e-3 of the largest value, where bf16 is 2e-2 from exact operands. Causal with
// a cache offset and grouped heads, not causal, and heads read through strided views of a packed qkv.
// Each on the pool and on one thread, where one task run spans query blocks and heads (the forward
// keeps a kv head's rounded rows across them).
TEST(AttentionKernel, Bf16KernelsMatchTheRoundedReference) {
  struct Case {
    int64_t B, H, Hkv, Tq, Tk, D;
    bool causal, packed;
  };
  // Head sizes of whole AMX tiles (32, 64) take the tile kernels where the CPU has them, and oneDNN's
  // with the tiles switched off (NOTE [ Attention on AMX tiles ] in backends/cpu/amx.cpp).
  const Case cases[] = {{1, 4, 2, 130, 140, 16, true, false}, {2, 2, 2, 70, 70, 8, false, false},
                        {2, 3, 3, 100, 100, 16, true, true},  {4, 8, 2, 130, 140, 16, true, false},
                        {2, 4, 2, 130, 140, 64, true, false}, {1, 3, 3, 100, 100, 32, true, true},
                        {2, 2, 2, 70, 77, 64, false, false}, {2, 3, 3, 256, 256, 64, true, true}};
  struct TilesScope {
    explicit TilesScope(bool on) { cpu::amx::set_enabled(on); }
    ~TilesScope() { cpu::amx::set_enabled(true); }
  };
  for (const bool tiles : {true, false})
  for (const bool one_thread : {false, true})
  for (const Case& c : cases) {
    if (!tiles && c.D % 32 != 0) continue;
    const TilesScope scope(tiles);
    SCOPED_TRACE("T " + std::to_string(c.Tq) + "/" + std::to_string(c.Tk) + " D " + std::to_string(c.D) +
                 (c.causal ? " causal" : "") + (c.packed ? " packed" : "") + (one_thread ? " on one thread" : "") +
                 (tiles ? "" : " without AMX tiles"));
    // The model's 1/sqrt(64) is a power of two, which the tile kernels fold into q (NOTE [ A
    // power-of-two scale ]); the other cases take 0.3.
    const double scale = c.D == 64 && c.causal ? 0.125 : 0.3;
    Tensor q, k, v;
    if (c.packed) {
      std::tie(q, k, v) = packed_qkv_heads(c.B, c.H, c.Tq, c.D, 21);
    } else {
      q = random_tensor({c.B, c.H, c.Tq, c.D}, DType::f32, 22, -2, 2);
      k = random_tensor({c.B, c.Hkv, c.Tk, c.D}, DType::f32, 23, -2, 2);
      v = random_tensor({c.B, c.Hkv, c.Tk, c.D}, DType::f32, 24);
    }
    Tensor dout = random_tensor({c.B, c.H, c.Tq, c.D}, DType::f32, 25);
    const Naive want = naive_attention(q, k, v, &dout, scale, c.causal, /*bf16=*/true);
    Result got;
    got.out = Tensor::empty({c.B, c.H, c.Tq, c.D}, DType::f32);
    got.lse = Tensor::empty({c.B, c.H, c.Tq}, DType::f32);
    got.dq = Tensor::empty(q.shape(), DType::f32);
    got.dk = Tensor::empty(k.shape(), DType::f32);
    got.dv = Tensor::empty(v.shape(), DType::f32);
    auto run = [&] {
      cpu().forward(q, k, v, scale, c.causal, true, got.out, got.lse);
      cpu().backward(dout, q, k, v, got.out, got.lse, scale, c.causal, true, got.dq, got.dk, got.dv);
    };
    if (one_thread) tbb::task_arena(1).execute(run);
    else run();
    const std::pair<const Tensor*, const Vec*> pairs[] = {
        {&got.out, &want.out}, {&got.lse, &want.lse}, {&got.dq, &want.dq}, {&got.dk, &want.dk}, {&got.dv, &want.dv}};
    const char* names[] = {"out", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; ++i) {
      double top = 0;
      for (double x : *pairs[i].second) top = std::max(top, std::abs(x));
      EXPECT_TRUE(all_close(*pairs[i].first, *pairs[i].second, 1e-3 * top, 0)) << names[i];  // seen: 2e-4
    }
  }
}

// A key past a block's window never reaches the block, even as an infinity: the tile kernels pack
// the keys and values a block multiplies as its window grows, zeros past it (NOTE [ Tiles past a
// window ] in attention_cpu.cpp), as oneDNN reads only the window. Query rows 0-63 of a cache offset
// of 10 see keys 0-73; key 80 (in the same tile of 32 keys) is infinite in k and v. Grouped heads:
// the second head of the group must not reuse the first's tiles packed up to the last window. On one
// thread (the heads' blocks in order) and on the pool; with the tiles and without.
TEST(AttentionKernel, AnInfiniteKeyPastABlocksWindowDoesNotReachIt) {
  struct TilesScope {
    explicit TilesScope(bool on) { cpu::amx::set_enabled(on); }
    ~TilesScope() { cpu::amx::set_enabled(true); }
  };
  for (const bool tiles : {true, false})
  for (const bool one_thread : {true, false}) {
    SCOPED_TRACE(std::string(tiles ? "tiles" : "without tiles") + (one_thread ? " on one thread" : ""));
    const TilesScope scope(tiles);
    const int64_t B = 1, H = 2, Hkv = 1, Tq = 130, Tk = 140, D = 64;
    Tensor q = random_tensor({B, H, Tq, D}, DType::f32, 61, -2, 2), k = random_tensor({B, Hkv, Tk, D}, DType::f32, 62, -2, 2);
    Tensor v = random_tensor({B, Hkv, Tk, D}, DType::f32, 63), dout = random_tensor({B, H, Tq, D}, DType::f32, 64);
    for (int64_t c = 0; c < D; ++c) k.data<float>()[80 * D + c] = v.data<float>()[80 * D + c] = INFINITY;
    Tensor out = Tensor::empty({B, H, Tq, D}, DType::f32), lse = Tensor::empty({B, H, Tq}, DType::f32);
    Tensor dq = Tensor::empty(q.shape(), DType::f32), dk = Tensor::empty(k.shape(), DType::f32);
    Tensor dv = Tensor::empty(v.shape(), DType::f32);
    auto run = [&] {
      cpu().forward(q, k, v, 0.125, true, true, out, lse);
      cpu().backward(dout, q, k, v, out, lse, 0.125, true, true, dq, dk, dv);
    };
    if (one_thread) tbb::task_arena(1).execute(run);
    else run();
    for (int64_t h = 0; h < H; ++h)
      for (int64_t r = 0; r < 64; ++r) {
        ASSERT_TRUE(std::isfinite(lse.data<float>()[h * Tq + r])) << "head " << h << " row " << r;
        for (int64_t c = 0; c < D; ++c) {
          const int64_t e = (h * Tq + r) * D + c;
          ASSERT_TRUE(std::isfinite(out.data<float>()[e])) << "out, head " << h << " row " << r;
          ASSERT_TRUE(std::isfinite(dq.data<float>()[e])) << "dq, head " << h << " row " << r;
        }
      }
  }
}

// The bf16 products' operands are rounded sixteen (AVX-512) or eight at a time (fused_common.h): bit for bit the scalar
// bfloat16(x), for ties to even either way, NaNs (signalling ones made quiet), infinities, values
// that round up to infinity, subnormals and signed zeros, in every lane and in the tail; and so is
// the scaled rounding (the probabilities' normalization pass).
TEST(AttentionKernel, VectorRoundingToBf16IsTheScalarOne) {
  std::vector<uint32_t> bits = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x3f80c000u, 0x3f807fffu, 0x7f800001u,
                                0xff812345u, 0x7fc00000u, 0x7f800000u, 0xff800000u, 0x7f7fffffu, 0xff7fffffu,
                                0x00000001u, 0x00008000u, 0x00018000u, 0x807fffffu, 0x00000000u, 0x80000000u};
  uint32_t state = 12345;
  for (int i = 0; i < 200; ++i) bits.push_back(state = state * 1664525u + 1013904223u);
  std::vector<float> x;
  for (uint32_t b : bits) x.push_back(std::bit_cast<float>(b));
  for (size_t start : {size_t(0), size_t(3)})
    for (size_t n = 0; start + n <= x.size(); n += (n < 20 ? 1 : 37)) {
      std::vector<bfloat16> out(n + 1);
      out[n].bits = 0xabcd;  // past the end: untouched
      cpu::fused::round_to_bf16(x.data() + start, int64_t(n), out.data());
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(out[i].bits, bfloat16(x[start + i]).bits) << std::hex << bits[start + i] << " at " << i << " of " << n;
      ASSERT_EQ(out[n].bits, 0xabcd);
      // With a scale: the float32 product, rounded.
      for (float scale : {1.0f, 0.37f, -3.0f}) {
        cpu::fused::round_to_bf16(x.data() + start, int64_t(n), scale, out.data());
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(out[i].bits, bfloat16(x[start + i] * scale).bits)
              << std::hex << bits[start + i] << " times " << scale << " at " << i << " of " << n;
        ASSERT_EQ(out[n].bits, 0xabcd);
      }
    }
}

// The softmax's row max (NOTE [ Row max in sixteen lanes ] in fused_common.h): for every length
// and start, in cache or fetched ahead, the largest value, NaNs passed over, -inf for an empty row
// or one of -inf only, and never a value past the end.
TEST(AttentionKernel, RowMaxIsTheLargestValueForEveryLength) {
  std::vector<float> x;
  uint32_t state = 777;
  for (int i = 0; i < 120; ++i) {
    state = state * 1664525u + 1013904223u;
    x.push_back(float(int32_t(state >> 8) % 2000) / 7.0f);
  }
  x[5] = NAN, x[40] = -INFINITY, x[77] = NAN;
  for (size_t start : {size_t(0), size_t(3), size_t(5)})
    for (size_t n = 0; start + n <= x.size(); ++n) {
      // The row, then a value larger than any in it just past its end.
      std::vector<float> row(x.begin() + long(start), x.begin() + long(start + n));
      row.push_back(1e30f);
      float want = -INFINITY;
      for (size_t i = 0; i < n; ++i) want = row[i] > want ? row[i] : want;
      for (bool ahead : {false, true})
        ASSERT_EQ(cpu::fused::row_max(row.data(), int64_t(n), ahead), want)
            << "start " << start << ", n " << n << (ahead ? ", fetched ahead" : "");
    }
  const std::vector<float> none(40, -INFINITY);
  for (int64_t n : {1, 15, 16, 17, 33, 40}) EXPECT_EQ(cpu::fused::row_max(none.data(), n), -INFINITY) << n;
}

// rotary_attention: the CPU kernels rotate q and k as they read them (and round them, under bf16
// products) and rotate dq and dk back; rope's own kernels then do not run. Against rope then
// attention: in float32, bit for bit; under bf16 products (the same rotation on the same table,
// rounded in another pass; a one-row block, which the composition computes in float32 loops,
// differs by more than a rounding) within 4e-3 of the largest value, where a missing or misplaced
// rotation is off by the values themselves. Cases: grouped heads over two query blocks; q, k and v
// split out of one packed projection as the model splits them (strided rows), with a one-row last
// block and interleaved pairs at shifted, scaled positions; a non-causal one; the model's head size
// (64, the sixteen-lane one-row loops) with a one-row last block; one position (float32 only: under
// bf16 products its dS is a rounding where the composition's is exactly 0). The upstream gradient
// reaches the kernels as the model's does, a transposed view (rows H D apart). Each on the pool and
// on one thread (one task run then spans a head's blocks).
TEST(RotaryAttention, MatchesRopeThenAttention) {
  struct Case {
    int64_t B, H, Hkv, T, D;
    bool causal, packed;
    RopeLayout layout;
    int64_t first;
    double position_scale;
  };
  const Case cases[] = {{2, 4, 2, 70, 16, true, false, RopeLayout::split_half, 0, 1.0},
                        {1, 3, 3, 65, 8, true, true, RopeLayout::interleaved, 5, 0.5},
                        {2, 2, 1, 40, 16, false, false, RopeLayout::split_half, 3, 1.0},
                        {1, 2, 2, 65, 64, true, true, RopeLayout::split_half, 0, 1.0},
                        {2, 2, 1, 1, 16, true, false, RopeLayout::split_half, 4, 1.0}};
  for (const Precision precision : {Precision::bf16, Precision::fp32})
  for (const bool one_thread : {false, true})
  for (const Case& c : cases) {
    const bool bf16 = precision == Precision::bf16;
    if (bf16 && c.T == 1) continue;
    SCOPED_TRACE("T " + std::to_string(c.T) + (c.packed ? " packed" : "") + (c.causal ? " causal" : "") +
                 (one_thread ? " on one thread" : "") + (bf16 ? " bf16 products" : " float32"));
    const PrecisionGuard guard(precision);
    // The leaves: q, k and v, or one (B, T, 3H, D) projection.
    const std::vector<Tensor> inputs =
        c.packed ? std::vector<Tensor>{random_tensor({c.B, c.T, 3 * c.H, c.D}, DType::f32, 31, -2, 2)}
                 : std::vector<Tensor>{random_tensor({c.B, c.H, c.T, c.D}, DType::f32, 32, -2, 2),
                                       random_tensor({c.B, c.Hkv, c.T, c.D}, DType::f32, 33, -2, 2),
                                       random_tensor({c.B, c.Hkv, c.T, c.D}, DType::f32, 34)};
    const Tensor pos = arange(double(c.first), double(c.first + c.T), 1, DType::i64, Device::cpu());
    const Tensor g = random_tensor({c.B, c.T, c.H, c.D}, DType::f32, 35);  // against transpose(y, 1, 2)
    std::vector<std::vector<Tensor>> got(2);
    for (int path = 0; path < 2; ++path) {
      std::vector<Tensor> leaves;
      for (const Tensor& t : inputs) leaves.push_back(ops::clone(t).requires_grad_(true));
      Tensor q, k, v;
      if (c.packed) {  // heads split out and transposed to (B, H, T, D) views, as CausalSelfAttention does
        const std::vector<Tensor> parts = split(leaves[0], {c.H, c.H, c.H}, 2);
        q = transpose(parts[0], 1, 2), k = transpose(parts[1], 1, 2), v = transpose(parts[2], 1, 2);
      } else {
        q = leaves[0], k = leaves[1], v = leaves[2];
      }
      profile::Recording rec;
      Tensor y;
      auto run = [&] {
        y = path == 0 ? rotary_attention(q, k, v, pos, 500, c.layout, c.position_scale, 0.3, c.causal)
                      : attention(rope(q, pos, 500, c.layout, c.position_scale),
                                  rope(k, pos, 500, c.layout, c.position_scale), v, 0.3, c.causal);
        backward(sum(mul(transpose(y, 1, 2), g)));
      };
      if (one_thread) tbb::task_arena(1).execute(run);
      else run();
      const profile::Report report = rec.stop();
      int64_t rope_calls = 0;
      for (const profile::Row& row : report.rows) rope_calls += row.op.starts_with("rope") ? row.calls : 0;
      EXPECT_EQ(rope_calls, path == 0 ? 0 : 4) << "path " << path;  // forward and backward, q and k
      got[size_t(path)] = {y.detach()};
      for (const Tensor& t : leaves) got[size_t(path)].push_back(t.grad());
    }
    for (size_t i = 0; i < got[0].size(); ++i) {
      const double top = ops::max(ops::abs(got[1][i])).item<double>();
      if (bf16) EXPECT_TRUE(all_close(got[0][i], got[1][i], 4e-3 * top, 0)) << (i == 0 ? "out" : "gradient of leaf ") << i;
      else EXPECT_TRUE(testing::bitwise_equal(got[0][i], got[1][i])) << (i == 0 ? "out" : "gradient of leaf ") << i;
    }
  }
}

// NOTE [ Kept bf16 operands ]: the rotary kernels' backward on the operands its forward kept (q and
// k rotated and rounded, v rounded) gives the bits of the backward that rounds them again from the
// float32 projection, and the forward's own results do not change; with the model's power-of-two
// scale (folded into q on AMX tiles) and another, rows that are and are not whole tiles, packed
// gradients, tiles on and off.
TEST(RotaryAttention, KeptBf16OperandsGiveTheBitsOfRoundingAgain) {
  struct TilesScope {
    explicit TilesScope(bool on) { cpu::amx::set_enabled(on); }
    ~TilesScope() { cpu::amx::set_enabled(true); }
  };
  for (const bool tiles : {true, false})
  for (const int64_t T : {256, 100})
  for (const double scale : {0.125, 0.3}) {
    SCOPED_TRACE("T " + std::to_string(T) + " scale " + std::to_string(scale) + (tiles ? "" : " without tiles"));
    const TilesScope scope(tiles);
    const int64_t B = 2, H = 3, D = 64;
    const Tensor qkv = random_tensor({B, T, 3 * H, D}, DType::f32, 41, -2, 2);
    auto heads = [&](const Tensor& t, int64_t which) { return ops::transpose(ops::narrow(t, 2, which * H, H), 1, 2); };
    const Tensor q = heads(qkv, 0), k = heads(qkv, 1), v = heads(qkv, 2);
    const Tensor pos = arange(0, double(T), 1, DType::i64, Device::cpu());
    const fused::RopeTable table = fused::rope_table(pos, D, 10000, false, 1.0);
    const fused::RopeTable inverse = fused::inverse_rope_table(table);
    const Tensor dout = random_tensor({B, H, T, D}, DType::f32, 42);
    std::vector<Tensor> results[2];
    for (int kept = 0; kept < 2; ++kept) {
      Tensor out = Tensor::empty({B, H, T, D}, DType::f32), lse = Tensor::empty({B, H, T}, DType::f32);
      std::vector<Tensor> keep;
      for (int i = 0; i < 3; ++i) keep.push_back(Tensor::empty({B, H, T, D}, DType::bf16));
      cpu().forward_rotary(q, k, v, scale, true, true, table, RopeLayout::split_half, out, lse, kept ? &keep : nullptr);
      const Tensor dqkv = Tensor::empty(qkv.shape(), DType::f32);
      if (kept)
        cpu().backward_rotary(dout, keep[0], keep[1], keep[2], out, lse, scale, true, true, table, inverse,
                              RopeLayout::split_half, heads(dqkv, 0), heads(dqkv, 1), heads(dqkv, 2), nullptr);
      else
        cpu().backward_rotary(dout, q, k, v, out, lse, scale, true, true, table, inverse, RopeLayout::split_half,
                              heads(dqkv, 0), heads(dqkv, 1), heads(dqkv, 2), nullptr);
      results[kept] = {out, lse, dqkv};
      if (kept) {  // what was kept: the rotated rows, rounded (q unscaled)
        const Tensor rotated_q = fused::rope_rotate(q, pos, 10000, RopeLayout::split_half, false, 1.0);
        const Tensor rotated_k = fused::rope_rotate(k, pos, 10000, RopeLayout::split_half, false, 1.0);
        EXPECT_TRUE(testing::bitwise_equal(keep[0], ops::to(rotated_q, DType::bf16)));
        EXPECT_TRUE(testing::bitwise_equal(keep[1], ops::to(rotated_k, DType::bf16)));
        EXPECT_TRUE(testing::bitwise_equal(keep[2], ops::to(ops::contiguous(v), DType::bf16)));
      }
    }
    const char* names[] = {"out", "lse", "dqkv"};
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(testing::bitwise_equal(results[0][i], results[1][i])) << names[i];
  }
}

// NOTE [ Kept probabilities ]: the forward writes the bf16 probabilities it multiplied V by into a
// fourth kept tensor, its own results unchanged; the backward multiplies those (with zeros kept,
// every gradient is zero) and matches the double loops whose dS takes the rounded probabilities.
// Rotated by position 0 (cos 1, sin 0: no rotation), so that the loops need no rope; the model's
// power-of-two scale and another, rows that are and are not whole tiles, causal and not, tiles on and
// off. The kept tensor starts as NaNs: the backward reads only what the forward wrote.
TEST(RotaryAttention, KeptProbabilitiesAreTheOnesTheBackwardMultiplies) {
  struct TilesScope {
    explicit TilesScope(bool on) { cpu::amx::set_enabled(on); }
    ~TilesScope() { cpu::amx::set_enabled(true); }
  };
  for (const bool tiles : {true, false})
  for (const bool causal : {true, false})
  for (const int64_t T : {256, 100})
  for (const double scale : {0.125, 0.3}) {
    if (!causal && scale != 0.3) continue;
    SCOPED_TRACE("T " + std::to_string(T) + " scale " + std::to_string(scale) + (causal ? "" : " not causal") +
                 (tiles ? "" : " without tiles"));
    const TilesScope scope(tiles);
    const int64_t B = 2, H = 3, D = 64;
    const Tensor qkv = random_tensor({B, T, 3 * H, D}, DType::f32, 43, -2, 2);
    auto heads = [&](const Tensor& t, int64_t which) { return ops::transpose(ops::narrow(t, 2, which * H, H), 1, 2); };
    const Tensor q = heads(qkv, 0), k = heads(qkv, 1), v = heads(qkv, 2);
    const Tensor at_zero = ops::mul(arange(0, double(T), 1, DType::i64, Device::cpu()), 0.0);
    const fused::RopeTable table = fused::rope_table(ops::to(at_zero, DType::i64), D, 10000, false, 1.0);
    const fused::RopeTable inverse = fused::inverse_rope_table(table);
    const Tensor dout = random_tensor({B, H, T, D}, DType::f32, 44);
    auto empty_keep = [&](int n) {
      std::vector<Tensor> keep;
      for (int i = 0; i < n; ++i) keep.push_back(Tensor::empty(i < 3 ? Shape{B, H, T, D} : Shape{B, H, T, T}, DType::bf16));
      return keep;
    };
    std::vector<Tensor> keep3 = empty_keep(3), keep4 = empty_keep(4);
    ops::fill_(keep4[3], std::nan(""));
    Tensor out3 = Tensor::empty({B, H, T, D}, DType::f32), lse3 = Tensor::empty({B, H, T}, DType::f32);
    Tensor out = Tensor::empty({B, H, T, D}, DType::f32), lse = Tensor::empty({B, H, T}, DType::f32);
    cpu().forward_rotary(q, k, v, scale, causal, true, table, RopeLayout::split_half, out3, lse3, &keep3);
    cpu().forward_rotary(q, k, v, scale, causal, true, table, RopeLayout::split_half, out, lse, &keep4);
    EXPECT_TRUE(testing::bitwise_equal(out, out3));
    EXPECT_TRUE(testing::bitwise_equal(lse, lse3));
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(testing::bitwise_equal(keep4[size_t(i)], keep3[size_t(i)]));
    // What was kept is what multiplied V: out = P v over each row's visible keys.
    const Vec pv = values(keep4[3]), vv = values(keep4[2]), ov = values(out);
    double worst = 0;
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t c = 0; c < D; ++c) {
          double o = 0;
          for (int64_t j = 0; j < (causal ? i + 1 : T); ++j)
            o += pv[size_t((bh * T + i) * T + j)] * vv[size_t((bh * T + j) * D + c)];
          worst = std::max(worst, std::abs(o - ov[size_t((bh * T + i) * D + c)]));
        }
    EXPECT_LT(worst, 1e-5) << "the kept probabilities are not those the forward multiplied";
    const Naive want = naive_attention(q, k, v, &dout, scale, causal, /*bf16=*/true, /*kept_p=*/true);
    const Tensor dqkv = Tensor::empty(qkv.shape(), DType::f32);
    cpu().backward_rotary(dout, keep4[0], keep4[1], keep4[2], out, lse, scale, causal, true, table, inverse,
                          RopeLayout::split_half, heads(dqkv, 0), heads(dqkv, 1), heads(dqkv, 2), &keep4[3]);
    const Tensor got[] = {ops::contiguous(heads(dqkv, 0)), ops::contiguous(heads(dqkv, 1)),
                          ops::contiguous(heads(dqkv, 2))};
    const Vec* wanted[] = {&want.dq, &want.dk, &want.dv};
    const char* names[] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; ++i) {
      double top = 0;
      for (double x : *wanted[i]) top = std::max(top, std::abs(x));
      EXPECT_TRUE(all_close(got[i], *wanted[i], 1e-3 * top, 0)) << names[i];
    }
    // Zeros kept: no probability reaches the backward, so neither does any gradient.
    const Tensor zeros = ops::zeros({B, H, T, T}, DType::bf16);
    cpu().backward_rotary(dout, keep4[0], keep4[1], keep4[2], out, lse, scale, causal, true, table, inverse,
                          RopeLayout::split_half, heads(dqkv, 0), heads(dqkv, 1), heads(dqkv, 2), &zeros);
    EXPECT_EQ(ops::max(ops::abs(dqkv)).item<double>(), 0.0) << "the backward did not multiply the kept probabilities";
  }
}

// rotary_attention is rope then attention bit for bit in float32 (the kernels, whose values are the
// composition's), and elsewhere, where it is the composition: float64, a per-sequence positions table.
TEST(RotaryAttention, ElsewhereIsTheCompositionBitForBit) {
  Tensor q = random_tensor({2, 2, 9, 8}, DType::f32, 36, -2, 2), k = random_tensor({2, 1, 9, 8}, DType::f32, 37, -2, 2);
  Tensor v = random_tensor({2, 1, 9, 8}, DType::f32, 38);
  const Tensor pos = arange(0, 9, 1, DType::i64, Device::cpu());
  const Tensor pos2 = ops::reshape(arange(0, 18, 1, DType::i64, Device::cpu()), {2, 9});
  auto both = [&](const Tensor& qq, const Tensor& kk, const Tensor& vv, const Tensor& p) {
    const Tensor a = rotary_attention(qq, kk, vv, p, 10000, RopeLayout::split_half, 1.0, 0.35, true);
    const Tensor b = attention(rope(qq, p, 10000, RopeLayout::split_half, 1.0),
                               rope(kk, p, 10000, RopeLayout::split_half, 1.0), vv, 0.35, true);
    EXPECT_TRUE(testing::bitwise_equal(a, b));
  };
  both(q, k, v, pos);
  both(ops::to(q, DType::f64), ops::to(k, DType::f64), ops::to(v, DType::f64), pos);
  const PrecisionGuard bf16(Precision::bf16);
  both(q, k, v, pos2);
}

// rotary_attention_packed is rotary_attention of the split and transposed views, bit for bit, and
// its gradient is qkv's: in float32, with bf16 products or not (the kernels write dq, dk and dv into
// their blocks), grouped kv heads or not, on one thread or the pool; in float64 (the composition).
TEST(RotaryAttentionPacked, IsRotaryAttentionOfTheSplitViews) {
  struct Case {
    int64_t B, H, Hkv, T, D;
    bool causal;
    RopeLayout layout;
    DType dtype;
    bool bf16;
  };
  const Case cases[] = {{2, 4, 4, 70, 16, true, RopeLayout::split_half, DType::f32, true},
                        {1, 6, 2, 65, 8, true, RopeLayout::interleaved, DType::f32, true},
                        {2, 2, 1, 40, 16, false, RopeLayout::split_half, DType::f32, true},
                        {2, 4, 2, 33, 8, true, RopeLayout::split_half, DType::f32, false},
                        {1, 6, 2, 65, 8, true, RopeLayout::interleaved, DType::f32, false},
                        {2, 3, 3, 20, 8, false, RopeLayout::split_half, DType::f32, false},
                        {2, 2, 2, 1, 8, true, RopeLayout::split_half, DType::f32, false},
                        {1, 2, 1, 9, 4, true, RopeLayout::interleaved, DType::f64, false},
                        // One position (and with B = 1 the packed blocks are themselves contiguous),
                        // and all heads their own kv heads without a mask.
                        {2, 2, 2, 1, 8, true, RopeLayout::split_half, DType::f32, true},
                        {1, 3, 1, 1, 8, true, RopeLayout::interleaved, DType::f32, true},
                        {2, 3, 3, 20, 8, false, RopeLayout::split_half, DType::f32, true},
                        // Head sizes of whole AMX tiles: the tile kernels writing the packed op's
                        // token-major rows (kept operands with a kv head a head, none with groups),
                        // T not a multiple of 16, and the float32 kernels the same way.
                        {2, 3, 3, 100, 64, true, RopeLayout::split_half, DType::f32, true},
                        {1, 4, 2, 70, 32, true, RopeLayout::split_half, DType::f32, true},
                        {2, 2, 2, 1, 64, true, RopeLayout::split_half, DType::f32, true},
                        {2, 3, 3, 70, 64, true, RopeLayout::split_half, DType::f32, false}};
  for (const bool one_thread : {false, true})
  for (const Case& c : cases) {
    SCOPED_TRACE("H " + std::to_string(c.H) + " Hkv " + std::to_string(c.Hkv) + " T " + std::to_string(c.T) +
                 (c.bf16 ? " bf16" : " ") + std::string(dtype_name(c.dtype)) + (one_thread ? " on one thread" : ""));
    const PrecisionGuard precision(c.bf16 ? Precision::bf16 : Precision::fp32);
    const Tensor qkv = ops::to(random_tensor({c.B, c.T, c.H + 2 * c.Hkv, c.D}, DType::f32, 41, -2, 2), c.dtype);
    const Tensor pos = arange(2, double(2 + c.T), 1, DType::i64, Device::cpu());
    const Tensor g = ops::to(random_tensor({c.B, c.H, c.T, c.D}, DType::f32, 42), c.dtype);
    std::vector<std::vector<Tensor>> got(2);
    for (int path = 0; path < 2; ++path) {
      Tensor leaf = ops::clone(qkv).requires_grad_(true);
      Tensor y;
      profile::Recording rec;
      auto run = [&] {
        if (path == 0) {
          y = rotary_attention_packed(leaf, c.H, c.Hkv, pos, 500, c.layout, 1.0, 0.3, c.causal);
        } else {
          const std::vector<Tensor> parts = split(leaf, {c.H, c.Hkv, c.Hkv}, 2);
          y = rotary_attention(transpose(parts[0], 1, 2), transpose(parts[1], 1, 2), transpose(parts[2], 1, 2), pos,
                               500, c.layout, 1.0, 0.3, c.causal);
        }
        backward(sum(mul(y, g)));
      };
      if (one_thread) tbb::task_arena(1).execute(run);
      else run();
      const profile::Report report = rec.stop();
      int64_t copies = 0;
      for (const profile::Row& row : report.rows) copies += row.op == "copy" ? row.calls : 0;
      if (c.dtype == DType::f32) {  // the split views' gradients are copied into qkv's blocks; the packed op's are not
        if (path == 0) EXPECT_EQ(copies, 0) << "dq, dk and dv should be written in place";
        else EXPECT_GT(copies, 0) << "the composition's gradients should be copied into place";
      }
      got[size_t(path)] = {y.detach(), leaf.grad()};
    }
    EXPECT_TRUE(testing::bitwise_equal(got[0][0], got[1][0])) << "out";
    EXPECT_TRUE(testing::bitwise_equal(got[0][1], got[1][1])) << "qkv's gradient";
  }
  expect_error([] { rotary_attention_packed(Tensor::empty({1, 3, 5, 4}, DType::f32), 2, 1, Tensor(), 1e4,
                                            RopeLayout::split_half, 1.0, 0.5, true); },
               "rotary_attention_packed: expected qkv (B, T, H + 2 Hkv, D) with H = 2 and Hkv = 1");
}

TEST(AttentionKernel, StridedHeadsFromPackedQkv) {
  // qkv (B, T, 3, H, D) packed as a linear layer writes it; q, k, v are (B, H, T, D) views of it.
  const int64_t B = 2, T = 6, H = 2, D = 4;
  Tensor qkv = random_tensor({B, T, 3, H, D}, DType::f32, 9);
  auto head_view = [&](int64_t which) {
    return qkv.as_strided({B, H, T, D}, {T * 3 * H * D, D, 3 * H * D, 1}, qkv.offset() + which * H * D);
  };
  auto packed = [&](const Tensor& view) {
    Tensor c = Tensor::empty(view.shape(), DType::f32);
    for (int64_t i = 0; i < c.numel(); ++i) write_element(c, i, read_element(view, i));
    return c;
  };
  Tensor dout = random_tensor({B, H, T, D}, DType::f32, 10);
  Result a = run_attention(head_view(0), head_view(1), head_view(2), dout, 0.5, true);
  Result b = run_attention(packed(head_view(0)), packed(head_view(1)), packed(head_view(2)), dout, 0.5, true);
  for (auto [x, y] : {std::pair{a.out, b.out}, {a.lse, b.lse}, {a.dq, b.dq}, {a.dk, b.dk}, {a.dv, b.dv}})
    EXPECT_EQ(values(x), values(y));
}

TEST(AttentionKernel, BackwardIsDeterministicWithGroupedHeads) {
  Tensor q = random_tensor({2, 6, 40, 8}, DType::f32, 11), k = random_tensor({2, 2, 40, 8}, DType::f32, 12);
  Tensor v = random_tensor({2, 2, 40, 8}, DType::f32, 13), dout = random_tensor({2, 6, 40, 8}, DType::f32, 14);
  Result a = run_attention(q, k, v, dout, 0.3, true), b = run_attention(q, k, v, dout, 0.3, true);
  EXPECT_EQ(values(a.dk), values(b.dk));
  EXPECT_EQ(values(a.dv), values(b.dv));
}

TEST(AttentionKernel, NoKeysGivesZeroOutputAndMinusInfLse) {
  Tensor q = random_tensor({1, 1, 2, 4}, DType::f32, 15), k = Tensor::empty({1, 1, 0, 4}, DType::f32);
  Tensor dout = random_tensor({1, 1, 2, 4}, DType::f32, 16);
  Result r = run_attention(q, k, k, dout, 1, false);
  EXPECT_EQ(values(r.out), Vec(8, 0.0));
  EXPECT_EQ(values(r.lse), Vec(2, -INFINITY));
  EXPECT_EQ(values(r.dq), Vec(8, 0.0));
}

TEST(AttentionKernel, ZeroQueriesGiveZeroKeyGradients) {
  Tensor q = Tensor::empty({1, 2, 0, 4}, DType::f64), k = random_tensor({1, 2, 3, 4}, DType::f64, 17);
  Result r = run_attention(q, k, k, q, 1, true);
  EXPECT_EQ(values(r.dk), Vec(24, 0.0));
  EXPECT_EQ(values(r.dv), Vec(24, 0.0));
}

// ---- the op: checks, layouts, dtypes, reference

TEST(AttentionOp, AttentionChecks) {
  Tensor q = random_tensor({1, 4, 3, 8}, DType::f32, 11), k = random_tensor({1, 3, 5, 8}, DType::f32, 12);
  expect_error([&] { fused::attention_forward(q, k, k, 1, true); }, "q has 4 heads, not a multiple of the 3 kv heads");
  Tensor k2 = random_tensor({1, 2, 5, 8}, DType::f32, 13);
  expect_error([&] { fused::attention_forward(q, k2, random_tensor({1, 2, 4, 8}, DType::f32, 1), 1, true); },
               "v (same shape as k) must have shape [1, 2, 5, 8], found [1, 2, 4, 8]");
  expect_error([&] { fused::attention_forward(q, random_tensor({1, 2, 5, 6}, DType::f32, 1), k2, 1, true); }, "k must be");
  expect_error([&] { fused::attention_forward(q, packed(k2, DType::f64), packed(k2, DType::f64), 1, true); },
               "k is float64 but q is float32");
  expect_error([&] { fused::attention_forward(random_tensor({1, 2, 6, 8}, DType::f32, 1), k2, k2, 1, true); },
               "found Tq 6 > Tk 5");
  expect_error([&] { fused::attention_forward(random_tensor({4, 3, 8}, DType::f32, 1), k2, k2, 1, true); },
               "q must be (B, heads, T, D)");
  // GQA through the ops layer: Hkv = 2 equals repeating each kv head twice.
  fused::AttentionResult r = fused::attention_forward(q, k2, k2, 0.3, true);
  Tensor rep = Tensor::empty({1, 4, 5, 8}, DType::f32);
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < 40; ++i) write_element(rep, h * 40 + i, read_element(k2, (h / 2) * 40 + i));
  EXPECT_TRUE(all_close(r.out, fused::attention_forward(q, rep, rep, 0.3, true).out, 1e-6));
  auto g = fused::attention_backward(r.out, q, k2, k2, r, 0.3, true);
  EXPECT_EQ(g[1].shape(), k2.shape());
  expect_error([&] { fused::attention_backward(k2, q, k2, k2, r, 0.3, true); }, "dout must have shape [1, 4, 3, 8]");
}

TEST(AttentionOp, AttentionOnStridedAndExpandedViews) {
  // k expanded over T (stride 0 rows) must be copied, not read with overlapping rows.
  Tensor q = random_tensor({1, 1, 3, 4}, DType::f64, 14), row = random_tensor({1, 1, 1, 4}, DType::f64, 15);
  Tensor kx = row.as_strided({1, 1, 5, 4}, {4, 4, 0, 1}, 0);
  fused::AttentionResult a = fused::attention_forward(q, kx, kx, 1, false);
  fused::AttentionResult b = fused::attention_forward(q, packed(kx, DType::f64), packed(kx, DType::f64), 1, false);
  EXPECT_TRUE(all_close(a.out, b.out, 1e-14));
  EXPECT_TRUE(all_close(a.lse, b.lse, 1e-14));
}

TEST(AttentionOp, Bfloat16IsWidenedAndCastBack) {
  Tensor q = packed(random_tensor({1, 2, 3, 4}, DType::f32, 6), DType::bf16);
  fused::AttentionResult r = fused::attention_forward(q, q, q, 0.5, true);
  EXPECT_EQ(r.out.dtype(), DType::bf16);
  EXPECT_EQ(r.lse.dtype(), DType::f32);
  EXPECT_TRUE(all_close(r.out, fused::attention_forward(packed(q, DType::f32), packed(q, DType::f32),
                                                        packed(q, DType::f32), 0.5, true).out, 2e-2, 1e-2));
}

// hsum8_of_eight (decoding's attention adds up eight keys' sums together): lane k is
// hsum8(low8(acc[k]) + high8(acc[k])) bit for bit, with magnitudes far apart (where the order of the
// adds shows), signed zeros, infinities and NaN.
TEST(VectorSums, EightSumsAtOnceAreHsum8OfEach) {
#ifdef __AVX512F__
  std::mt19937 rng(41);
  std::uniform_real_distribution<float> mantissa(-1, 1);
  std::uniform_int_distribution<int> exponent(-30, 30), special(0, 40);
  for (int trial = 0; trial < 2000; ++trial) {
    cpu::fused::f32x16 acc[8];
    for (auto &v : acc)
      for (int l = 0; l < 16; ++l) {
        const int k = special(rng);
        v[l] = k == 0 ? -0.0f : k == 1 ? INFINITY : k == 2 ? -INFINITY : k == 3 && trial % 7 == 0 ? NAN
                                                                                       : std::ldexp(mantissa(rng), exponent(rng));
      }
    const cpu::fused::f32x8 got = cpu::fused::hsum8_of_eight(acc);
    for (int k = 0; k < 8; ++k) {
      const float want = cpu::fused::hsum8(cpu::fused::low8(acc[k]) + cpu::fused::high8(acc[k]));
      if (std::isnan(want)) ASSERT_TRUE(std::isnan(got[k])) << trial << " " << k;
      else ASSERT_EQ(std::bit_cast<uint32_t>(got[k]), std::bit_cast<uint32_t>(want)) << trial << " " << k;
    }
  }
#else
  GTEST_SKIP() << "skipped: built without AVX-512 (hsum8_of_eight is its sixteen-lane path)";
#endif
}

// A bf16 KV cache (float32 q, bfloat16 k and v): the values of k and v widened to float32, bit for
// bit, whether the CPU reads them in place (one query row: decoding, its own kernel) or the op
// widens them first (more rows); the gradients of k and v come back in bfloat16; a cache view
// (rows spaced by its capacity) is read as it is; mixed dtypes other than this one are refused.
TEST(AttentionOp, Bf16KvCacheIsReadAsItsWidenedValues) {
  struct Case {
    int64_t B, H, Hkv, Tq, Tk, D;
    bool causal;
  };
  for (const Case& c : {Case{2, 4, 2, 1, 37, 64, true}, Case{1, 6, 6, 1, 256, 64, true}, Case{2, 3, 1, 1, 9, 5, false},
                        Case{1, 2, 2, 1, 1, 8, true}, Case{2, 4, 2, 3, 11, 16, true}, Case{1, 2, 1, 4, 4, 7, false}}) {
    SCOPED_TRACE("B " + std::to_string(c.B) + " H " + std::to_string(c.H) + " Hkv " + std::to_string(c.Hkv) + " Tq " +
                 std::to_string(c.Tq) + " Tk " + std::to_string(c.Tk) + " D " + std::to_string(c.D) +
                 (c.causal ? " causal" : ""));
    const double scale = 1.0 / std::sqrt(double(c.D));
    Tensor q = random_tensor({c.B, c.H, c.Tq, c.D}, DType::f32, 21);
    // The cache's layout: (B, Hkv, capacity, D) buffers, the filled rows a narrow view of them.
    const int64_t capacity = c.Tk + 5;
    Tensor kbuf = packed(random_tensor({c.B, c.Hkv, capacity, c.D}, DType::f32, 22, -2, 2), DType::bf16);
    Tensor vbuf = packed(random_tensor({c.B, c.Hkv, capacity, c.D}, DType::f32, 23, -2, 2), DType::bf16);
    Tensor kb = ops::narrow(kbuf, 2, 3, c.Tk), vb = ops::narrow(vbuf, 2, 3, c.Tk);
    Tensor kw = packed(kb, DType::f32), vw = packed(vb, DType::f32);
    for (bool bf16_products : {false, true}) {
      SCOPED_TRACE(bf16_products ? "bf16 products" : "float32 products");
      fused::AttentionResult got = fused::attention_forward(q, kb, vb, scale, c.causal, bf16_products);
      fused::AttentionResult want = fused::attention_forward(q, kw, vw, scale, c.causal, bf16_products);
      ASSERT_EQ(got.out.dtype(), DType::f32);
      for (int64_t i = 0; i < want.out.numel(); ++i) ASSERT_EQ(read_element(got.out, i), read_element(want.out, i)) << i;
      for (int64_t i = 0; i < want.lse.numel(); ++i) ASSERT_EQ(read_element(got.lse, i), read_element(want.lse, i)) << i;
      Tensor dout = random_tensor(q.shape(), DType::f32, 24);
      std::vector<Tensor> g = fused::attention_backward(dout, q, kb, vb, got, scale, c.causal, bf16_products);
      std::vector<Tensor> gw = fused::attention_backward(dout, q, kw, vw, want, scale, c.causal, bf16_products);
      ASSERT_EQ(g[1].dtype(), DType::bf16);
      ASSERT_EQ(g[2].dtype(), DType::bf16);
      for (int64_t i = 0; i < q.numel(); ++i) ASSERT_EQ(read_element(g[0], i), read_element(gw[0], i)) << "dq " << i;
      for (int64_t i = 0; i < kb.numel(); ++i) {
        ASSERT_EQ(read_element(g[1], i), double(float(bfloat16(float(read_element(gw[1], i)))))) << "dk " << i;
        ASSERT_EQ(read_element(g[2], i), double(float(bfloat16(float(read_element(gw[2], i)))))) << "dv " << i;
      }
    }
    // The slow reference widens them too.
    fused::AttentionResult ref = fused::reference::attention(q, kb, vb, scale, c.causal);
    EXPECT_TRUE(all_close(ref.out, fused::attention_forward(q, kb, vb, scale, c.causal).out, 1e-5));
  }
  Tensor q = random_tensor({1, 2, 1, 8}, DType::f32, 25), kf = random_tensor({1, 2, 4, 8}, DType::f32, 26);
  Tensor kb = packed(kf, DType::bf16);
  expect_error([&] { fused::attention_forward(q, kb, kf, 1, true); }, "k is bfloat16 but q is float32");
  expect_error([&] { fused::attention_forward(packed(q, DType::bf16), kf, kf, 1, true); }, "k is float32 but q is bfloat16");
  expect_error([&] { fused::attention_forward(packed(q, DType::f64), kb, kb, 1, true); }, "k is bfloat16 but q is float64");
}

struct AttnShape {
  int64_t B, H, Hkv, Tq, Tk, D;
  bool causal;
};

TEST(AttentionOp, KernelsMatchTheSlowReference) {
  for (const AttnShape& s : {AttnShape{2, 4, 4, 9, 9, 8, true}, AttnShape{1, 4, 1, 9, 9, 8, true},
                             AttnShape{2, 4, 2, 3, 12, 8, true}, AttnShape{2, 4, 2, 1, 12, 8, true},
                             AttnShape{1, 2, 2, 7, 5, 4, false}, AttnShape{1, 2, 1, 70, 70, 8, true}})
    for (DType dt : {DType::f64, DType::f32}) {
      const double tol = dt == DType::f64 ? 1e-12 : 3e-5;
      Tensor q = random_tensor({s.B, s.H, s.Tq, s.D}, dt, 6, -2, 2);
      Tensor k = random_tensor({s.B, s.Hkv, s.Tk, s.D}, dt, 7, -2, 2), v = random_tensor({s.B, s.Hkv, s.Tk, s.D}, dt, 8);
      const double scale = 1 / std::sqrt(double(s.D));
      fused::AttentionResult got = fused::attention_forward(q, k, v, scale, s.causal);
      fused::AttentionResult want = fused::reference::attention(q, k, v, scale, s.causal);
      EXPECT_TRUE(all_close(got.out, want.out, tol, tol)) << s.Hkv << " " << s.Tq << " " << s.Tk;
      EXPECT_TRUE(all_close(got.lse, want.lse, tol, tol)) << s.Hkv << " " << s.Tq << " " << s.Tk;
    }
}

// --- the CUDA kernels' two routes (NOTE [ Attention through batched products ] in attention.cu)

// Sets the CUDA attention route (and the batched route's score budget) for one scope.
struct RouteScope {
  RouteScope(fused::CudaAttentionRoute r, int64_t budget) {
    fused::set_cuda_attention_route(r);
    fused::set_cuda_attention_score_budget(budget);
  }
  ~RouteScope() {
    fused::set_cuda_attention_route(fused::CudaAttentionRoute::automatic);
    fused::set_cuda_attention_score_budget(0);
  }
};

// out, lse, dq, dk, dv on the CPU, from one route's kernels on cuda:0 (bf16_products as given;
// budget: the bytes of one scores buffer, 0 for the default).
std::vector<Tensor> run_route(fused::CudaAttentionRoute route, const AttnShape& s, DType dt, bool bf16_products,
                              int64_t budget = 0) {
  const RouteScope scope(route, budget);
  const Device d = Device::cuda(0);
  Tensor q = fused::uniform_on(d, {s.B, s.H, s.Tq, s.D}, dt, 31, -1, 1);
  // k and v as strided views out of one packed (B, Tk, 2, Hkv, D) tensor, as the model splits them.
  Tensor kv = fused::uniform_on(d, {s.B, s.Tk, 2, s.Hkv, s.D}, dt, 32, -1, 1);
  Tensor k = ops::permute(ops::select(kv, 2, 0), {0, 2, 1, 3}), v = ops::permute(ops::select(kv, 2, 1), {0, 2, 1, 3});
  Tensor dout = fused::uniform_on(d, {s.B, s.H, s.Tq, s.D}, dt, 33);
  const double scale = 1 / std::sqrt(double(s.D));
  fused::AttentionResult a = fused::attention_forward(q, k, v, scale, s.causal, bf16_products);
  std::vector<Tensor> r{a.out, a.lse};
  for (const Tensor& g : fused::attention_backward(dout, q, k, v, a, scale, s.causal, bf16_products)) r.push_back(g);
  for (Tensor& t : r) t = ops::to(t, Device::cpu());
  return r;
}

const char* const kResultNames[] = {"out", "lse", "dq", "dk", "dv"};

TEST(AttentionCuda, BatchedRouteMatchesThePerRowKernels) {
  MVGPT_SKIP_WITHOUT_CUDA("the batched cuBLAS route against the per-row kernels it replaced, forward and backward");
  // The series' shape; grouped kv heads; a cache offset (Tq < Tk); not causal; fewer queries than
  // the automatic choice batches; and one whose scores exceed the budget (two slices of units).
  const AttnShape shapes[] = {{4, 6, 6, 256, 256, 64, true}, {2, 8, 2, 40, 40, 16, true}, {1, 4, 1, 20, 50, 8, true},
                              {2, 2, 2, 17, 33, 8, false},   {2, 2, 1, 3, 9, 8, true},    {16, 6, 6, 1024, 1024, 16, true}};
  for (const AttnShape& s : shapes)
    for (DType dt : {DType::f32, DType::f64}) {
      if (dt == DType::f64 && s.Tq == 1024) continue;  // the slices are the point there; f32 shows them
      const std::vector<Tensor> rows = run_route(fused::CudaAttentionRoute::rows, s, dt, false);
      const std::vector<Tensor> batched = run_route(fused::CudaAttentionRoute::batched, s, dt, false);
      const double tol = dt == DType::f64 ? 1e-11 : 1e-4;
      for (size_t i = 0; i < rows.size(); ++i)
        EXPECT_TRUE(all_close(batched[i], rows[i], tol, tol))
            << kResultNames[i] << " of (B " << s.B << ", H " << s.H << ", Hkv " << s.Hkv << ", Tq " << s.Tq << ", Tk "
            << s.Tk << ", D " << s.D << (s.causal ? ", causal" : "") << ") in " << dtype_name(dt);
    }
}

TEST(AttentionCuda, BatchedRouteInSlicesMatchesThePerRowKernels) {
  MVGPT_SKIP_WITHOUT_CUDA("the batched route over several slices of (batch, kv head) units");
  // 6 units of 4 query heads x 24 queries against 40 keys: a 32000-byte budget holds 2 units' float32
  // scores (3 slices) and 1 unit's float64 scores (6 slices).
  const AttnShape s{3, 8, 2, 24, 40, 16, true};
  for (DType dt : {DType::f32, DType::f64}) {
    const std::vector<Tensor> rows = run_route(fused::CudaAttentionRoute::rows, s, dt, false);
    const std::vector<Tensor> sliced = run_route(fused::CudaAttentionRoute::batched, s, dt, false, 32000);
    const double tol = dt == DType::f64 ? 1e-11 : 1e-4;
    for (size_t i = 0; i < rows.size(); ++i)
      EXPECT_TRUE(all_close(sliced[i], rows[i], tol, tol)) << kResultNames[i] << " in " << dtype_name(dt);
  }
  // bf16 operands: sliced against one slice (the same roundings; only the products' batch differs).
  const std::vector<Tensor> whole = run_route(fused::CudaAttentionRoute::batched, s, DType::f32, true);
  const std::vector<Tensor> sliced = run_route(fused::CudaAttentionRoute::batched, s, DType::f32, true, 32000);
  for (size_t i = 0; i < whole.size(); ++i)
    EXPECT_TRUE(all_close(sliced[i], whole[i], 1e-2, 1e-2)) << kResultNames[i] << " with bf16 products";
}

TEST(AttentionCuda, BatchedRouteIsDeterministic) {
  MVGPT_SKIP_WITHOUT_CUDA("two runs of the batched route, bit for bit");
  const AttnShape s{2, 6, 2, 128, 128, 64, true};
  const std::vector<Tensor> a = run_route(fused::CudaAttentionRoute::batched, s, DType::f32, true);
  const std::vector<Tensor> b = run_route(fused::CudaAttentionRoute::batched, s, DType::f32, true);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(all_close(a[i], b[i], 0)) << kResultNames[i];
}

TEST(AttentionCuda, Bf16ProductsOnTensorCoresMatchTheCpuKernels) {
  MVGPT_SKIP_WITHOUT_CUDA("the batched route's bf16 products against the CPU kernels' bf16 products");
  if (!backend_for(Device::cuda(0)).bf16_support().native) GTEST_SKIP() << "no bf16 tensor cores on this GPU";
  const AttnShape s{2, 6, 2, 96, 96, 64, true};
  const std::vector<Tensor> gpu = run_route(fused::CudaAttentionRoute::batched, s, DType::f32, true);
  // The same inputs on the CPU (uniform_on draws them on the CPU), through the CPU kernels.
  Tensor q = fused::uniform_on(Device::cpu(), {s.B, s.H, s.Tq, s.D}, DType::f32, 31, -1, 1);
  Tensor kv = fused::uniform_on(Device::cpu(), {s.B, s.Tk, 2, s.Hkv, s.D}, DType::f32, 32, -1, 1);
  Tensor k = ops::permute(ops::select(kv, 2, 0), {0, 2, 1, 3}), v = ops::permute(ops::select(kv, 2, 1), {0, 2, 1, 3});
  Tensor dout = fused::uniform_on(Device::cpu(), {s.B, s.H, s.Tq, s.D}, DType::f32, 33);
  fused::AttentionResult a = fused::attention_forward(q, k, v, 0.125, true, true);
  std::vector<Tensor> cpu{a.out, a.lse};
  for (const Tensor& g : fused::attention_backward(dout, q, k, v, a, 0.125, true, true)) cpu.push_back(g);
  // Both round the same operands to bfloat16; the float32 sums differ in order, which may move a
  // probability across a bfloat16 rounding boundary (one bfloat16 step, 2^-8 relative).
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_TRUE(all_close(gpu[i], cpu[i], 1e-2, 1e-2)) << kResultNames[i];
  // And bf16 shows: the float32 per-row kernels differ from it by more than float32 rounding.
  const std::vector<Tensor> fp32 = run_route(fused::CudaAttentionRoute::rows, s, DType::f32, true);
  EXPECT_FALSE(all_close(gpu[0], fp32[0], 1e-6, 1e-6)) << "the bf16 route's output equals float32's";
}

}  // namespace
}  // namespace mvgpt
