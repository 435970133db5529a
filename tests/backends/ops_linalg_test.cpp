// matmul against a naive double loop: NumPy semantics, transposed and sliced operands, batches.
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <vector>

#include <mvgpt/backends/ops.h>
#include "ops_test_util.h"

namespace mvgpt {
namespace {

using testing::expect_all_close;
using testing::expect_throw_with;
using testing::Kind;
using testing::make_input;

// Reference: out[..., i, j] = sum_k a[..., i, k] * b[..., k, j], with a and b already broadcast
// to (batch, M, K) and (batch, K, N) by expand.
void expect_matmul(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  Tensor y = ops::matmul(a, b);
  Tensor a2 = a.dim() == 1 ? ops::unsqueeze(a, 0) : a;
  Tensor b2 = b.dim() == 1 ? ops::unsqueeze(b, 1) : b;
  const int64_t M = a2.size(-2), K = a2.size(-1), N = b2.size(-1);
  Shape ba = a2.shape(), bb = b2.shape();
  ba.resize(a2.dim() - 2);
  bb.resize(b2.dim() - 2);
  Shape batch = broadcast_shapes(ba, bb, "test");
  Shape sa = batch, sb = batch;
  sa.push_back(M), sa.push_back(K), sb.push_back(K), sb.push_back(N);
  Tensor ea = ops::expand(a2, sa), eb = ops::expand(b2, sb);
  ASSERT_EQ(y.numel(), numel(batch) * M * N) << what;
  expect_all_close(y, [&](int64_t idx) {
    int64_t bi = idx / (M * N), i = (idx / N) % M, j = idx % N;
    double acc = 0;
    for (int64_t k = 0; k < K; ++k) acc += read_element(ea, (bi * M + i) * K + k) * read_element(eb, (bi * K + k) * N + j);
    return acc;
  }, tol, what);
}

TEST(OpsMatmul, ShapesAndLayouts) {
  struct Case {
    Shape a, b, out;
  };
  const Case cases[] = {
      {{5, 7}, {7, 3}, {5, 3}},         {{7}, {7, 3}, {3}},          {{5, 7}, {7}, {5}},
      {{7}, {7}, {}},                   {{2, 5, 7}, {7, 3}, {2, 5, 3}}, {{5, 7}, {4, 7, 3}, {4, 5, 3}},
      {{2, 1, 5, 7}, {3, 7, 4}, {2, 3, 5, 4}}, {{1, 7}, {7, 1}, {1, 1}}, {{0, 7}, {7, 3}, {0, 3}},
      {{5, 0}, {0, 3}, {5, 3}},         {{3, 5, 7}, {7}, {3, 5}},
  };
  for (const auto& c : cases) {
    for (DType dt : {DType::f32, DType::f64}) {
      for (Kind ka : {Kind::contiguous, Kind::transposed, Kind::sliced, Kind::expanded}) {
        for (Kind kb : {Kind::contiguous, Kind::transposed, Kind::sliced}) {
          Tensor a = make_input(c.a, dt, 1, ka), b = make_input(c.b, dt, 2, kb);
          ASSERT_EQ(ops::matmul(a, b).shape(), c.out) << to_string(c.a) << " @ " << to_string(c.b);
          expect_matmul(a, b, dt == DType::f32 ? 1e-5 : 1e-12,
                        to_string(c.a) + " @ " + to_string(c.b) + " " + testing::kind_name(ka) + "/" +
                            testing::kind_name(kb));
        }
      }
    }
  }
}

TEST(OpsMatmul, BatchOfSmallMatricesUsesEveryLayout) {
  // Attention-like: (B, H, T, D) @ (B, H, D, T) with k transposed as a view.
  Tensor q = make_input({2, 3, 16, 8}, DType::f32, 3);
  Tensor k = ops::transpose(make_input({2, 3, 16, 8}, DType::f32, 4), -1, -2);
  expect_matmul(q, k, 1e-5, "q @ k^T");
  // A stride-0 expanded matrix dim forces a packed copy.
  Tensor e = ops::expand(make_input({1, 8}, DType::f32, 5), {6, 8});
  expect_matmul(e, make_input({8, 4}, DType::f32, 6), 1e-5, "expanded rows");
  // Results do not depend on the thread count (batch-parallel path vs serial).
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 2}) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, size_t(threads));
    runs.push_back(ops::matmul(q, k).to_vector<float>());
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST(OpsMatmul, LargeSharedWeightFoldsIntoOneGemm) {
  Tensor x = make_input({4, 64, 96}, DType::f32, 7);
  Tensor w = make_input({96, 80}, DType::f32, 8, Kind::transposed);  // a transposed nn.Linear weight
  expect_matmul(x, w, 1e-5, "x @ w^T");
}

TEST(OpsMatmul, Bfloat16AndErrors) {
  Tensor a = ops::to(make_input({4, 6}, DType::f32, 1), DType::bf16);
  Tensor b = ops::to(make_input({6, 3}, DType::f32, 2), DType::bf16);
  Tensor y = ops::matmul(a, b);
  EXPECT_EQ(y.dtype(), DType::bf16);
  expect_matmul(a, b, 2e-2, "bf16");
  expect_throw_with([&] { ops::matmul(ops::zeros({2, 3}), ops::zeros({4, 5})); },
                    "matmul: shapes [2, 3] and [4, 5] do not match (3 vs 4)");
  expect_throw_with([&] { ops::matmul(ops::zeros({2, 3}), ops::zeros({3, 5}, DType::f64)); },
                    "matmul: dtype float32 vs float64");
  expect_throw_with([&] { ops::matmul(ops::zeros({2, 3}, DType::i64), ops::zeros({3, 5}, DType::i64)); },
                    "matmul: expected a floating-point tensor, found int64");
  expect_throw_with([&] { ops::matmul(ops::zeros({}), ops::zeros({3})); }, "matmul: both operands need at least 1");
  expect_throw_with([&] { ops::matmul(ops::zeros({2, 2, 3}), ops::zeros({3, 3, 4})); },
                    "matmul: shapes [2] and [3] do not broadcast");
}

}  // namespace
}  // namespace mvgpt
