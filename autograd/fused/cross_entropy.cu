// The CUDA kernels of cross-entropy (autograd/fused/cross_entropy.h): one block per row forward
// (fixed-order block reductions), one thread per logit backward.
#include <mvgpt/fused/cross_entropy.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include <mvgpt/backends/cuda/cuda_backend_impl.h>
#include <mvgpt/backends/cuda/cuda_kernels.cuh>
#include <mvgpt/backends/cuda/fused_host.h>
#include <mvgpt/backends/index_plan.h>

namespace mvgpt::fused {
namespace {

using namespace mvgpt::cuda;

template <typename I>
__device__ inline int64_t target_of(const I* targets, int64_t n) {
  return int64_t(targets[n]);
}

// One block per row of logits (N, V): lse and loss = (max - logit[target]) + log(sum exp(x - max)).
template <typename T, typename I>
__global__ void cross_entropy_kernel(int64_t N, int64_t V, const T* logits, const I* targets, int64_t ignore_index,
                                     T* losses, T* lse) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* shared = reinterpret_cast<T*>(smem);
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* x = logits + n * V;
    T m = -INFINITY;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) m = x[j] > m ? x[j] : m;
    m = block_reduce(m, shared, MaxOp{});
    T s = 0;
    if (m != -INFINITY)
      for (int64_t j = threadIdx.x; j < V; j += blockDim.x) s += math::m_exp(x[j] - m);
    s = block_reduce(s, shared, SumOp{});
    if (threadIdx.x == 0) {
      const T log_s = math::m_log(s);
      lse[n] = m == -INFINITY ? m : m + log_s;
      const int64_t t = target_of(targets, n);
      losses[n] = t == ignore_index ? T(0) : (m - x[t]) + log_s;
    }
  }
}

// dlogits[n, j] = (exp(x - lse[n]) - [j == target]) * dloss[n]; ignored rows are 0.
template <typename T, typename I>
__global__ void cross_entropy_backward_kernel(int64_t N, int64_t V, const T* dlosses, const T* logits,
                                              const I* targets, const T* lse, int64_t ignore_index, T* dlogits) {
  MVGPT_GRID_STRIDE(i, N * V) {
    const int64_t n = i / V, j = i % V;
    const int64_t t = target_of(targets, n);
    if (t == ignore_index) {
      dlogits[i] = 0;
    } else {
      const T g = dlosses[n];
      const T d = math::m_exp(logits[i] - lse[n]) * g;
      dlogits[i] = j == t ? d - g : d;
    }
  }
}

void forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index, const Tensor& losses, const Tensor& lse) {
  for (const Tensor* t : {&logits, &targets, &losses, &lse}) require_on(*t, logits.device(), "cross_entropy (cuda)");
  check_float(logits, "cross_entropy (cuda)");
  require_contiguous({&logits, &targets, &losses, &lse}, "cross_entropy (cuda)");
  const int64_t N = logits.size(0), V = logits.size(1);
  if (N == 0) return;
  cudaStream_t stream = static_cast<CudaBackend&>(backend_for(logits.device())).activate();
  const int threads = threads_for_row(V);
  index_plan::dispatch_index(targets, "cross_entropy (cuda)", [&](auto itag) {
    using I = decltype(itag);
    if (logits.dtype() == DType::f64)
      cross_entropy_kernel<double, I><<<grid_rows(N), threads, threads * sizeof(double), cuda::counted(stream)>>>(
          N, V, logits.data<double>(), targets.data<I>(), ignore_index, losses.data<double>(), lse.data<double>());
    else
      cross_entropy_kernel<float, I><<<grid_rows(N), threads, threads * sizeof(float), cuda::counted(stream)>>>(
          N, V, logits.data<float>(), targets.data<I>(), ignore_index, losses.data<float>(), lse.data<float>());
  });
  MVGPT_CUDA_CHECK_LAUNCH();
}

void backward(const Tensor& dlosses, const Tensor& logits, const Tensor& targets, const Tensor& lse,
              int64_t ignore_index, const Tensor& dlogits) {
  for (const Tensor* t : {&dlosses, &logits, &targets, &lse, &dlogits})
    require_on(*t, logits.device(), "cross_entropy_backward (cuda)");
  check_float(logits, "cross_entropy_backward (cuda)");
  require_contiguous({&dlosses, &logits, &targets, &lse, &dlogits}, "cross_entropy_backward (cuda)");
  const int64_t N = logits.size(0), V = logits.size(1);
  if (N * V == 0) return;
  cudaStream_t stream = static_cast<CudaBackend&>(backend_for(logits.device())).activate();
  index_plan::dispatch_index(targets, "cross_entropy_backward (cuda)", [&](auto itag) {
    using I = decltype(itag);
    if (logits.dtype() == DType::f64)
      cross_entropy_backward_kernel<double, I><<<blocks_for(N * V), kThreads, 0, cuda::counted(stream)>>>(
          N, V, dlosses.data<double>(), logits.data<double>(), targets.data<I>(), lse.data<double>(), ignore_index,
          dlogits.data<double>());
    else
      cross_entropy_backward_kernel<float, I><<<blocks_for(N * V), kThreads, 0, cuda::counted(stream)>>>(
          N, V, dlosses.data<float>(), logits.data<float>(), targets.data<I>(), lse.data<float>(), ignore_index,
          dlogits.data<float>());
  });
  MVGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace

CrossEntropyKernels cross_entropy_cuda_kernels() { return {forward, backward}; }

}  // namespace mvgpt::fused
