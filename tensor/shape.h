#pragma once
// Shapes and strides: small fixed-capacity vectors of int64, so a tensor's layout never touches the heap.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace mvgpt {

inline constexpr int kMaxDims = 8;

class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<int64_t> v);
  explicit Dims(std::span<const int64_t> v) {
    check_rank(v.size());
    n_ = int(v.size());
    std::copy(v.begin(), v.end(), d_);
  }
  Dims(const std::vector<int64_t>& v) : Dims(std::span<const int64_t>(v)) {}

  int size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t& operator[](int i) { return d_[i]; }
  // Negative i counts from the back, as in Python.
  int64_t at(int i) const;
  int64_t back() const { return d_[n_ - 1]; }
  void push_back(int64_t v) {
    check_rank(size_t(n_) + 1);
    d_[n_++] = v;
  }
  void insert(int pos, int64_t v);
  void erase(int pos);
  void resize(int n, int64_t fill = 0) {
    check_rank(size_t(n));
    for (int i = n_; i < n; ++i) d_[i] = fill;
    n_ = n;
  }
  const int64_t* begin() const { return d_; }
  const int64_t* end() const { return d_ + n_; }
  int64_t* begin() { return d_; }
  int64_t* end() { return d_ + n_; }
  const int64_t* data() const { return d_; }
  std::vector<int64_t> vec() const { return {begin(), end()}; }
  friend bool operator==(const Dims& a, const Dims& b) {
    if (a.n_ != b.n_) return false;
    for (int i = 0; i < a.n_; ++i)  // a loop: std::equal calls memcmp for at most 64 bytes
      if (a.d_[i] != b.d_[i]) return false;
    return true;
  }

 private:
  static void check_rank(size_t n) {
    if (n > size_t(kMaxDims)) [[unlikely]]
      throw_too_many_dims(n);
  }
  [[noreturn]] static void throw_too_many_dims(size_t n);
  int64_t d_[kMaxDims] = {};
  int n_ = 0;
};

using Shape = Dims;
using Strides = Dims;

inline int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}
inline Strides contiguous_strides(const Shape& s) {
  Strides st;
  st.resize(s.size());
  int64_t acc = 1;
  for (int i = s.size() - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}
// "[2, 3, 4]"
std::string to_string(const Dims& d);
[[noreturn]] void throw_axis_out_of_range(int axis, int ndim, const char* op);
// Wraps a possibly negative axis into [0, ndim); throws naming `op` when out of range.
inline int normalize_axis(int axis, int ndim, const char* op) {
  const int a = axis < 0 ? axis + ndim : axis;
  if (a < 0 || a >= ndim) [[unlikely]]
    throw_axis_out_of_range(axis, ndim, op);
  return a;
}
// NumPy broadcasting of two shapes; throws naming `op` and both shapes when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace mvgpt
