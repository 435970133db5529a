#include <mvgpt/backends/backend.h>

#include <stdexcept>

#include <mvgpt/backends/cpu/cpu_backend.h>
#include <mvgpt/backends/cuda/cuda_backend.h>
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

void Backend::linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out) {
  matmul(x, views::transpose(weight, 0, 1), out);
  if (bias.defined()) binary(BinaryOp::add, out, views::expand(bias, out.shape()), out);  // same element in and out
}

bool cuda_available() { return cuda::built_with_cuda() && cuda::device_count() > 0; }
int cuda_device_count() { return cuda::built_with_cuda() ? cuda::device_count() : 0; }
CudaStatus cuda_status() {
  if (cuda_available()) return {true, false, ""};
  return {false, cuda::device_count_failed(), cuda::device_count_error()};
}

const char* unary_op_name(UnaryOp op) {
  static const char* names[] = {"neg",      "exp",        "log",        "sqrt",       "rsqrt",       "tanh",
                                "sigmoid",  "relu",       "gelu",       "silu",       "abs",         "pow",
                                "add",      "mul",        "rsub",       "rdiv",       "sign",        "square",
                                "gelu_erf"};
  return names[int(op)];
}

const char* binary_op_name(BinaryOp op) {
  static const char* names[] = {"add", "sub", "mul", "div", "maximum", "minimum", "eq",           "ne",
                                "lt",  "le",  "gt",  "ge",  "gelu_backward", "silu_backward",
                                "gelu_erf_backward"};
  return names[int(op)];
}

}  // namespace mvgpt
