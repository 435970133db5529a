// Every fused kernel against its slow reference built from basic ops (backends/reference.h).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <mvgpt/backends/ops.h>
#include <mvgpt/backends/reference.h>
#include "fused_test_util.h"

namespace mvgpt {
namespace {

using namespace fused_test;

double tol_for(DType dt) { return dt == DType::f64 ? 1e-12 : 3e-5; }

TEST(FusedVsReference, LayerNormAndRmsNorm) {
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor x = random_tensor({3, 5, 48}, dt, 1, -3, 3), w = random_tensor({48}, dt, 2), b = random_tensor({48}, dt, 3);
    EXPECT_TRUE(all_close(ops::layer_norm(x, w, b, 1e-5).y, reference::layer_norm(x, w, b, 1e-5), tol_for(dt), tol_for(dt)));
    EXPECT_TRUE(all_close(ops::layer_norm(x, Tensor(), Tensor(), 1e-5).y,
                          reference::layer_norm(x, Tensor(), Tensor(), 1e-5), tol_for(dt), tol_for(dt)));
    EXPECT_TRUE(all_close(ops::rms_norm(x, w, 1e-6).y, reference::rms_norm(x, w, 1e-6), tol_for(dt), tol_for(dt)));
  }
}

TEST(FusedVsReference, Rope) {
  Tensor shared = Tensor::from_vector(std::vector<int64_t>{0, 3, 7, 120000});
  Tensor per_seq = Tensor::from_vector(std::vector<int32_t>{5, 6, 7, 8, 0, 1, 2, 3}, {2, 4});
  for (DType dt : {DType::f64, DType::f32})
    for (RopeLayout layout : {RopeLayout::split_half, RopeLayout::interleaved})
      for (bool inverse : {false, true}) {
        Tensor x = random_tensor({2, 3, 4, 8}, dt, 4);
        // The reference forms base^(-2i/D) as exp(-2i ln(base) / D): one ulp apart, which position
        // 120000 turns into angles ~1e-11 apart.
        EXPECT_TRUE(all_close(ops::rope(x, shared, 10000, layout, inverse),
                              reference::rope(x, shared, 10000, layout, inverse), dt == DType::f64 ? 1e-10 : 3e-5));
        EXPECT_TRUE(all_close(ops::rope(x, per_seq, 500, layout, inverse),
                              reference::rope(x, per_seq, 500, layout, inverse), tol_for(dt)));
      }
  Tensor x3 = random_tensor({3, 4, 6}, DType::f32, 5);
  EXPECT_TRUE(all_close(ops::rope(x3, shared), reference::rope(x3, shared), 3e-5));
  // Position interpolation (positions times 1/f), forward and inverse, shared and per-sequence positions.
  for (RopeLayout layout : {RopeLayout::split_half, RopeLayout::interleaved}) {
    Tensor x = random_tensor({2, 3, 4, 8}, DType::f64, 6);
    EXPECT_TRUE(all_close(ops::rope(x, shared, 10000, layout, false, 1.0 / 3.0),
                          reference::rope(x, shared, 10000, layout, false, 1.0 / 3.0), 1e-10));
    EXPECT_TRUE(all_close(ops::rope(x, per_seq, 500, layout, true, 0.25),
                          reference::rope(x, per_seq, 500, layout, true, 0.25), 1e-10));
  }
}

struct AttnShape {
  int64_t B, H, Hkv, Tq, Tk, D;
  bool causal;
};

TEST(FusedVsReference, Attention) {
  for (const AttnShape& s : {AttnShape{2, 4, 4, 9, 9, 8, true}, AttnShape{1, 4, 1, 9, 9, 8, true},
                             AttnShape{2, 4, 2, 3, 12, 8, true}, AttnShape{2, 4, 2, 1, 12, 8, true},
                             AttnShape{1, 2, 2, 7, 5, 4, false}, AttnShape{1, 2, 1, 70, 70, 8, true}})
    for (DType dt : {DType::f64, DType::f32}) {
      Tensor q = random_tensor({s.B, s.H, s.Tq, s.D}, dt, 6, -2, 2);
      Tensor k = random_tensor({s.B, s.Hkv, s.Tk, s.D}, dt, 7, -2, 2), v = random_tensor({s.B, s.Hkv, s.Tk, s.D}, dt, 8);
      const double scale = 1 / std::sqrt(double(s.D));
      ops::AttentionResult got = ops::attention(q, k, v, scale, s.causal);
      ops::AttentionResult want = reference::attention(q, k, v, scale, s.causal);
      EXPECT_TRUE(all_close(got.out, want.out, tol_for(dt), tol_for(dt))) << s.Hkv << " " << s.Tq << " " << s.Tk;
      EXPECT_TRUE(all_close(got.lse, want.lse, tol_for(dt), tol_for(dt))) << s.Hkv << " " << s.Tq << " " << s.Tk;
    }
}

TEST(FusedVsReference, CrossEntropy) {
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor logits = random_tensor({7, 33}, dt, 9, -6, 6);
    Tensor targets = Tensor::from_vector(std::vector<int64_t>{0, 32, -100, 4, 4, 17, -100});
    ops::CrossEntropyResult got = ops::cross_entropy(logits, targets);
    ops::CrossEntropyResult want = reference::cross_entropy(logits, targets);
    EXPECT_TRUE(all_close(got.losses, want.losses, tol_for(dt), tol_for(dt)));
    EXPECT_TRUE(all_close(got.lse, want.lse, tol_for(dt), tol_for(dt)));
  }
}

}  // namespace
}  // namespace mvgpt
