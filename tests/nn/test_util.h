#pragma once
// Helpers shared by the nn tests: values as doubles, closeness checks, seeded random tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <mvgpt/backends/ops.h>
#include <mvgpt/tensor/tensor.h>

namespace mvgpt::testing {

inline std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

// |got - want| <= tol * max(1, |want|) element by element; reports the first few mismatches.
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                         const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double scale = std::max(1.0, std::abs(want[i]));
    if (!(std::abs(got[i] - want[i]) <= tol * scale) && reported++ < 5)
      ADD_FAILURE() << what << " element " << i << ": got " << got[i] << ", want " << want[i];
  }
}
inline void expect_close(const Tensor& got, const std::vector<double>& want, double tol, const std::string& what = "") {
  expect_close(vals(got), want, tol, what);
}
inline void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what = "") {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  expect_close(vals(got), vals(want), tol, what);
}

inline Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::f32) {
  Generator gen(seed);
  return ops::randn(shape, dtype, Device::cpu(), &gen);
}

}  // namespace mvgpt::testing
