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

}  // namespace
}  // namespace mvgpt
