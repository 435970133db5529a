// bfloat16 products (matmul, linear) with float32 sums, on the CPU through oneDNN (where it has
// kernels) and through the float32 fallback, one-row and one-column products through mvgpt's GEMV,
// and on CUDA (cuBLAS) where there is a GPU: against a double loop over the same
// bfloat16 values (their products are exact in float32, so only the order of the float32 sum
// differs: a tight tolerance), and against float32 products of the unrounded values (bf16's own).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <mvgpt/backends/backend.h>
#include <mvgpt/backends/cpu/amx.h>
#include <mvgpt/backends/cpu/amx_gemm.h>
#include <mvgpt/backends/cpu/bf16_gemm.h>
#include <mvgpt/backends/cpu/blas.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/util/profile.h>
#include "cuda_required.h"
#include "ops_test_util.h"

namespace mvgpt {
namespace {

using testing::expect_all_close;
using testing::Kind;
using testing::make_input;

// Each CPU path, then CUDA where there is a GPU.
struct Path {
  std::string name;
  Device device;
  bool fallback;
  bool dense = false;  // oneDNN's blocks made dense (NOTE [ Dense blocks for oneDNN ] in blas.cpp)
};
std::vector<Path> paths() {
  std::vector<Path> p = {{"cpu-onednn", Device::cpu(), false},
                         {"cpu-onednn-dense-blocks", Device::cpu(), false, true},
                         {"cpu-fallback", Device::cpu(), true}};
  // Under MVGPT_REQUIRE_CUDA=1 (a GPU machine) the CUDA path is there, and fails without a GPU.
  if (cuda_available() || testing::cuda_required()) p.push_back({"cuda", Device::cuda(0), false});
  return p;
}
// The CPU road a path takes, for a scope: the float32 fallback or oneDNN, its blocks as they lie or
// made dense; the defaults put back after.
struct FallbackScope {
  explicit FallbackScope(const Path &path) : dense_was(cpu::blas::dense_blocks()) {
    cpu::bf16::use_fallback(path.fallback);
    cpu::blas::set_dense_blocks(path.dense);
  }
  ~FallbackScope() {
    cpu::bf16::use_fallback(false);
    cpu::blas::set_dense_blocks(dense_was);
  }
  bool dense_was;
};

// A bfloat16 input on `device`, laid out as `kind` (the layout survives the cast).
Tensor bf16_input(const Shape &s, uint64_t seed, Kind kind, Device device) {
  Tensor t = make_input(s, DType::f32, seed, kind);
  Tensor b = ops::to(t, DType::bf16);
  if (kind == Kind::transposed && s.size() >= 2)  // keep the layout through the cast
    b = ops::transpose(ops::contiguous(ops::to(ops::transpose(t, -1, -2), DType::bf16)), -1, -2);
  return device.is_cpu() ? b : ops::to(b, device);
}

// out[..., i, j] = sum_k a[..., i, k] b[..., k, j] in double, from a and b broadcast to out's batch.
double reference(const Tensor &a, const Tensor &b, int64_t idx) {
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  const int64_t bi = idx / (M * N), i = (idx / N) % M, j = idx % N;
  double acc = 0;
  for (int64_t k = 0; k < K; ++k) acc += read_element(a, (bi * M + i) * K + k) * read_element(b, (bi * K + k) * N + j);
  return acc;
}

// A bfloat16 result is the float32 one rounded (NOTE [ bf16 results ] in blas.cpp), up to the
// order of the float32 sums, which another kernel makes in another order: half a bfloat16 step of
// the value, plus the float32 sums' own difference (1e-5, as against the double reference).
void expect_rounded_within_a_step(const Tensor &got_any, const Tensor &want_any, const std::string &what) {
  const Tensor got = ops::to(got_any, Device::cpu()), want = ops::to(want_any, Device::cpu());
  ASSERT_EQ(got.dtype(), DType::bf16) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  int failures = 0;
  for (int64_t i = 0; i < got.numel() && failures < 5; ++i) {
    const double g = read_element(got, i), w = read_element(want, i);
    if (std::abs(g - w) > std::ldexp(std::abs(w), -8) + 1e-5 * (1 + std::abs(w))) {
      ++failures;
      ADD_FAILURE() << what << " element " << i << ": got " << g << ", the float32 result " << w;
    }
  }
}

TEST(Bf16Products, MatmulSumsBf16ProductsInFloat32) {
  struct Case {
    Shape a, b;
  };
  // Small, one-row (decoding), one-column, batched with a shared right operand (one tall GEMM),
  // batched, large enough to be cut over the thread pool, large enough for the fallback to widen its
  // operands over the pool (NOTE [ The bf16 fallback ] in blas.cpp), and wide enough to be cut along
  // N though M is larger (NOTE [ Cutting a bf16 product ]).
  const Case cases[] = {{{5, 7}, {7, 3}},         {{1, 96}, {96, 200}},     {{130, 64}, {64, 1}},
                        {{2, 9, 16}, {16, 12}},   {{3, 8, 16}, {3, 16, 8}}, {{200, 130}, {130, 150}},
                        {{130, 260}, {260, 130}}, {{1056, 16}, {16, 1024}}};
  for (const Path &path : paths()) {
    FallbackScope fallback(path);
    for (const auto &c : cases) {
      for (Kind ka : {Kind::contiguous, Kind::transposed, Kind::sliced}) {
        for (Kind kb : {Kind::contiguous, Kind::transposed}) {
          const std::string what = path.name + " " + to_string(c.a) + " @ " + to_string(c.b) + " " +
                                   testing::kind_name(ka) + "/" + testing::kind_name(kb);
          SCOPED_TRACE(what);
          Tensor a = bf16_input(c.a, 1, ka, path.device), b = bf16_input(c.b, 2, kb, path.device);
          Tensor y = ops::to(ops::matmul(a, b, DType::f32),
                             Device::cpu());  // (..., M, N) float32
          ASSERT_EQ(y.dtype(), DType::f32);
          Tensor ha = ops::to(a, Device::cpu()), hb = ops::to(b, Device::cpu());
          Shape sa = y.shape(), sb = y.shape();
          sa[sa.size() - 1] = ha.size(-1);
          sb[sb.size() - 2] = hb.size(-2);
          Tensor ea = ops::expand(ha, sa), eb = ops::expand(hb, sb);
          expect_all_close(
              y, [&](int64_t i) { return reference(ea, eb, i); }, 1e-5, what);
          // A bfloat16 result is the float32 one rounded: by default exactly (narrowed after), and
          // where it is asked for by name, written rounded by the product.
          Tensor yd = ops::to(ops::matmul(a, b), Device::cpu());
          ASSERT_EQ(yd.dtype(), DType::bf16);
          expect_all_close(
              yd, [&](int64_t i) { return double(float(bfloat16(float(read_element(y, i))))); }, 0, what);
          expect_rounded_within_a_step(ops::matmul(a, b, DType::bf16), y, what);
        }
      }
    }
  }
}

// The one-row and one-column products decoding runs (NOTE [ bf16 GEMV ] in bf16_gemm.cpp), called
// as blas::gemm is: every layout of the matrix, sums with a tail and an odd count of 16-wide chunks,
// alpha and beta, a strided result, cut over the pool and not (bit for bit the same), against a
// double loop over the same bf16 values.
TEST(Bf16Products, GemvSumsExactProductsInFloat32) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  auto bf16_values = [&](int64_t n) {
    std::vector<bfloat16> v(static_cast<size_t>(n));
    for (auto &e : v) e = bfloat16(normal(rng));
    return v;
  };
  // K: only a tail, one chunk and a tail, whole pairs of chunks, pairs + a chunk + a tail, the series' widths.
  for (int64_t K : {7, 23, 64, 119, 384, 1536}) {
    for (int64_t N : {1, 5, 300, 1000}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          for (bool row : {true, false}) {  // C (1, N) = a op(B), or C (N, 1) = op(A) b
            const std::string what = "K " + std::to_string(K) + " N " + std::to_string(N) + (ta ? " ta" : "") +
                                     (tb ? " tb" : "") + (row ? " row" : " column");
            SCOPED_TRACE(what);
            // The vector and the matrix with a leading dimension wider than their rows.
            const int64_t M = row ? 1 : N, Nc = row ? N : 1;
            const int64_t arows = ta ? K : M, acols = ta ? M : K, brows = tb ? Nc : K, bcols = tb ? K : Nc;
            const int64_t lda = acols + 3, ldb = bcols + 5, ldc = Nc + 2;
            // Sized to the last element, so that a read past it is out of the allocation.
            std::vector<bfloat16> A = bf16_values((arows - 1) * lda + acols), B = bf16_values((brows - 1) * ldb + bcols);
            std::vector<float> C0(size_t(M * ldc));
            for (auto &c : C0) c = normal(rng);
            auto a_at = [&](int64_t i, int64_t k) { return double(float(ta ? A[k * lda + i] : A[i * lda + k])); };
            auto b_at = [&](int64_t k, int64_t j) { return double(float(tb ? B[j * ldb + k] : B[k * ldb + j])); };
            for (float beta : {0.0f, 0.5f}) {
              const float alpha = beta == 0.0f ? 1.0f : -1.5f;
              std::vector<float> parallel = C0, serial = C0;
              if (beta == 0.0f)  // beta = 0 never reads C: a NaN there does not survive
                for (auto &c : parallel) c = std::nanf("");
              cpu::blas::gemm(ta, tb, M, Nc, K, alpha, A.data(), lda, B.data(), ldb, beta, parallel.data(), ldc);
              cpu::blas::gemm(ta, tb, M, Nc, K, alpha, A.data(), lda, B.data(), ldb, beta, serial.data(), ldc, false);
              for (int64_t i = 0; i < M; ++i)
                for (int64_t j = 0; j < Nc; ++j) {
                  double want = 0, size = 0;
                  for (int64_t k = 0; k < K; ++k) {
                    want += a_at(i, k) * b_at(k, j);
                    size += std::abs(a_at(i, k) * b_at(k, j));
                  }
                  want = alpha * want + (beta == 0.0f ? 0.0 : beta * double(C0[size_t(i * ldc + j)]));
                  const float got = parallel[size_t(i * ldc + j)];
                  ASSERT_NEAR(got, want, 1e-6 * (std::abs(alpha) * size + 1)) << "C[" << i << ", " << j << "]";
                  ASSERT_EQ(got, serial[size_t(i * ldc + j)]) << "cut over the pool, C[" << i << ", " << j << "]";
                }
              // The padding between C's rows is untouched.
              testing::expect_padding_untouched(parallel, serial, C0, M, Nc, ldc, beta == 0.0f);
            }
          }
        }
      }
    }
  }
}

// A NaN or an infinity in the matrix reaches exactly the outputs that read it, in both GEMVs: the
// weight stored (N, K) (x W^T, tb) and stored (K, N) (x W).
TEST(Bf16Products, GemvPassesNaNAndInfinityThrough) {
  const int64_t N = 40, K = 50;
  for (bool tb : {true, false}) {
    SCOPED_TRACE(tb ? "W (N, K)" : "W (K, N)");
    std::vector<bfloat16> W(size_t(N * K), bfloat16(0.25f)), x(size_t(K), bfloat16(1.0f));
    auto at = [&](int64_t n, int64_t k) -> bfloat16 & { return W[size_t(tb ? n * K + k : k * N + n)]; };
    at(3, 17) = bfloat16(std::nanf(""));
    at(9, 49) = bfloat16(INFINITY);
    std::vector<float> y(static_cast<size_t>(N));
    cpu::blas::gemm(false, tb, 1, N, K, 1.0f, x.data(), K, W.data(), tb ? K : N, 0.0f, y.data(), N);
    for (int64_t j = 0; j < N; ++j) {
      if (j == 3) EXPECT_TRUE(std::isnan(y[size_t(j)]));
      else if (j == 9) EXPECT_EQ(y[size_t(j)], INFINITY);
      else EXPECT_EQ(y[size_t(j)], 0.25f * K) << j;
    }
  }
}

TEST(Bf16Products, CloseToFloat32ProductsOfTheUnroundedValues) {
  // The error bf16 adds: each operand rounded to 8 bits of mantissa (relative 2^-9), summed over K.
  for (const Path &path : paths()) {
    FallbackScope fallback(path);
    SCOPED_TRACE(path.name);
    Tensor a = make_input({64, 384}, DType::f32, 3), b = make_input({384, 96}, DType::f32, 4);
    Tensor want = ops::matmul(a, b);
    Tensor got = ops::to(ops::matmul(ops::to(ops::to(a, DType::bf16), path.device),
                                     ops::to(ops::to(b, DType::bf16), path.device), DType::f32),
                         Device::cpu());
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      worst = std::max(worst, std::abs(read_element(got, i) - read_element(want, i)));
      scale = std::max(scale, std::abs(read_element(want, i)));
    }
    EXPECT_GT(worst, 0.0) << "bf16 operands should differ from float32 ones";
    EXPECT_LT(worst / scale, 2e-2) << "worst " << worst << " against values up to " << scale;
  }
}

// The bias in the product's output pass (blas::gemm_bias): small, one-row (the GEMV, bias written
// first), and cut over the pool along the rows and along the columns (each block's bias from its
// first column).
TEST(Bf16Products, LinearAddsAFloat32Bias) {
  struct Case {
    Shape x;
    int64_t out;
  };
  const Case cases[] = {{{2, 5, 48}, 40}, {{1, 96}, 200}, {{300, 64}, 130}, {{64, 128}, 520}};
  for (const Path &path : paths()) {
    FallbackScope fallback(path);
    for (const Case &c : cases) {
      const int64_t in = c.x[c.x.size() - 1], rows = Tensor::empty(c.x, DType::f32).numel() / in, O = c.out;
      SCOPED_TRACE(path.name + " " + to_string(c.x) + " -> " + std::to_string(O));
      Tensor x = bf16_input(c.x, 5, Kind::contiguous, path.device);
      Tensor w = bf16_input({O, in}, 6, Kind::contiguous, path.device);
      Tensor bias = ops::to(make_input({O}, DType::f32, 7), path.device);
      Tensor y = ops::to(ops::linear(x, w, bias, DType::f32), Device::cpu());
      Shape want_shape = c.x;
      want_shape[want_shape.size() - 1] = O;
      ASSERT_EQ(y.shape(), want_shape);
      Tensor hx = ops::reshape(ops::to(x, Device::cpu()), {rows, in}),
             hwt = ops::transpose(ops::to(w, Device::cpu()), 0, 1);
      Tensor hb = ops::to(bias, Device::cpu());
      expect_all_close(
          y, [&](int64_t i) { return reference(hx, hwt, i) + read_element(hb, i % O); }, 1e-5);
      // Without a bias, with a bfloat16 bias, and with a strided one.
      Tensor y0 = ops::to(ops::linear(x, w, Tensor(), DType::f32), Device::cpu());
      expect_all_close(
          y0, [&](int64_t i) { return reference(hx, hwt, i); }, 1e-5);
      Tensor yb = ops::to(ops::linear(x, w, ops::to(bias, DType::bf16), DType::f32), Device::cpu());
      expect_all_close(
          yb,
          [&](int64_t i) { return reference(hx, hwt, i) + double(float(bfloat16(float(read_element(hb, i % O))))); },
          1e-5);
      Tensor wide = ops::to(make_input({O, 2}, DType::f32, 8), path.device);
      Tensor strided = ops::select(wide, 1, 1);  // (O), stride 2
      Tensor ys = ops::to(ops::linear(x, w, strided, DType::f32), Device::cpu());
      Tensor hs = ops::to(strided, Device::cpu());
      expect_all_close(
          ys, [&](int64_t i) { return reference(hx, hwt, i) + read_element(hs, i % O); }, 1e-5);
      // A bfloat16 result (NOTE [ bf16 results ] in blas.cpp), with a bias and without: the float32
      // result rounded.
      for (const Tensor &b : {bias, Tensor()}) {
        expect_rounded_within_a_step(ops::linear(x, w, b, DType::bf16), ops::linear(x, w, b, DType::f32),
                                     b.defined() ? "with a bias" : "without a bias");
      }
    }
  }
}

// Made dense, every block of a product reaches oneDNN's brgemm kernels, one cut along N too (NOTE
// [ Dense blocks for oneDNN ] in blas.cpp), as the op profile names them; a weight gradient's blocks
// (A transposed: columns of dY) are left as they lie, to the kernel oneDNN gives them undensed.
TEST(Bf16Products, DenseBlocksReachBrgemm) {
  if (!cpu::bf16::native_kernels()) GTEST_SKIP() << "skipped: oneDNN has no bf16 kernels on this CPU";
  struct DenseScope {
    explicit DenseScope(bool on) : was(cpu::blas::dense_blocks()) { cpu::blas::set_dense_blocks(on); }
    ~DenseScope() { cpu::blas::set_dense_blocks(was); }
    bool was;
  };
  // oneDNN's road: not the large products on AMX tiles (NOTE [ Large products on AMX tiles ]).
  cpu::amx::set_large_enabled(false);
  struct LargeBack {
    ~LargeBack() { cpu::amx::set_large_enabled(true); }
  } large_back;
  auto kernel_of = [](const Tensor &a, const Tensor &b, bool dense) {
    DenseScope scope(dense);
    profile::Recording recording;
    (void)ops::matmul(a, b, DType::f32);
    const profile::Report r = recording.stop();
    for (const auto &row : r.rows)
      if (row.op == "matmul") return row.detail.substr(row.detail.find(", ") + 2);
    return std::string("no matmul row");
  };
  const Tensor dy = bf16_input({1024, 384}, 1, Kind::contiguous, Device::cpu());
  const Tensor x = bf16_input({1024, 96}, 2, Kind::contiguous, Device::cpu());
  const Tensor w = bf16_input({96, 1024}, 3, Kind::contiguous, Device::cpu());
  const std::string plain = kernel_of(x, w, true);  // (1024, 1024), B (K, N)
  EXPECT_TRUE(plain.starts_with("brg:")) << plain;
  const Tensor dyt = ops::transpose(dy, 0, 1);  // dW = dY^T X
  EXPECT_EQ(kernel_of(dyt, x, true), kernel_of(dyt, x, false));
}

// A large product (A not transposed) goes to mvgpt's own AMX kernel where the CPU has the tiles, as
// the op profile names it, and to oneDNN when those are turned off: the two agree to the float32
// sums' order (NOTE [ Large products on AMX tiles ]; tests/backends/amx_large_gemm_test.cpp holds
// the kernel's own tests).
TEST(Bf16Products, LargeProductsGoToAmxTiles) {
  if (!cpu::amx::usable()) GTEST_SKIP() << "skipped: this CPU (or build) has no AMX tiles";
  auto run = [](const Tensor &a, const Tensor &b, Tensor &out) {
    profile::Recording recording;
    out = ops::matmul(a, b, DType::f32);
    const profile::Report r = recording.stop();
    for (const auto &row : r.rows)
      if (row.op == "matmul") return row.detail;
    return std::string("no matmul row");
  };
  struct OneDnnScope {  // oneDNN's road while it lives, whatever the test throws
    OneDnnScope() { cpu::amx::set_large_enabled(false); }
    ~OneDnnScope() { cpu::amx::set_large_enabled(true); }
  };
  const int64_t K = 384;
  const Tensor x = bf16_input({512, K}, 1, Kind::contiguous, Device::cpu());
  const Tensor w = bf16_input({K, 384}, 2, Kind::transposed, Device::cpu());
  const Tensor dy = bf16_input({512, K}, 3, Kind::transposed, Device::cpu());  // a weight gradient's dY^T
  for (const bool weight_gradient : {false, true}) {
    const Tensor &a = weight_gradient ? dy : x;
    Tensor tiles, onednn;
    const std::string kernel = run(a, w, tiles);
    EXPECT_NE(kernel.find("mvgpt AMX tiles"), std::string::npos) << kernel;
    std::string other;
    {
      OneDnnScope scope;
      other = run(a, w, onednn);
    }
    EXPECT_EQ(other.find("mvgpt AMX tiles"), std::string::npos) << other;
    const std::vector<float> t = tiles.to_vector<float>(), o = onednn.to_vector<float>();
    ASSERT_EQ(t.size(), o.size());
    // Two float32 sums of the same exact products in other orders: each within (4 + K / 16) ulps of
    // the sum of the products' sizes (operands in [-2, 2], so at most 4 K), as amx_large_gemm_test's
    // double loop allows.
    for (size_t i = 0; i < t.size(); ++i) ASSERT_NEAR(t[i], o[i], 2 * 2e-7f * float(4 + K / 16) * 4.0f * float(K)) << i;
  }
}

TEST(Bf16Products, RefusesOtherResultDtypes) {
  Tensor a = ops::to(make_input({2, 3}, DType::f32, 1), DType::bf16),
         b = ops::to(make_input({3, 2}, DType::f32, 2), DType::bf16);
  testing::expect_throw_with([&] { ops::matmul(a, b, DType::f64); }, "only bfloat16 operands may give float32");
  Tensor f = make_input({2, 3}, DType::f32, 1), g = make_input({3, 2}, DType::f32, 2);
  testing::expect_throw_with([&] { ops::matmul(f, g, DType::bf16); }, "only bfloat16 operands may give float32");
  testing::expect_throw_with([&] { ops::linear(f, ops::transpose(g, 0, 1), Tensor(), DType::f64); },
                             "is not supported");
}

TEST(Bf16Products, CpuSupportMatchesProcCpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  if (!in) GTEST_SKIP() << "skipped: no /proc/cpuinfo";
  std::string line, flags;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) {
      flags = " ";  // GCC 12 warns, wrongly, on " " + line.substr(...) + " "
      flags += line.substr(line.find(':') + 1);
      flags += ' ';
      break;
    }
  const bool avx512_bf16 = flags.find(" avx512_bf16 ") != std::string::npos;
  const bool amx = flags.find(" amx_bf16 ") != std::string::npos && flags.find(" amx_tile ") != std::string::npos;
  const cpu::bf16::CpuSupport &s = cpu::bf16::cpu_support();
  EXPECT_EQ(s.avx512_bf16, avx512_bf16);
  if (!amx) {
    EXPECT_FALSE(s.amx_bf16);  // with AMX, Linux may still refuse its state
  }
  const Backend::Bf16Support support = backend_for(Device::cpu()).bf16_support();
  EXPECT_EQ(support.native, s.native());
  EXPECT_NE(support.what.find("oneDNN kernel"), std::string::npos) << support.what;
  std::cout << "bf16 on this CPU: " << support.what << "\n";
}

// A row's sum is stored the same alone or among others: each row of a 19-row product against the
// same row as a product of its own, with alpha and beta, bit for bit (a kernel that grouped rows and
// stored a group's sums otherwise than a lone row's would show here).
TEST(Bf16Products, GemvRowGivesTheSameSumAloneOrAmongOthers) {
  std::mt19937 rng(12);
  std::normal_distribution<float> normal;
  for (int64_t K : {23, 64, 384}) {
    SCOPED_TRACE("K " + std::to_string(K));
    const int64_t N = 19;
    std::vector<bfloat16> x(static_cast<size_t>(K)), W(static_cast<size_t>(N * K));
    for (auto &e : x) e = bfloat16(normal(rng));
    for (auto &e : W) e = bfloat16(normal(rng));
    std::vector<float> c0(static_cast<size_t>(N));
    for (auto &c : c0) c = normal(rng);
    for (float beta : {0.0f, 0.75f}) {
      const float alpha = beta == 0.0f ? 1.0f : -1.25f;
      std::vector<float> together = c0, alone = c0;
      cpu::blas::gemm(false, true, 1, N, K, alpha, x.data(), K, W.data(), K, beta, together.data(), N, false);
      for (int64_t j = 0; j < N; ++j)
        cpu::blas::gemm(false, true, 1, 1, K, alpha, x.data(), K, W.data() + j * K, K, beta, alone.data() + j, 1, false);
      for (int64_t j = 0; j < N; ++j) ASSERT_EQ(together[size_t(j)], alone[size_t(j)]) << "row " << j << " beta " << beta;
    }
  }
}

// One store for every GEMV of ours: with sums that are exact in float32 (small integers) the orders
// of summing agree, so a row of W against x (gemv_rows: W stored (N, K)), a column of W^T
// (gemv_cols: stored (K, N)) and the float32 GEMV over the same rows must store the same bits, those
// of alpha sum + beta y with each product rounded, as fused::store_scaled promises. alpha = 0.1 makes
// alpha sum inexact, so a multiply-add fused into an FMA in one caller (and not another) shows here.
TEST(Bf16Products, EveryGemvStoresTheSameScaledSum) {
  std::mt19937 rng(29);
  std::uniform_int_distribution<int> small(-4, 4);
  std::normal_distribution<float> normal;
  for (int64_t K : {7, 64, 384, 1536}) {
    SCOPED_TRACE("K " + std::to_string(K));
    const int64_t N = 37;
    std::vector<bfloat16> x(static_cast<size_t>(K)), W(static_cast<size_t>(N * K)), Wt(W.size());
    for (auto &e : x) e = bfloat16(float(small(rng)));
    for (auto &e : W) e = bfloat16(float(small(rng)));
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) Wt[size_t(k * N + j)] = W[size_t(j * K + k)];
    std::vector<float> c0(static_cast<size_t>(N));
    for (auto &c : c0) c = normal(rng);
    for (float beta : {0.0f, 0.3f}) {
      const float alpha = 0.1f;
      std::vector<float> rows = c0, cols = c0, rows_n1 = c0, cols_n1 = c0, rows_f32 = c0;
      cpu::blas::gemm(false, true, 1, N, K, alpha, x.data(), K, W.data(), K, beta, rows.data(), N, false);
      cpu::blas::gemm(false, false, 1, N, K, alpha, x.data(), K, Wt.data(), N, beta, cols.data(), N, false);
      // The same two GEMVs as one-column products: W (N, K) x and (W^T)^T x.
      cpu::blas::gemm(false, false, N, 1, K, alpha, W.data(), K, x.data(), 1, beta, rows_n1.data(), 1, false);
      cpu::blas::gemm(true, false, N, 1, K, alpha, Wt.data(), N, x.data(), 1, beta, cols_n1.data(), 1, false);
      const std::vector<float> xf(x.begin(), x.end()), Wf(W.begin(), W.end());  // float32 GEMV over rows
      cpu::blas::gemm(false, true, 1, N, K, alpha, xf.data(), K, Wf.data(), K, beta, rows_f32.data(), N, false);
      for (int64_t j = 0; j < N; ++j) {
        int64_t exact = 0;
        for (int64_t k = 0; k < K; ++k) exact += int64_t(float(x[size_t(k)])) * int64_t(float(W[size_t(j * K + k)]));
        volatile float scaled = alpha * float(exact), kept = beta * c0[size_t(j)];  // each rounded
        const float expected = beta == 0.0f ? float(scaled) : float(scaled) + float(kept);
        ASSERT_EQ(rows[size_t(j)], expected) << "gemv_rows, row " << j << " beta " << beta;
        ASSERT_EQ(cols[size_t(j)], expected) << "gemv_cols, column " << j << " beta " << beta;
        ASSERT_EQ(rows_n1[size_t(j)], expected) << "one-column product over rows, row " << j << " beta " << beta;
        ASSERT_EQ(cols_n1[size_t(j)], expected) << "one-column product over columns, row " << j << " beta " << beta;
        ASSERT_EQ(rows_f32[size_t(j)], expected) << "float32 GEMV over rows, row " << j << " beta " << beta;
      }
    }
  }
}

}  // namespace
}  // namespace mvgpt
