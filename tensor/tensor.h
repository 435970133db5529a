#pragma once
// A Tensor is a cheap handle: shared storage + layout (shape, strides in elements, offset) + dtype.
// Copying a Tensor copies the handle, not the data. Compute lives above this layer: the ops in
// autograd/ops.h and the fused ones in autograd/fused/ (built on the internal raw ops of backends/ops.h).
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <mvgpt/tensor/device.h>
#include <mvgpt/tensor/dtype.h>
#include <mvgpt/tensor/shape.h>
#include <mvgpt/tensor/storage.h>

namespace mvgpt {

namespace autograd {
class Node;
}

struct TensorImpl;

class Tensor {
 public:
  Tensor() = default;  // undefined: holds nothing
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Uninitialised memory from the device's allocator, contiguous.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  // A view of `storage` with the given layout.
  static Tensor from_storage(std::shared_ptr<Storage> storage, const Shape& shape, const Strides& strides,
                             int64_t offset, DType dtype);
  // A CPU tensor holding a copy of `values`, shaped `shape` (default: 1-d).
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, Shape shape = {});
  template <typename T>
  static Tensor scalar(T value) {
    return from_vector(std::vector<T>{value}, Shape{});
  }

  bool defined() const { return impl_ != nullptr; }
  explicit operator bool() const { return defined(); }

  const Shape& shape() const;
  const Strides& strides() const;
  int64_t offset() const;
  DType dtype() const;
  Device device() const;
  int dim() const { return shape().size(); }
  // Size of an axis; negative counts from the back.
  int64_t size(int axis) const;
  int64_t numel() const;
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype()); }
  bool is_contiguous() const;

  const std::shared_ptr<Storage>& storage() const;
  // Address of the first element (storage data + offset).
  void* raw_data() const;
  // Typed address of the first element; throws if T is not the tensor's dtype.
  template <typename T>
  T* data() const {
    check_dtype(dtype_v<T>, "Tensor::data");
    return static_cast<T*>(raw_data());
  }
  // The value of a one-element CPU tensor, converted to T.
  template <typename T>
  T item() const;
  // All elements of a CPU tensor in row-major order, converted to T (for tests and printing).
  template <typename T>
  std::vector<T> to_vector() const;

  // A new handle on the same storage with another layout; records no gradient.
  Tensor as_strided(const Shape& shape, const Strides& strides, int64_t offset) const;
  // The same data as a new leaf: shares storage, no gradient history.
  Tensor detach() const;

  // In-place writes bump the storage's version, which saved tensors compare against.
  uint64_t version() const;
  void bump_version() const;

  // Autograd state (the engine and ops live in autograd/).
  bool requires_grad() const;
  // Makes a floating-point leaf record gradients (or stop); throws on integer tensors and non-leaves.
  Tensor& requires_grad_(bool value = true);
  // The gradient accumulated into a leaf by backward(); undefined before.
  const Tensor& grad() const;
  void set_grad(const Tensor& g) const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  bool is_leaf() const { return grad_fn() == nullptr; }
  // A name for messages (parameters carry their dotted name).
  const std::string& name() const;
  void set_name(std::string name) const;

  TensorImpl* impl() const { return impl_.get(); }
  // The owning handle: autograd keeps weak references to leaves through it.
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }
  // Short description: "float32[2, 3] cpu".
  std::string describe() const;
  // Values, for printing (CPU tensors only; large tensors are elided).
  std::string to_string(int max_per_dim = 6) const;

  void check_dtype(DType expected, const char* op) const;

 private:
  void check_defined(const char* what) const;
  [[noreturn]] static void throw_undefined(const char* what);
  std::shared_ptr<TensorImpl> impl_;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;
  int64_t offset = 0;
  DType dtype = DType::f32;
  bool requires_grad = false;
  Tensor grad;                              // leaves: the accumulated gradient
  std::shared_ptr<autograd::Node> grad_fn;  // results of recorded ops: the node that made them
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves: their one AccumulateGrad node, while a graph uses it
  std::string name;
};

// The accessors every op calls several times, inline (out of line they were a few percent of a
// decoded token's time: a call and a check each).
inline void Tensor::check_defined(const char* what) const {
  if (!impl_) [[unlikely]]
    throw_undefined(what);
}
inline const Shape& Tensor::shape() const {
  check_defined("Tensor::shape");
  return impl_->shape;
}
inline const Strides& Tensor::strides() const {
  check_defined("Tensor::strides");
  return impl_->strides;
}
inline int64_t Tensor::offset() const {
  check_defined("Tensor::offset");
  return impl_->offset;
}
inline DType Tensor::dtype() const {
  check_defined("Tensor::dtype");
  return impl_->dtype;
}
inline Device Tensor::device() const {
  check_defined("Tensor::device");
  return impl_->storage->device();
}
inline int64_t Tensor::size(int axis) const { return shape()[normalize_axis(axis, dim(), "Tensor::size")]; }
inline int64_t Tensor::numel() const { return mvgpt::numel(shape()); }
inline const std::shared_ptr<Storage>& Tensor::storage() const {
  check_defined("Tensor::storage");
  return impl_->storage;
}
inline void* Tensor::raw_data() const {
  check_defined("Tensor::raw_data");
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * int64_t(dtype_size(impl_->dtype));
}

// Reads element `i` (row-major) of a CPU tensor as double; writes likewise. For tests and slow paths.
double read_element(const Tensor& t, int64_t i);
void write_element(const Tensor& t, int64_t i, double value);
// The storage offset (in elements) of the row-major element i.
int64_t element_offset(const Shape& shape, const Strides& strides, int64_t offset, int64_t i);

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, Shape shape) {
  if (shape.empty() && values.size() != 1) shape = Shape{int64_t(values.size())};
  if (mvgpt::numel(shape) != int64_t(values.size()))
    throw std::invalid_argument("Tensor::from_vector: " + std::to_string(values.size()) +
                                " values do not fill shape " + mvgpt::to_string(shape));
  Tensor t = empty(shape, dtype_v<T>);
  T* p = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}

template <typename T>
T Tensor::item() const {
  if (numel() != 1)
    throw std::invalid_argument("Tensor::item: expected one element, found shape " + mvgpt::to_string(shape()));
  double v = read_element(*this, 0);
  if constexpr (std::is_same_v<T, bfloat16>) return bfloat16(float(v));
  else return static_cast<T>(v);
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  std::vector<T> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) {
    double v = read_element(*this, i);
    if constexpr (std::is_same_v<T, bfloat16>) out[size_t(i)] = bfloat16(float(v));
    else out[size_t(i)] = static_cast<T>(v);
  }
  return out;
}

}  // namespace mvgpt
