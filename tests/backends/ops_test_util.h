#pragma once
// Helpers for the raw-op tests: inputs in several layouts, and comparison against naive double loops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <mvgpt/backends/ops.h>

namespace mvgpt::testing {

// How a test input is laid out in memory; the values seen through the view are the same for each.
enum class Kind { contiguous, transposed, sliced, expanded };
inline const char* kind_name(Kind k) {
  switch (k) {
    case Kind::contiguous: return "contiguous";
    case Kind::transposed: return "transposed";
    case Kind::sliced: return "sliced";
    case Kind::expanded: return "expanded";
  }
  return "?";
}
inline constexpr Kind kAllKinds[] = {Kind::contiguous, Kind::transposed, Kind::sliced, Kind::expanded};

// A fixed pseudo-random value in [lo, hi) for (seed, i): tests need no RNG state.
inline double value_at(uint64_t seed, int64_t i, double lo = -2, double hi = 2) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + uint64_t(i) * 0xBF58476D1CE4E5B9ull + 0x94D049BB133111EBull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return lo + (hi - lo) * double(z >> 11) * (1.0 / 9007199254740992.0);
}

// A tensor of `shape` whose row-major element i is value_at(seed, i) (rounded for integer dtypes),
// stored contiguously, as a transpose of the last two axes, as a slice of a wider tensor, or (for
// `expanded`) with its first axis broadcast from size 1 (so all rows are equal).
inline Tensor make_input(const Shape& shape, DType dt, uint64_t seed, Kind kind = Kind::contiguous, double lo = -2,
                         double hi = 2) {
  Tensor t;
  const int n = shape.size();
  if (kind == Kind::transposed && n >= 2) {
    Shape s = shape;
    std::swap(s[n - 1], s[n - 2]);
    t = ops::transpose(Tensor::empty(s, dt), -1, -2);
  } else if (kind == Kind::sliced && n >= 1) {
    Shape s = shape;
    s[n - 1] += 3;
    t = ops::narrow(Tensor::empty(s, dt), -1, 1, shape[n - 1]);
  } else if (kind == Kind::expanded && n >= 1) {
    Shape s = shape;
    s[0] = 1;
    Tensor base = make_input(s, dt, seed, Kind::contiguous, lo, hi);
    return ops::expand(base, shape);
  } else {
    t = Tensor::empty(shape, dt);
  }
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = value_at(seed, i, lo, hi);
    if (is_integral(dt)) v = std::floor(v);
    if (dt == DType::boolean) v = v > (lo + hi) / 2;
    write_element(t, i, v);
  }
  return t;
}

// Row-major index into `in` (broadcast to `out`) of row-major element i of `out`.
inline int64_t broadcast_index(const Shape& out, const Shape& in, int64_t i) {
  int64_t idx = 0, mul = 1;
  for (int d = out.size() - 1; d >= 0; --d) {
    int64_t c = i % out[d];
    i /= out[d];
    int di = d - (out.size() - in.size());
    if (di < 0) continue;
    if (in[di] != 1) idx += c * mul;
    mul *= in[di];
  }
  return idx;
}

// Tolerance by dtype: float32 results are compared against double references.
inline double tol_for(DType dt) {
  switch (dt) {
    case DType::f64: return 1e-12;
    case DType::f32: return 2e-6;
    case DType::bf16: return 1e-2;
    default: return 0;
  }
}

// Checks every element of `got` against ref(i) with |got - ref| <= tol * (1 + |ref|); NaN matches NaN.
inline void expect_all_close(const Tensor& got, const std::function<double(int64_t)>& ref, double tol,
                             const std::string& what = "") {
  int failures = 0;
  for (int64_t i = 0; i < got.numel() && failures < 5; ++i) {
    double g = read_element(got, i), r = ref(i);
    bool ok = (std::isnan(r) && std::isnan(g)) || (std::isinf(r) && g == r) || std::abs(g - r) <= tol * (1 + std::abs(r));
    if (!ok) {
      ++failures;
      ADD_FAILURE() << what << " element " << i << ": got " << g << ", expected " << r;
    }
  }
}

// Expects `f` to throw E with `needle` in its message.
template <typename E = std::invalid_argument, typename F>
void expect_throw_with(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an exception mentioning '" << needle << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

// A row-major product's C (M rows of ldc floats, the first N of each its result) left the padding
// past column N as it was: C0's values in `serial`, and in `parallel` C0's or, where the product
// was called with beta = 0 on a C filled with NaN (nan_filled), NaN. Stops at the first mismatch.
inline void expect_padding_untouched(const std::vector<float>& parallel, const std::vector<float>& serial,
                                     const std::vector<float>& C0, int64_t M, int64_t N, int64_t ldc, bool nan_filled) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = N; j < ldc; ++j) {
      const size_t at = size_t(i * ldc + j);
      const bool kept = serial[at] == C0[at] && (nan_filled ? std::isnan(parallel[at]) : parallel[at] == C0[at]);
      if (!kept) {
        ADD_FAILURE() << "the padding of C changed at [" << i << ", " << j << "]";
        return;
      }
    }
}

}  // namespace mvgpt::testing
