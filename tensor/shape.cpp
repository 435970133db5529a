#include <mvgpt/tensor/shape.h>

#include <stdexcept>

namespace mvgpt {

void Dims::throw_too_many_dims(size_t n) {
  throw std::invalid_argument("shape: " + std::to_string(n) + " dimensions, at most " + std::to_string(kMaxDims) +
                              " are supported");
}

Dims::Dims(std::initializer_list<int64_t> v) : Dims(std::span<const int64_t>(v.begin(), v.size())) {}

int64_t Dims::at(int i) const {
  if (i < 0) i += n_;
  if (i < 0 || i >= n_) throw std::out_of_range("Dims::at: index " + std::to_string(i) + " out of " + to_string(*this));
  return d_[i];
}

void Dims::insert(int pos, int64_t v) {
  check_rank(size_t(n_) + 1);
  for (int i = n_; i > pos; --i) d_[i] = d_[i - 1];
  d_[pos] = v;
  ++n_;
}

void Dims::erase(int pos) {
  for (int i = pos; i + 1 < n_; ++i) d_[i] = d_[i + 1];
  --n_;
}

std::string to_string(const Dims& d) {
  std::string s = "[";
  for (int i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

void throw_axis_out_of_range(int axis, int ndim, const char* op) {
  throw std::invalid_argument(std::string(op) + ": axis " + std::to_string(axis) + " is out of range for a tensor of " +
                              std::to_string(ndim) + " dimensions");
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  if (a == b) return a;  // most elementwise ops
  int n = std::max(a.size(), b.size());
  Shape out;
  out.resize(n);
  for (int i = 0; i < n; ++i) {
    int ia = a.size() - n + i, ib = b.size() - n + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1)
      throw std::invalid_argument(std::string(op) + ": shapes " + to_string(a) + " and " + to_string(b) +
                                  " do not broadcast (dimension " + std::to_string(i) + ": " + std::to_string(da) +
                                  " vs " + std::to_string(db) + ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace mvgpt
