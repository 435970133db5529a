// The CUDA kernels of bias + GELU (autograd/fused/bias_gelu.h): one thread per element, the add and
// then the GELU of backends/elementwise_math.h (the unary GELU kernel's functions), so the forward
// gives what linear's bias add followed by the GELU kernel gave, in one pass instead of two.
#include <mvgpt/fused/bias_gelu.h>

#include <stdexcept>
#include <string>

#include <mvgpt/backends/cuda/cuda_backend_impl.h>
#include <mvgpt/backends/cuda/cuda_kernels.cuh>
#include <mvgpt/backends/cuda/fused_host.h>

namespace mvgpt::fused {
namespace {

using namespace mvgpt::cuda;

template <typename T>
__global__ void bias_gelu_forward_kernel(int64_t n, int64_t C, const T* x, const T* bias, T* out) {
  MVGPT_GRID_STRIDE(i, n) {
    const T pre = x[i] + bias[i % C];
    out[i] = math::gelu_tanh(pre);
  }
}

template <typename T>
__global__ void bias_gelu_backward_kernel(int64_t n, int64_t C, const T* grad, const T* x, const T* bias, T* dx) {
  MVGPT_GRID_STRIDE(i, n) {
    const T pre = x[i] + bias[i % C];
    dx[i] = grad[i] * math::gelu_tanh_grad(pre);
  }
}

__global__ void gelu_rounded_kernel(int64_t n, const float* x, uint16_t* out) {
  MVGPT_GRID_STRIDE(i, n) { out[i] = math::float_to_bf16_bits(math::gelu_tanh(x[i])); }
}

void check(const char* op, std::initializer_list<const Tensor*> ts, const Tensor& x) {
  check_float(x, op);
  for (const Tensor* t : ts) {
    require_on(*t, x.device(), op);
    if (!t->is_contiguous() || t->dtype() != x.dtype())
      throw std::logic_error(std::string(op) + ": contiguous tensors of x's dtype expected");
  }
}

void forward(const Tensor& x, const Tensor& bias, const Tensor& out) {
  const char* op = "bias_gelu (cuda)";
  check(op, {&x, &bias, &out}, x);
  const int64_t n = x.numel(), C = bias.numel();
  if (n == 0 || C == 0) return;
  cudaStream_t stream = static_cast<CudaBackend&>(backend_for(x.device())).activate();
  dispatch_float(x, [&](auto tag) {
    using T = decltype(tag);
    bias_gelu_forward_kernel<T><<<blocks_for(n), kThreads, 0, cuda::counted(stream)>>>(n, C, ptr<T>(x), ptr<T>(bias),
                                                                                       mut<T>(out));
  });
  MVGPT_CUDA_CHECK_LAUNCH();
}

void backward(const Tensor& grad, const Tensor& x, const Tensor& bias, const Tensor& dx) {
  const char* op = "bias_gelu backward (cuda)";
  check(op, {&grad, &x, &bias, &dx}, x);
  const int64_t n = x.numel(), C = bias.numel();
  if (n == 0 || C == 0) return;
  cudaStream_t stream = static_cast<CudaBackend&>(backend_for(x.device())).activate();
  dispatch_float(x, [&](auto tag) {
    using T = decltype(tag);
    bias_gelu_backward_kernel<T><<<blocks_for(n), kThreads, 0, cuda::counted(stream)>>>(
        n, C, ptr<T>(grad), ptr<T>(x), ptr<T>(bias), mut<T>(dx));
  });
  MVGPT_CUDA_CHECK_LAUNCH();
}

void gelu_rounded(const Tensor& x, const Tensor& out) {
  const char* op = "gelu_rounded (cuda)";
  require_on(out, x.device(), op);
  if (!x.is_contiguous() || !out.is_contiguous() || x.dtype() != DType::f32 || out.dtype() != DType::bf16 ||
      x.numel() != out.numel())
    throw std::logic_error(std::string(op) + ": a contiguous float32 x and bfloat16 out of its size expected");
  const int64_t n = x.numel();
  if (n == 0) return;
  cudaStream_t stream = static_cast<CudaBackend&>(backend_for(x.device())).activate();
  gelu_rounded_kernel<<<blocks_for(n), kThreads, 0, cuda::counted(stream)>>>(
      n, ptr<float>(x), mut<uint16_t>(out));
  MVGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace

// CUDA's linear runs the GEMM and then a separate bias add (Backend::linear's default), so the bias
// belongs in this pass.
BiasGeluKernels bias_gelu_cuda_kernels() { return {false, forward, backward, gelu_rounded}; }

}  // namespace mvgpt::fused
