#pragma once
// Helpers for the fused-kernel tests: seeded random tensors built without the ops layer, readback
// as double, and closeness checks that name the first bad element.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <mvgpt/tensor/tensor.h>

namespace mvgpt::fused_test {

inline Tensor random_tensor(const Shape& shape, DType dtype, uint32_t seed, double lo = -1, double hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) write_element(t, i, dist(gen));
  return t;
}

template <typename T>
Tensor tensor_of(const std::vector<T>& values, const Shape& shape) {
  return Tensor::from_vector(values, shape);
}

inline Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype()); }
inline Tensor empty_of(const Shape& s, DType d) { return Tensor::empty(s, d); }

// A fused unit's CPU kernels, made once: cpu_kernels<fused::norms_cpu_kernels>().
template <auto make>
const auto& cpu_kernels() {
  static const auto kernels = make();
  return kernels;
}

inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// |a - b| <= atol + rtol |b| everywhere; reports the first offender.
inline ::testing::AssertionResult all_close(const std::vector<double>& a, const std::vector<double>& b, double atol,
                                            double rtol = 0) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes differ: " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(a[i] - b[i]);
    if (!(d <= atol + rtol * std::abs(b[i])) && !(std::isinf(a[i]) && a[i] == b[i]))
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs expected " << b[i]
                                           << " (diff " << d << ")";
  }
  return ::testing::AssertionSuccess();
}
inline ::testing::AssertionResult all_close(const Tensor& a, const std::vector<double>& b, double atol, double rtol = 0) {
  return all_close(values(a), b, atol, rtol);
}
inline ::testing::AssertionResult all_close(const Tensor& a, const Tensor& b, double atol, double rtol = 0) {
  return all_close(values(a), values(b), atol, rtol);
}

template <typename F>
inline void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning \"" << needle << "\"";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

// What f throws (std::invalid_argument), or "(no exception)".
inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no exception)";
}

// A packed copy of any view, made element by element (independent of the ops under test).
inline Tensor packed(const Tensor& t, DType dt) {
  Tensor c = Tensor::empty(t.shape(), dt);
  for (int64_t i = 0; i < t.numel(); ++i) write_element(c, i, read_element(t, i));
  return c;
}

}  // namespace mvgpt::fused_test
