#include <mvgpt/backends/backend.h>

#include <array>
#include <stdexcept>
#include <string>

#include <mvgpt/backends/cpu/cpu_backend.h>
#include <mvgpt/backends/cuda/cuda_backend.h>
#include <mvgpt/backends/ops.h>  // contiguous
#include <mvgpt/tensor/views.h>

namespace mvgpt {

Backend& backend_for(Device device) {
  if (device.is_cpu()) {
    static cpu::CpuBackend cpu_backend;
    return cpu_backend;
  }
  if (!cuda::built_with_cuda()) return cuda::backend(device.index);  // throws "built without CUDA"
  int n = cuda::device_count();
  if (device.index < 0 || device.index >= n)
    throw std::runtime_error(device.str() + " requested, but " + std::to_string(n) +
                             " CUDA device(s) are visible; use --device cpu or another index");
  return cuda::backend(device.index);
}

Backend::PendingUpload Backend::upload_async(const std::vector<Tensor>& host) {
  PendingUpload u;
  for (const Tensor& t : host) {
    if (!t.device().is_cpu())
      throw std::logic_error("Backend::upload_async: expects host tensors, found one on " + t.device().str());
    if (device().is_cpu()) {
      u.tensors.push_back(t);
      continue;
    }
    Tensor d = Tensor::empty(t.shape(), t.dtype(), device());
    copy_between_devices(ops::contiguous(t), d);
    u.tensors.push_back(d);
  }
  return u;
}

void Backend::wait_upload(const PendingUpload&) {}

void Backend::linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out) {
  matmul(x, views::transpose(weight, 0, 1), out);
  if (bias.defined()) binary(BinaryOp::add, out, views::expand(bias, out.shape()), out);  // same element in and out
}

void Backend::convert_with_column_sums(const Tensor& x, const Tensor& out, const Tensor& sums) {
  copy(x, out);
  reduce(ReduceOp::sum, views::transpose(x, 0, 1), sums);
}

bool cuda_available() { return cuda::built_with_cuda() && cuda::device_count() > 0; }
int cuda_device_count() { return cuda::built_with_cuda() ? cuda::device_count() : 0; }
CudaStatus cuda_status() {
  if (cuda_available()) return {true, false, ""};
  return {false, cuda::device_count_failed(), cuda::device_count_error()};
}

const char* unary_op_name(UnaryOp op) {
  // The scalar ops are named as their public functions: pow_scalar is "pow", add_scalar "add".
  static const auto names = [] {
    std::array<std::string, kUnaryOpCount> n;
    for (const UnaryOpInfo& info : kUnaryOps) {
      std::string name = info.name;
      const std::string suffix = "_scalar";
      if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        name.resize(name.size() - suffix.size());
      n[size_t(info.op)] = name;
    }
    return n;
  }();
  return names[size_t(op)].c_str();
}

const char* binary_op_name(BinaryOp op) {
  static const char* const names[] = {
#define MVGPT_BINARY_NAME(name) #name,
      MVGPT_BINARY_OPS(MVGPT_BINARY_NAME)
#undef MVGPT_BINARY_NAME
  };
  return names[size_t(op)];
}

}  // namespace mvgpt
