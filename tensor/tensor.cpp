#include <mvgpt/tensor/tensor.h>

#include <cmath>
#include <sstream>

namespace mvgpt {

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape)
    if (d < 0) throw std::invalid_argument("Tensor::empty: negative dimension in shape " + mvgpt::to_string(shape));
  auto storage = std::make_shared<Storage>(size_t(mvgpt::numel(shape)) * dtype_size(dtype), device);
  return from_storage(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, const Shape& shape, const Strides& strides,
                            int64_t offset, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

void Tensor::throw_undefined(const char* what) {
  throw std::logic_error(std::string(what) + ": the tensor is undefined");
}

bool Tensor::is_contiguous() const {
  const Shape& s = shape();
  int64_t expected = 1;
  for (int i = s.size() - 1; i >= 0; --i) {
    if (s[i] == 1) continue;
    if (impl_->strides[i] != expected) return numel() == 0;
    expected *= s[i];
  }
  return true;
}

Tensor Tensor::as_strided(const Shape& shape, const Strides& strides, int64_t offset) const {
  check_defined("Tensor::as_strided");
  return from_storage(impl_->storage, shape, strides, offset, impl_->dtype);
}

Tensor Tensor::detach() const {
  check_defined("Tensor::detach");
  Tensor t = as_strided(impl_->shape, impl_->strides, impl_->offset);
  t.impl_->name = impl_->name;
  return t;
}

uint64_t Tensor::version() const { return storage()->version(); }
void Tensor::bump_version() const { storage()->bump_version(); }

bool Tensor::requires_grad() const { return impl_ && impl_->requires_grad; }

Tensor& Tensor::requires_grad_(bool value) {
  check_defined("Tensor::requires_grad_");
  if (value && !is_floating(dtype()))
    throw std::invalid_argument("Tensor::requires_grad_: only floating-point tensors can require gradients, this one is " +
                                std::string(dtype_name(dtype())));
  if (!value && impl_->grad_fn)
    throw std::invalid_argument("Tensor::requires_grad_: the tensor is the result of a recorded op; use detach()");
  impl_->requires_grad = value;
  return *this;
}

const Tensor& Tensor::grad() const {
  check_defined("Tensor::grad");
  return impl_->grad;
}
void Tensor::set_grad(const Tensor& g) const {
  check_defined("Tensor::set_grad");
  if (g.defined() && !(g.shape() == shape()))
    throw std::invalid_argument("Tensor::set_grad: gradient of shape " + mvgpt::to_string(g.shape()) +
                                " for a tensor of shape " + mvgpt::to_string(shape()));
  impl_->grad = g;
}
const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  check_defined("Tensor::grad_fn");
  return impl_->grad_fn;
}
const std::string& Tensor::name() const {
  check_defined("Tensor::name");
  return impl_->name;
}
void Tensor::set_name(std::string name) const {
  check_defined("Tensor::set_name");
  impl_->name = std::move(name);
}

void Tensor::check_dtype(DType expected, const char* op) const {
  if (dtype() != expected)
    throw std::invalid_argument(std::string(op) + ": expected dtype " + std::string(dtype_name(expected)) + ", found " +
                                std::string(dtype_name(dtype())));
}

std::string Tensor::describe() const {
  if (!impl_) return "undefined";
  return std::string(dtype_name(dtype())) + mvgpt::to_string(shape()) + " " + device().str();
}

int64_t element_offset(const Shape& shape, const Strides& strides, int64_t offset, int64_t i) {
  int64_t off = offset;
  for (int d = shape.size() - 1; d >= 0; --d) {
    int64_t n = shape[d];
    off += (i % n) * strides[d];
    i /= n;
  }
  return off;
}

static void check_cpu(const Tensor& t, const char* op) {
  if (!t.device().is_cpu())
    throw std::invalid_argument(std::string(op) + ": needs a CPU tensor, found one on " + t.device().str());
}

double read_element(const Tensor& t, int64_t i) {
  check_cpu(t, "read_element");
  int64_t off = element_offset(t.shape(), t.strides(), t.offset(), i);
  const char* base = static_cast<const char*>(t.storage()->data());
  return dispatch_dtype(t.dtype(), [&](auto tag) -> double {
    using T = decltype(tag);
    const T v = reinterpret_cast<const T*>(base)[off];
    if constexpr (std::is_same_v<T, bfloat16>) return double(float(v));
    else return double(v);
  });
}

void write_element(const Tensor& t, int64_t i, double value) {
  check_cpu(t, "write_element");
  int64_t off = element_offset(t.shape(), t.strides(), t.offset(), i);
  char* base = static_cast<char*>(t.storage()->data());
  dispatch_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bfloat16>) reinterpret_cast<T*>(base)[off] = bfloat16(float(value));
    else reinterpret_cast<T*>(base)[off] = static_cast<T>(value);
  });
}

std::string Tensor::to_string(int max_per_dim) const {
  std::ostringstream os;
  os << describe() << "\n";
  if (!impl_ || !device().is_cpu()) return os.str();
  const Shape& s = shape();
  if (s.empty()) {
    os << read_element(*this, 0);
    return os.str();
  }
  // Recursive print with elision of the middle of long dimensions.
  std::vector<int64_t> idx(size_t(s.size()), 0);
  auto rec = [&](auto&& self, int d, int64_t flat) -> void {
    os << "[";
    int64_t n = s[d];
    for (int64_t i = 0; i < n; ++i) {
      if (n > 2 * max_per_dim && i == max_per_dim) {
        os << "..., ";
        i = n - max_per_dim;
      }
      int64_t f = flat * n + i;
      if (d + 1 == s.size()) os << read_element(*this, f);
      else self(self, d + 1, f);
      if (i + 1 < n) os << ", ";
    }
    os << "]";
  };
  rec(rec, 0, 0);
  return os.str();
}

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    try {
      size_t used = 0;
      int i = std::stoi(text.substr(5), &used);
      if (used == text.size() - 5 && i >= 0) return cuda(i);
    } catch (const std::exception&) {
    }
  }
  throw std::invalid_argument("Device::parse: unknown device '" + text + "' (expected cpu, cuda or cuda:N)");
}

}  // namespace mvgpt
