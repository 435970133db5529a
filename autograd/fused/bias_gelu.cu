// The CUDA kernels of bias + GELU (autograd/fused/bias_gelu.h): one thread per element, the add and
// then the GELU of backends/elementwise_math.h (the unary GELU kernel's functions), so the forward
// gives what linear's bias add followed by the GELU kernel gave, in one pass instead of two; and the
// GELU and its backward rounded to bfloat16 for bf16 products, the backward with column sums.
#include <mvgpt/fused/bias_gelu.h>

#include <algorithm>
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

// The GELU's backward rounded, with column sums: a thread per (column, chunk of kSumRows rows) walks
// its rows in order (a warp reads consecutive columns of a row: coalesced) into a double partial
// sum; a second kernel adds each column's partials in chunk order. Deterministic, and the grid
// covers the rows as well as the columns (the MLP's 4C columns alone fill only a few blocks).
constexpr int64_t kSumRows = 64;

__global__ void gelu_backward_rounded_kernel(int64_t N, int64_t C, int64_t chunks, const float* x, const float* grad,
                                             uint16_t* dx, double* partial) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= C) return;
  for (int64_t chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
    const int64_t r1 = min(N, (chunk + 1) * kSumRows);
    double acc = 0;
    for (int64_t r = chunk * kSumRows; r < r1; ++r) {
      const int64_t at = r * C + j;
      const uint16_t d = math::float_to_bf16_bits(grad[at] * math::gelu_tanh_grad(x[at]));
      dx[at] = d;
      acc += double(math::bf16_bits_to_float(d));  // the sums of dx's rounded values (bias_gelu.h)
    }
    partial[chunk * C + j] = acc;
  }
}

__global__ void sum_partials_kernel(int64_t chunks, int64_t C, const double* partial, float* sums) {
  MVGPT_GRID_STRIDE(j, C) {
    double s = 0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) s += partial[chunk * C + j];
    sums[j] = float(s);
  }
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

void gelu_backward_rounded(const Tensor& x, const Tensor& grad, const Tensor& dx, const Tensor& sums) {
  const char* op = "gelu_backward_rounded (cuda)";
  for (const Tensor* t : {&grad, &dx, &sums}) require_on(*t, x.device(), op);
  const bool fits = x.dim() == 2 && x.is_contiguous() && grad.is_contiguous() && dx.is_contiguous() &&
                    sums.is_contiguous() && x.dtype() == DType::f32 && grad.dtype() == DType::f32 &&
                    dx.dtype() == DType::bf16 && sums.dtype() == DType::f32 && grad.shape() == x.shape() &&
                    dx.shape() == x.shape() && sums.numel() == x.size(1);
  if (!fits)
    throw std::logic_error(std::string(op) + ": contiguous float32 x and grad (N, C), bfloat16 dx (N, C) and float32 "
                           "sums (C) expected");
  const int64_t N = x.size(0), C = x.size(1);
  if (C == 0) return;
  const int64_t chunks = (N + kSumRows - 1) / kSumRows;
  const Tensor partial = Tensor::empty({std::max<int64_t>(chunks, 1), C}, DType::f64, x.device());  // (chunks, C)
  cudaStream_t stream = static_cast<CudaBackend&>(backend_for(x.device())).activate();
  if (chunks > 0) {
    const dim3 grid(unsigned((C + kThreads - 1) / kThreads), unsigned(std::min<int64_t>(chunks, 65535)));
    gelu_backward_rounded_kernel<<<grid, kThreads, 0, cuda::counted(stream)>>>(
        N, C, chunks, ptr<float>(x), ptr<float>(grad), mut<uint16_t>(dx), mut<double>(partial));
    MVGPT_CUDA_CHECK_LAUNCH();
  }
  sum_partials_kernel<<<blocks_for(C), kThreads, 0, cuda::counted(stream)>>>(chunks, C, ptr<double>(partial),
                                                                            mut<float>(sums));
  MVGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace

// CUDA's linear runs the GEMM and then a separate bias add (Backend::linear's default), so the bias
// belongs in this pass.
BiasGeluKernels bias_gelu_cuda_kernels() { return {false, forward, backward, gelu_rounded, gelu_backward_rounded}; }

}  // namespace mvgpt::fused
