#pragma once
// Host-side helpers of the fused kernels' .cu files (the backend's and autograd/fused/'s): launch
// sizes, dtype dispatch and typed pointers of possibly undefined tensors.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include <mvgpt/tensor/tensor.h>

namespace mvgpt::cuda {

// Blocks for one block per row (grid-stride beyond the limit).
inline unsigned grid_rows(int64_t rows) { return unsigned(std::min<int64_t>(std::max<int64_t>(rows, 1), 65535 * 4)); }

inline void check_float(const Tensor& x, const char* op) {
  if (x.dtype() != DType::f32 && x.dtype() != DType::f64)
    throw std::logic_error(std::string(op) + ": expects float32 or float64 (the ops layer widens), found " +
                           std::string(dtype_name(x.dtype())));
}

// Every defined tensor of ts is contiguous.
inline void require_contiguous(std::initializer_list<const Tensor*> ts, const char* op) {
  for (const Tensor* t : ts)
    if (t->defined() && !t->is_contiguous())
      throw std::logic_error(std::string(op) + ": every tensor must be contiguous, found strides " +
                             to_string(t->strides()) + " for shape " + to_string(t->shape()));
}

template <typename T>
inline const T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.raw_data()) : nullptr;
}
template <typename T>
inline T* mut(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.raw_data()) : nullptr;
}

// Calls f(T{}) for float or double x.
template <typename F>
inline void dispatch_float(const Tensor& x, F&& f) {
  if (x.dtype() == DType::f64) f(double{});
  else f(float{});
}

}  // namespace mvgpt::cuda
