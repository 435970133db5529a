// The host/device code the CUDA kernels run, checked on the host (no GPU needed): the elementwise
// functors of backends/elementwise_math.h against the CPU backend, the bfloat16
// bit conversions against mvgpt::bfloat16, and the strided indexer against element_offset.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <mvgpt/backends/cuda/strided_indexer.h>
#include <mvgpt/backends/elementwise_math.h>
#include <mvgpt/backends/ops.h>
#include "backends/ops_test_util.h"

namespace mvgpt {
namespace {

template <typename T>
void check_unary_against_cpu(DType dt, double tol) {
  // Positive inputs for the ops that need them, signed ones (with 0, -0, inf and NaN) for the rest.
  std::vector<double> signed_values{0.0, -0.0, 1.0, -1.0, 0.3, -2.5, 7.0, -30.0, 50.0, INFINITY, -INFINITY, NAN};
  for (int i = 0; i < 50; ++i) signed_values.push_back(testing::value_at(1, i, -6, 6));
  for (const UnaryOpInfo& info : kUnaryOps) {
    const UnaryOp op = info.op;
    for (double scalar : {0.0, 2.0, 3.0, 0.5, -1.0, 1.7}) {
      if (op != UnaryOp::pow_scalar && scalar != 1.7) continue;
      const bool positive = info.domain == UnaryDomain::positive;
      std::vector<T> xs;
      for (double v : signed_values) xs.push_back(T(positive ? std::abs(v) + 0.01 : v));
      Tensor x = Tensor::from_vector(xs);
      Tensor want = ops::unary(op, x, scalar);
      // The fused backward with a gradient of ones: f'(x) itself.
      Tensor want_grad = ops::unary_backward(op, x, ops::ones_like(x), scalar);
      for (size_t i = 0; i < xs.size(); ++i) {
        const double got = math::unary_float<T>(op, xs[i], T(scalar));
        const double w = read_element(want, int64_t(i));
        const bool ok = (std::isnan(got) && std::isnan(w)) || got == w || std::abs(got - w) <= tol * (1 + std::abs(w));
        EXPECT_TRUE(ok) << unary_op_name(op) << "(" << xs[i] << ") scalar " << scalar << " " << dtype_name(dt)
                        << ": shared " << got << ", cpu " << w;
        // Off the infinities, where the CPU's 8-wide GELU and SiLU derivatives take limits the formula does not.
        if (!std::isfinite(double(xs[i]))) continue;
        const double got_d = math::unary_derivative<T>(op, xs[i], T(scalar));
        const double w_d = read_element(want_grad, int64_t(i));
        const bool ok_d =
            (std::isnan(got_d) && std::isnan(w_d)) || got_d == w_d || std::abs(got_d - w_d) <= tol * (1 + std::abs(w_d));
        EXPECT_TRUE(ok_d) << unary_op_name(op) << "'(" << xs[i] << ") scalar " << scalar << " " << dtype_name(dt)
                          << ": shared " << got_d << ", cpu " << w_d;
      }
    }
  }
}

TEST(CudaSharedMath, UnaryFloatMatchesCpu) {
  check_unary_against_cpu<float>(DType::f32, 2e-6);
  check_unary_against_cpu<double>(DType::f64, 1e-14);
}

TEST(CudaSharedMath, UnaryIntMatchesCpu) {
  std::vector<int64_t> xs{0, 1, -1, 7, -13, 1000};
  Tensor x = Tensor::from_vector(xs);
  for (const UnaryOpInfo& info : kUnaryOps) {
    const UnaryOp op = info.op;
    ASSERT_EQ(math::unary_int_supported(op), info.ints) << info.name;
    if (!info.ints) continue;
    Tensor want = ops::unary(op, x, 3);
    for (size_t i = 0; i < xs.size(); ++i)
      EXPECT_EQ(math::unary_int<int64_t>(op, xs[i], 3), read_element(want, int64_t(i))) << unary_op_name(op);
  }
  EXPECT_FALSE(math::unary_int_supported(UnaryOp::exp));
}

TEST(CudaSharedMath, BinaryMatchesCpu) {
  std::vector<double> as{1.5, -2.0, 0.0, NAN, 3.0, INFINITY, -0.0};
  std::vector<double> bs{0.5, -2.0, NAN, 1.0, 4.0, 2.0, 0.0};
  Tensor a = Tensor::from_vector(as), b = Tensor::from_vector(bs);
  for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div, BinaryOp::maximum,
                      BinaryOp::minimum, BinaryOp::eq, BinaryOp::ne, BinaryOp::lt, BinaryOp::le, BinaryOp::gt,
                      BinaryOp::ge}) {
    Tensor want = ops::binary(op, a, b);
    for (size_t i = 0; i < as.size(); ++i) {
      const double got = is_comparison(op) ? double(math::binary_compare(op, as[i], bs[i]))
                                           : math::binary_arith(op, as[i], bs[i]);
      const double w = read_element(want, int64_t(i));
      EXPECT_TRUE((std::isnan(got) && std::isnan(w)) || got == w)
          << binary_op_name(op) << "(" << as[i] << ", " << bs[i] << "): shared " << got << ", cpu " << w;
    }
  }
}

TEST(CudaSharedMath, Bfloat16BitsMatchTheTensorType) {
  for (float f : {0.0f, -0.0f, 1.0f, 1.00390625f, 1.01171875f, -3.14159f, 1e30f, -1e-30f, INFINITY, NAN, 65504.0f}) {
    EXPECT_EQ(math::float_to_bf16_bits(f), bfloat16::from_float(f)) << f;
    const uint16_t b = bfloat16::from_float(f);
    const float back = math::bf16_bits_to_float(b);
    EXPECT_TRUE((std::isnan(back) && std::isnan(f)) || back == bfloat16::to_float(b)) << f;
  }
}

// The indexer visits every element of a view at element_offset's position, whatever the layout.
TEST(CudaSharedMath, StridedIndexerMatchesElementOffsets) {
  using testing::Kind;
  for (Kind k : testing::kAllKinds) {
    Tensor a = testing::make_input({3, 4, 5}, DType::f32, 1, k);
    Tensor b = ops::permute(testing::make_input({5, 3, 4}, DType::f32, 2), {1, 2, 0});
    Tensor c = ops::transpose(ops::narrow(testing::make_input({3, 9, 4}, DType::f32, 3), 1, 2, 5), 1, 2);
    const auto ix = cuda::make_indexer<3>(a.shape(), {&a.strides(), &b.strides(), &c.strides()});
    EXPECT_LE(ix.ndim, 3);
    for (int64_t i = 0; i < a.numel(); ++i) {
      int64_t off[3];
      ix.offsets(i, off);
      EXPECT_EQ(off[0], element_offset(a.shape(), a.strides(), 0, i)) << testing::kind_name(k) << " " << i;
      EXPECT_EQ(off[1], element_offset(b.shape(), b.strides(), 0, i)) << i;
      EXPECT_EQ(off[2], element_offset(c.shape(), c.strides(), 0, i)) << i;
    }
  }
  // Contiguous operands collapse to one dimension and take the flat path.
  Tensor x = Tensor::empty({2, 3, 4}, DType::f32);
  const auto flat = cuda::make_indexer<2>(x.shape(), {&x.strides(), &x.strides()});
  EXPECT_TRUE(flat.contiguous);
  int64_t off[2];
  flat.offsets(17, off);
  EXPECT_EQ(off[0], 17);
  EXPECT_EQ(off[1], 17);
  // A scalar and a zero-size shape.
  const auto scalar = cuda::make_indexer<1>(Shape{}, {&x.strides()});
  EXPECT_EQ(scalar.ndim, 0);
}

}  // namespace
}  // namespace mvgpt
