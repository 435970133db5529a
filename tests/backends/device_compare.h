#pragma once
// Comparing a device's results with the CPU's (the CPU-vs-device cases of tests/backends and
// tests/fused): element-wise closeness, copies to the host, bit-identity between runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <mvgpt/backends/ops.h>

namespace mvgpt::testing {

// Compares element by element, |got - want| <= tol (1 + |want|) with the tolerance of want's dtype;
// integer and bool results must match exactly.
inline void expect_matches(const Tensor& got, const Tensor& want, double tol_f32, double tol_f64, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(to_string(got.shape()), to_string(want.shape()));
  ASSERT_EQ(got.dtype(), want.dtype());
  const double tol = want.dtype() == DType::f64 ? tol_f64
                     : want.dtype() == DType::bf16 ? 1e-2
                     : is_floating(want.dtype())   ? tol_f32
                                                   : 0.0;
  int failures = 0;
  for (int64_t i = 0; i < want.numel() && failures < 5; ++i) {
    const double g = read_element(got, i), w = read_element(want, i);
    const bool ok = (std::isnan(g) && std::isnan(w)) || g == w || std::abs(g - w) <= tol * (1 + std::abs(w));
    if (!ok) {
      ++failures;
      ADD_FAILURE() << "element " << i << ": got " << g << ", expected " << w;
    }
  }
}

inline std::vector<Tensor> on_host(const std::vector<Tensor>& ts) {
  std::vector<Tensor> r;
  for (const Tensor& t : ts) r.push_back(ops::to(t, Device::cpu()));
  return r;
}

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  Tensor ca = ops::contiguous(a), cb = ops::contiguous(b);
  // Empty tensors may have no storage: memcmp on a null pointer is undefined even for 0 bytes.
  return ca.nbytes() == cb.nbytes() && (ca.nbytes() == 0 || std::memcmp(ca.raw_data(), cb.raw_data(), ca.nbytes()) == 0);
}

}  // namespace mvgpt::testing
