// The CUDA kernel of AdamW (autograd/fused/adamw.h): one thread per element, the update of
// adamw_math.h, rounded after every operation like the CPU kernel, so both agree bit for bit.
#include <mvgpt/fused/adamw.h>

#include <stdexcept>

#include <mvgpt/backends/cuda/cuda_backend_impl.h>
#include <mvgpt/backends/cuda/cuda_kernels.cuh>
#include <mvgpt/fused/adamw_math.h>

namespace mvgpt::fused {
namespace {

using namespace mvgpt::cuda;

template <typename T>
__global__ void adamw_kernel(int64_t n, T* param, const T* grad, T* m, T* v, math::AdamWScalars<T> s) {
  MVGPT_GRID_STRIDE(i, n) {
    T p = param[i], mi = m[i], vi = v[i];
    math::adamw_update(p, grad[i], mi, vi, s);
    param[i] = p;
    m[i] = mi;
    v[i] = vi;
  }
}

void step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamWParams& p,
          const Tensor* rounded) {
  // Rounded weights are the CPU's (NOTE [ Weights rounded by the optimizer ] in adamw_cpu.cpp):
  // on CUDA the policy makes a weight's bfloat16 copy where a product first asks for it.
  if (rounded) throw std::logic_error("adamw_step (cuda): no rounded copy of the weights on CUDA");
  for (const Tensor* t : {&param, &grad, &m, &v}) {
    require_on(*t, param.device(), "adamw_step (cuda)");
    if (!t->is_contiguous() || t->dtype() != param.dtype() || t->numel() != param.numel())
      throw std::logic_error("adamw_step (cuda): param, grad, m, v must be contiguous and share dtype and size");
  }
  const int64_t n = param.numel();
  if (n == 0) return;
  cudaStream_t stream = static_cast<CudaBackend&>(backend_for(param.device())).activate();
  if (param.dtype() == DType::f64)
    adamw_kernel<double><<<blocks_for(n), kThreads, 0, cuda::counted(stream)>>>(n, param.data<double>(), grad.data<double>(),
                                                                 m.data<double>(), v.data<double>(),
                                                                 math::adamw_scalars<double>(p));
  else
    adamw_kernel<float><<<blocks_for(n), kThreads, 0, cuda::counted(stream)>>>(n, param.data<float>(), grad.data<float>(),
                                                                m.data<float>(), v.data<float>(),
                                                                math::adamw_scalars<float>(p));
  MVGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace

AdamWKernels adamw_cuda_kernels() { return {step}; }

}  // namespace mvgpt::fused
