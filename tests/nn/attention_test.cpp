// CausalSelfAttention and SelfAttention (no mask) against a naive double-precision implementation, fused vs unfused, gradients,
// and the KV cache (token by token equals full attention; sliding keeps the last n).
#include <mvgpt/nn/attention.h>

#include <gtest/gtest.h>

#include <cmath>

#include <mvgpt/autograd/gradcheck.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/nn/kv_cache.h>
#include "nn/test_util.h"

namespace mvgpt::nn {
namespace {

using testing::expect_close;
using testing::vals;

// The whole layer in double loops: qkv projection, split-half rope, softmax attention (causal or not) with
// GQA (query head h reads kv head h / (H / Hkv)), output projection. x (B, T, C), positions[t].
std::vector<double> naive_attention(const SelfAttention& m, const Tensor& x, const std::vector<int64_t>& pos) {
  const auto& cfg = m.config;
  const int64_t B = x.size(0), T = x.size(1), C = cfg.n_embd, H = cfg.n_head, Hkv = cfg.n_kv_head, D = m.head_dim;
  const int64_t Q = (H + 2 * Hkv) * D;
  std::vector<double> xv = vals(x), wa = vals(m.c_attn->weight), wp = vals(m.c_proj->weight);
  std::vector<double> ba = m.c_attn->bias.defined() ? vals(m.c_attn->bias) : std::vector<double>(size_t(Q), 0.0);
  std::vector<double> bp = m.c_proj->bias.defined() ? vals(m.c_proj->bias) : std::vector<double>(size_t(C), 0.0);
  std::vector<double> qkv(size_t(B * T * Q));
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t o = 0; o < Q; ++o) {
      double s = ba[size_t(o)];
      for (int64_t i = 0; i < C; ++i) s += xv[size_t(r * C + i)] * wa[size_t(o * C + i)];
      qkv[size_t(r * Q + o)] = s;
    }
  // Rotate one head vector in place (split-half pairs i, i + D/2).
  auto rotate = [&](double* v, int64_t p) {
    for (int64_t i = 0; i < D / 2; ++i) {
      double theta = double(p) * std::pow(cfg.rope_base, -2.0 * double(i) / double(D));
      double a = v[i], b = v[i + D / 2];
      v[i] = a * std::cos(theta) - b * std::sin(theta);
      v[i + D / 2] = b * std::cos(theta) + a * std::sin(theta);
    }
  };
  auto at = [&](int64_t b, int64_t t, int64_t col) -> double* { return &qkv[size_t((b * T + t) * Q + col)]; };
  if (cfg.rope)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t h = 0; h < H; ++h) rotate(at(b, t, h * D), pos[size_t(t)]);
        for (int64_t h = 0; h < Hkv; ++h) rotate(at(b, t, (H + h) * D), pos[size_t(t)]);
      }
  std::vector<double> y(size_t(B * T * C));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kh = h / (H / Hkv);
      for (int64_t i = 0; i < T; ++i) {
        const int64_t last = cfg.causal ? i : T - 1;  // the last key query i sees
        std::vector<double> s(size_t(last + 1));
        double mx = -INFINITY, z = 0;
        for (int64_t j = 0; j <= last; ++j) {
          double d = 0;
          for (int64_t c = 0; c < D; ++c) d += *at(b, i, h * D + c) * *at(b, j, (H + kh) * D + c);
          s[size_t(j)] = d / std::sqrt(double(D));
          mx = std::max(mx, s[size_t(j)]);
        }
        for (double& v : s) z += (v = std::exp(v - mx));
        for (int64_t c = 0; c < D; ++c) {
          double acc = 0;
          for (int64_t j = 0; j <= last; ++j) acc += s[size_t(j)] / z * *at(b, j, (H + Hkv + kh) * D + c);
          y[size_t((b * T + i) * C + h * D + c)] = acc;
        }
      }
    }
  std::vector<double> out(size_t(B * T * C));
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t o = 0; o < C; ++o) {
      double s = bp[size_t(o)];
      for (int64_t i = 0; i < C; ++i) s += y[size_t(r * C + i)] * wp[size_t(o * C + i)];
      out[size_t(r * C + o)] = s;
    }
  return out;
}

std::vector<int64_t> iota(int64_t from, int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = from + i;
  return v;
}

struct Case {
  const char* name;
  AttentionConfig config;
};
const Case kCases[] = {
    {"mha", {.n_embd = 12, .n_head = 3}},
    {"gqa_rope", {.n_embd = 16, .n_head = 4, .n_kv_head = 2, .rope = true, .rope_base = 100}},
    {"mqa_rope_nobias", {.n_embd = 8, .n_head = 2, .n_kv_head = 1, .rope = true, .bias = false}},
};

TEST(CausalSelfAttention, ShapesOfTheFusedProjection) {
  CausalSelfAttention mha({.n_embd = 12, .n_head = 3});
  EXPECT_EQ(mha.c_attn->weight.shape(), (Shape{36, 12}));  // nanoGPT's [3C, C]
  EXPECT_EQ(mha.c_proj->weight.shape(), (Shape{12, 12}));
  CausalSelfAttention gqa({.n_embd = 16, .n_head = 4, .n_kv_head = 2});
  EXPECT_EQ(gqa.c_attn->weight.shape(), (Shape{32, 16}));  // (4 + 2 * 2) * 4
  EXPECT_THROW(CausalSelfAttention({.n_embd = 10, .n_head = 3}), std::invalid_argument);
  EXPECT_THROW(CausalSelfAttention({.n_embd = 12, .n_head = 4, .n_kv_head = 3}), std::invalid_argument);
  EXPECT_THROW(CausalSelfAttention({.n_embd = 6, .n_head = 2, .rope = true}), std::invalid_argument);  // D = 3
  EXPECT_THROW(mha(ops::zeros({2, 3, 11})), std::invalid_argument);
}

TEST(CausalSelfAttention, FusedAndUnfusedMatchNaive) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    Generator gen(21);
    CausalSelfAttention m(c.config, {.gen = &gen, .std = 0.3});
    if (m.c_attn->bias.defined()) { NoGradGuard no_grad; ops::copy_(m.c_attn->bias, testing::randn(m.c_attn->bias.shape(), 4)); }
    Tensor x = testing::randn({2, 5, c.config.n_embd}, 22);
    std::vector<double> want = naive_attention(m, x, iota(0, 5));
    m.use_fused = true;
    Tensor fused = m(x);
    EXPECT_EQ(fused.shape(), x.shape());
    expect_close(fused, want, 1e-5, "fused");
    m.use_fused = false;
    expect_close(m(x), want, 1e-5, "unfused");
    // Explicit positions (as a sliding cache would give).
    if (c.config.rope) {
      Tensor pos = Tensor::from_vector<int64_t>(iota(7, 5));
      m.use_fused = true;
      expect_close(m(x, pos), naive_attention(m, x, iota(7, 5)), 1e-5, "positions");
    }
  }
}

TEST(CausalSelfAttention, FusedMatchesReferenceWithCacheOffset) {
  // Tq < Tk: query i sits at key position Tk - Tq + i (both paths must agree on the offset).
  Tensor q = testing::randn({2, 4, 3, 8}, 1, DType::f64);
  Tensor k = testing::randn({2, 2, 7, 8}, 2, DType::f64);
  Tensor v = testing::randn({2, 2, 7, 8}, 3, DType::f64);
  expect_close(CausalSelfAttention::attend_fused(q, k, v), CausalSelfAttention::attend_reference(q, k, v), 1e-12);
  // Strided views of q (a transposed (B, T, H, D) layout, as the layer makes).
  Tensor qt = ops::transpose(testing::randn({2, 3, 4, 8}, 4, DType::f64), 1, 2);
  expect_close(CausalSelfAttention::attend_fused(qt, k, v), CausalSelfAttention::attend_reference(qt, k, v), 1e-12);
  EXPECT_THROW(CausalSelfAttention::attend_reference(q, ops::narrow(k, 2, 0, 2), ops::narrow(v, 2, 0, 2)),
               std::invalid_argument);  // Tk < Tq
  EXPECT_THROW(CausalSelfAttention::attend_fused(q, k, ops::narrow(v, 3, 0, 4)), std::invalid_argument);
}

TEST(CausalSelfAttention, Gradients) {
  for (bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused" : "unfused");
    CausalSelfAttention m({.n_embd = 4, .n_head = 2, .n_kv_head = 1, .rope = true}, {.dtype = DType::f64, .std = 0.5});
    { NoGradGuard no_grad; ops::copy_(m.c_attn->bias, testing::randn(m.c_attn->bias.shape(), 5)); }
    m.use_fused = fused;
    std::vector<Tensor> inputs{testing::randn({1, 3, 4}, 6, DType::f64)};
    for (const Tensor& p : m.parameters()) inputs.push_back(p);
    auto r = autograd::gradcheck("CausalSelfAttention", [&](const autograd::Inputs& in) { return m(in[0]); }, inputs);
    EXPECT_TRUE(r.ok) << r.message;
  }
}

// QK-norm: each head's q and k RMS-normalised (learned gains) before the rotation. Scaling the query
// and key rows of c_attn then changes nothing (without QK-norm it sharpens the attention), and the
// gradients hold, gains included.
TEST(CausalSelfAttention, QkNormMakesTheLogitsScaleFreeAndHasGradients) {
  auto layer = [](bool qk_norm) {
    auto m = std::make_shared<CausalSelfAttention>(
        AttentionConfig{.n_embd = 8, .n_head = 2, .n_kv_head = 1, .rope = true, .qk_norm = qk_norm, .qk_norm_eps = 1e-14},
        Init{.dtype = DType::f64, .std = 0.5});
    NoGradGuard no_grad;
    ops::copy_(m->c_attn->bias, testing::randn(m->c_attn->bias.shape(), 5));
    if (qk_norm) {
      ops::copy_(m->q_norm->weight, ops::add(testing::randn({4}, 6), 1.0));
      ops::copy_(m->k_norm->weight, ops::add(testing::randn({4}, 7), 1.0));
    }
    return m;
  };
  const Tensor x = testing::randn({2, 5, 8}, 8, DType::f64);
  for (bool qk_norm : {true, false}) {
    SCOPED_TRACE(qk_norm ? "qk_norm" : "plain");
    auto m = layer(qk_norm);
    EXPECT_EQ(m->parameters().size(), qk_norm ? 6u : 4u);
    NoGradGuard no_grad;
    const Tensor before = m->forward(x);
    // Rows 0..7 are q (2 heads of 4), 8..11 k: times 3.
    Tensor scale = Tensor::from_vector<double>({3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1}, Shape{16, 1});
    ops::copy_(m->c_attn->weight, ops::mul(m->c_attn->weight, scale));
    ops::copy_(m->c_attn->bias, ops::mul(m->c_attn->bias, ops::reshape(scale, {16})));
    const Tensor after = m->forward(x);
    double diff = 0;
    for (size_t i = 0; i < vals(before).size(); ++i) diff = std::max(diff, std::abs(vals(before)[i] - vals(after)[i]));
    if (qk_norm) EXPECT_LT(diff, 1e-6);
    else EXPECT_GT(diff, 1e-3);
  }
  for (bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused" : "unfused");
    auto m = layer(true);
    m->use_fused = fused;
    std::vector<Tensor> inputs{testing::randn({1, 3, 8}, 9, DType::f64)};
    for (const Tensor& p : m->parameters()) inputs.push_back(p);
    auto r = autograd::gradcheck("QK-norm attention", [&](const autograd::Inputs& in) { return (*m)(in[0]); }, inputs);
    EXPECT_TRUE(r.ok) << r.message;
  }
}

// Self-attention over every position (an encoder's): the same layer without the causal mask.
TEST(SelfAttention, FusedAndUnfusedMatchNaiveOverEveryPosition) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    AttentionConfig config = c.config;
    config.causal = false;
    Generator gen(31);
    SelfAttention m(config, {.gen = &gen, .std = 0.3});
    EXPECT_EQ(m.type_name(), "SelfAttention");
    Tensor x = testing::randn({2, 5, config.n_embd}, 32);
    std::vector<double> want = naive_attention(m, x, iota(0, 5));
    m.use_fused = true;
    expect_close(m(x), want, 1e-5, "fused");
    m.use_fused = false;
    expect_close(m(x), want, 1e-5, "unfused");
  }
  Tensor q = testing::randn({2, 4, 3, 8}, 1, DType::f64), k = testing::randn({2, 2, 7, 8}, 2, DType::f64),
         v = testing::randn({2, 2, 7, 8}, 3, DType::f64);
  expect_close(SelfAttention::attend_fused(q, k, v, false), SelfAttention::attend_reference(q, k, v, 0.0, false), 1e-12);
}

TEST(SelfAttention, TheFirstPositionSeesTheLastOnlyWithoutTheMask) {
  Generator gen(41);
  SelfAttention encoder({.n_embd = 8, .n_head = 2, .causal = false}, {.gen = &gen});
  Generator gen2(41);
  CausalSelfAttention decoder({.n_embd = 8, .n_head = 2, .causal = false}, {.gen = &gen2});  // causal regardless
  EXPECT_TRUE(decoder.config.causal);
  EXPECT_EQ(decoder.type_name(), "CausalSelfAttention");
  NoGradGuard no_grad;  // outputs read with the raw ops
  Tensor x = testing::randn({1, 4, 8}, 42);
  Tensor changed = ops::clone(x);
  ops::copy_(ops::narrow(changed, 1, 3, 1), testing::randn({1, 1, 8}, 43));
  auto first = [](const Tensor& y) { return ops::narrow(y, 1, 0, 1).to_vector<float>(); };
  EXPECT_NE(first(encoder(x)), first(encoder(changed)));
  EXPECT_EQ(first(decoder(x)), first(decoder(changed)));
}

TEST(SelfAttention, Gradients) {
  for (bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused" : "unfused");
    SelfAttention m({.n_embd = 4, .n_head = 2, .n_kv_head = 1, .rope = true, .causal = false},
                    {.dtype = DType::f64, .std = 0.5});
    m.use_fused = fused;
    std::vector<Tensor> inputs{testing::randn({1, 3, 4}, 7, DType::f64)};
    for (const Tensor& p : m.parameters()) inputs.push_back(p);
    auto r = autograd::gradcheck("SelfAttention", [&](const autograd::Inputs& in) { return m(in[0]); }, inputs);
    EXPECT_TRUE(r.ok) << r.message;
  }
}

TEST(KVCache, TokenByTokenEqualsFullAttention) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    Generator gen(31);
    CausalSelfAttention m(c.config, {.gen = &gen, .std = 0.3});
    const int64_t B = 2, T = 7;
    Tensor x = testing::randn({B, T, c.config.n_embd}, 32);
    NoGradGuard no_grad;
    std::vector<double> full = vals(m(x));
    for (bool fused : {true, false}) {
      m.use_fused = fused;
      KVCacheLayer cache(B, m.config.n_kv_head, T, m.head_dim);
      // A prefill of 3 tokens, then one token at a time.
      Tensor first = m(ops::narrow(x, 1, 0, 3), {}, &cache);
      std::vector<Tensor> outs{first};
      for (int64_t t = 3; t < T; ++t) outs.push_back(m(ops::narrow(x, 1, t, 1), {}, &cache));
      EXPECT_EQ(cache.length(), T);
      expect_close(ops::cat(outs, 1), full, 1e-5, fused ? "fused" : "unfused");
    }
  }
}

TEST(KVCache, SlidingWindowAttendsToTheLastTokens) {
  Generator gen(41);
  CausalSelfAttention m({.n_embd = 8, .n_head = 2, .n_kv_head = 1, .rope = true}, {.gen = &gen, .std = 0.3});
  const int64_t W = 4, T = 13;
  Tensor x = testing::randn({1, T, 8}, 42);
  NoGradGuard no_grad;
  KVCacheLayer cache(1, 1, 2 * W, m.head_dim);
  for (int64_t t = 0; t < T; ++t) {
    cache.keep_last(W - 1);  // room for the new token: the window holds W keys
    Tensor pos = Tensor::from_vector<int64_t>({t}, {1});
    Tensor y = m(ops::narrow(x, 1, t, 1), pos, &cache);
    // Reference: the same layer, no cache, on the window's tokens at their absolute positions.
    int64_t from = std::max<int64_t>(0, t - W + 1), n = t - from + 1;
    Tensor ref = m(ops::narrow(x, 1, from, n), Tensor::from_vector<int64_t>(iota(from, n), {n}));
    expect_close(y, vals(ops::narrow(ref, 1, n - 1, 1)), 1e-5, "token " + std::to_string(t));
  }
  EXPECT_EQ(cache.length(), W);
}

TEST(KVCacheLayer, AppendSlideAndCompact) {
  const int64_t W = 5;
  KVCacheLayer cache(2, 3, 2 * W, 4, DType::f64);
  EXPECT_EQ(cache.capacity(), 10);
  EXPECT_EQ(cache.keys().shape(), (Shape{2, 3, 0, 4}));
  // Token t's keys are all t, values all -t: easy to recognise after shifts.
  auto token = [&](int64_t t, double sign) { return ops::full({2, 3, 1, 4}, sign * double(t), DType::f64); };
  const int64_t T = 200;
  for (int64_t t = 0; t < T; ++t) {
    cache.keep_last(W - 1);
    uint64_t version = cache.keys().version();
    cache.append(token(t, 1), token(t, -1));
    EXPECT_GT(cache.keys().version(), version);  // in-place writes are visible to saved-tensor checks
    const int64_t n = std::min<int64_t>(t + 1, W);
    ASSERT_EQ(cache.length(), n);
    Tensor k = cache.keys(), v = cache.values();
    ASSERT_EQ(k.shape(), (Shape{2, 3, n, 4}));
    for (int64_t j = 0; j < n; ++j) {
      const double want = double(t - n + 1 + j);
      EXPECT_EQ(vals(ops::narrow(k, 2, j, 1)), std::vector<double>(24, want)) << "t " << t << " j " << j;
      EXPECT_EQ(vals(ops::narrow(v, 2, j, 1)), std::vector<double>(24, -want));
    }
  }
  // The window moves once every W + 1 tokens or so, not on every token: amortised O(1).
  EXPECT_LE(cache.compactions(), T / W + 1);
  EXPECT_GE(cache.compactions(), T / (2 * W));

  cache.drop_front(2);
  EXPECT_EQ(cache.length(), W - 2);
  EXPECT_EQ(vals(ops::narrow(cache.keys(), 2, 0, 1))[0], double(T - W + 2));
  cache.keep_last(10);  // no-op
  EXPECT_EQ(cache.length(), W - 2);
  EXPECT_THROW(cache.drop_front(W), std::invalid_argument);
  EXPECT_THROW(cache.keep_last(-1), std::invalid_argument);
  // A multi-token append that needs a compaction with overlapping source and destination.
  cache.append(ops::full({2, 3, 7, 4}, 1000, DType::f64), ops::full({2, 3, 7, 4}, -1000, DType::f64));
  EXPECT_EQ(cache.length(), 10);
  EXPECT_EQ(vals(ops::narrow(cache.keys(), 2, 0, 1))[0], double(T - W + 2));
  EXPECT_EQ(vals(ops::narrow(cache.keys(), 2, 9, 1))[0], 1000.0);
  EXPECT_THROW(cache.append(token(0, 1), token(0, 1)), std::invalid_argument);  // full
  cache.clear();
  EXPECT_EQ(cache.length(), 0);
  EXPECT_THROW(cache.append(ops::zeros({2, 2, 1, 4}, DType::f64), ops::zeros({2, 2, 1, 4}, DType::f64)),
               std::invalid_argument);  // wrong head count
  EXPECT_THROW(cache.append(ops::zeros({2, 3, 1, 4}, DType::f64), ops::zeros({2, 3, 2, 4}, DType::f64)),
               std::invalid_argument);  // k and v differ
  EXPECT_THROW(KVCacheLayer(1, 0, 4, 4), std::invalid_argument);
}

TEST(KVCache, BackwardThroughAStaleCacheViewIsRefused) {
  // A graph that saved the cache's keys must not backprop after the cache was written again.
  CausalSelfAttention m({.n_embd = 4, .n_head = 1}, {.dtype = DType::f64});
  KVCacheLayer cache(1, 1, 4, 4, DType::f64);
  Tensor x = testing::randn({1, 1, 4}, 1, DType::f64);
  Tensor y = m(x, {}, &cache);
  m(x, {}, &cache);  // writes into the cache again
  EXPECT_THROW(backward(sum(y)), std::runtime_error);
}

}  // namespace
}  // namespace mvgpt::nn
