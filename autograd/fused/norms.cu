// The CUDA kernels of layer norm and RMS norm (autograd/fused/norms.h): one block per row, fixed-order
// block reductions, and the parameter gradients in two deterministic stages (no atomics).
#include <mvgpt/fused/norms.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include <mvgpt/backends/cuda/cuda_backend_impl.h>
#include <mvgpt/backends/cuda/cuda_kernels.cuh>
#include <mvgpt/backends/cuda/fused_host.h>

namespace mvgpt::fused {
namespace {

using namespace mvgpt::cuda;

// ------------------------------------------------------------------------------------------ norms

// One block per row of x (N, C). mean is null for RMS norm (x is then not centred).
template <typename T>
__global__ void norm_forward_kernel(int64_t N, int64_t C, const T* x, const T* weight, const T* bias, T eps, T* y,
                                    T* mean, T* rstd) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* shared = reinterpret_cast<T*>(smem);
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    const T* xr = x + r * C;
    T* yr = y + r * C;
    T mu = 0;
    if (mean) {
      T s = 0;
      for (int64_t i = threadIdx.x; i < C; i += blockDim.x) s += xr[i];
      mu = block_reduce(s, shared, SumOp{}) / T(C);
    }
    // Centred second moment (two passes: no cancellation of E[x^2] - E[x]^2).
    T s2 = 0;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) s2 += (xr[i] - mu) * (xr[i] - mu);
    const T var = block_reduce(s2, shared, SumOp{}) / T(C);
    const T rs = T(1) / math::m_sqrt(var + eps);
    if (threadIdx.x == 0) {
      if (mean) mean[r] = mu;
      rstd[r] = rs;
    }
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
      T v = (xr[i] - mu) * rs;
      if (weight) v *= weight[i];
      if (bias) v += bias[i];
      yr[i] = v;
    }
  }
}

// dx of one row per block. Layer norm (mean given): dx = rstd (g - mean(g) - xhat mean(g xhat));
// RMS norm: dx = rstd g - x rstd^3 mean(g x); g = dy * weight.
template <typename T>
__global__ void norm_backward_dx_kernel(int64_t N, int64_t C, const T* dy, const T* x, const T* weight,
                                        const T* mean, const T* rstd, T* dx) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* shared = reinterpret_cast<T*>(smem);
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    const T* xr = x + r * C;
    const T* dyr = dy + r * C;
    T* dxr = dx + r * C;
    const T rs = rstd[r];
    auto g_at = [&](int64_t i) { return weight ? dyr[i] * weight[i] : dyr[i]; };
    if (mean) {
      const T mu = mean[r];
      T sg = 0, sgx = 0;
      for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
        const T g = g_at(i);
        sg += g;
        sgx += g * (xr[i] - mu) * rs;
      }
      const T g_mean = block_reduce(sg, shared, SumOp{}) / T(C);
      const T gx_mean = block_reduce(sgx, shared, SumOp{}) / T(C);
      for (int64_t i = threadIdx.x; i < C; i += blockDim.x)
        dxr[i] = rs * (g_at(i) - g_mean - (xr[i] - mu) * rs * gx_mean);
    } else {
      T sgx = 0;
      for (int64_t i = threadIdx.x; i < C; i += blockDim.x) sgx += g_at(i) * xr[i];
      const T k = rs * rs * rs * (block_reduce(sgx, shared, SumOp{}) / T(C));
      for (int64_t i = threadIdx.x; i < C; i += blockDim.x) dxr[i] = rs * g_at(i) - xr[i] * k;
    }
  }
}

// Parameter gradients in two deterministic stages. Stage 1: block (column tile, row chunk) writes
// the chunk's partial sums of dy * xhat (and dy) per column; xhat = (x - mean) rstd, mean 0 for RMS.
// The chunk size depends only on N.
int64_t norm_chunk_rows(int64_t N) { return std::max<int64_t>(128, (N + 65534) / 65535); }

template <typename T>
__global__ void norm_param_partial_kernel(int64_t N, int64_t C, int64_t chunk_rows, const T* dy, const T* x, const T* mean,
                                          const T* rstd, T* dw_part, T* db_part) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  if (c >= C) return;
  T dw = 0, db = 0;
  const int64_t r1 = min(N, (chunk + 1) * chunk_rows);
  for (int64_t r = chunk * chunk_rows; r < r1; ++r) {
    const T g = dy[r * C + c];
    dw += g * (x[r * C + c] - (mean ? mean[r] : T(0))) * rstd[r];
    db += g;
  }
  if (dw_part) dw_part[chunk * C + c] = dw;
  if (db_part) db_part[chunk * C + c] = db;
}

// Stage 2: out[c] = sum of the chunks' partials, in chunk order.
template <typename T>
__global__ void sum_chunks_kernel(int64_t nchunks, int64_t C, const T* part, T* out) {
  MVGPT_GRID_STRIDE(c, C) {
    T s = 0;
    for (int64_t k = 0; k < nchunks; ++k) s += part[k * C + c];
    out[c] = s;
  }
}

// ------------------------------------------------------------------------------------------ host

void check_norm_args(const char* op, Device dev, const Tensor& x, std::initializer_list<const Tensor*> others) {
  check_float(x, op);
  require_on(x, dev, op);
  if (!x.is_contiguous()) throw std::logic_error(std::string(op) + ": x must be contiguous");
  for (const Tensor* t : others) {
    if (!t->defined()) continue;
    require_on(*t, dev, op);
    if (!t->is_contiguous()) throw std::logic_error(std::string(op) + ": every tensor must be contiguous");
    if (t->dtype() != x.dtype()) throw std::logic_error(std::string(op) + ": mixed dtypes reached the kernel");
  }
}

void norm_forward(CudaBackend& be, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                  const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  const int64_t C = x.size(-1), N = rstd.numel();  // rows counted by rstd: x may have C = 0
  if (N == 0) return;
  cudaStream_t stream = be.activate();
  const int threads = threads_for_row(C);
  dispatch_float(x, [&](auto tag) {
    using T = decltype(tag);
    norm_forward_kernel<T><<<grid_rows(N), threads, threads * sizeof(T), cuda::counted(stream)>>>(
        N, C, ptr<T>(x), ptr<T>(weight), ptr<T>(bias), T(eps), mut<T>(y), mut<T>(mean), mut<T>(rstd));
  });
  MVGPT_CUDA_CHECK_LAUNCH();
}

void norm_backward(CudaBackend& be, const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                   const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias) {
  const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
  cudaStream_t stream = be.activate();
  dispatch_float(x, [&](auto tag) {
    using T = decltype(tag);
    if (dx.defined() && N > 0) {
      const int threads = threads_for_row(C);
      norm_backward_dx_kernel<T><<<grid_rows(N), threads, threads * sizeof(T), cuda::counted(stream)>>>(
          N, C, ptr<T>(dy), ptr<T>(x), ptr<T>(weight), ptr<T>(mean), ptr<T>(rstd), mut<T>(dx));
      MVGPT_CUDA_CHECK_LAUNCH();
    }
    if ((!dweight.defined() && !dbias.defined()) || C == 0) return;
    const int64_t chunk_rows = norm_chunk_rows(N);
    const int64_t nchunks = (N + chunk_rows - 1) / chunk_rows;
    if (nchunks == 0) {  // no rows: the sums are empty
      if (dweight.defined()) be.fill(dweight, 0.0);
      if (dbias.defined()) be.fill(dbias, 0.0);
      return;
    }
    Tensor dw_part = dweight.defined() ? be.scratch({nchunks, C}, x.dtype()) : Tensor();
    Tensor db_part = dbias.defined() ? be.scratch({nchunks, C}, x.dtype()) : Tensor();
    const dim3 grid(unsigned((C + kThreads - 1) / kThreads), unsigned(nchunks));
    norm_param_partial_kernel<T><<<grid, kThreads, 0, cuda::counted(stream)>>>(N, C, chunk_rows, ptr<T>(dy), ptr<T>(x), ptr<T>(mean),
                                                                ptr<T>(rstd), mut<T>(dw_part), mut<T>(db_part));
    MVGPT_CUDA_CHECK_LAUNCH();
    if (dweight.defined())
      sum_chunks_kernel<T><<<blocks_for(C), kThreads, 0, cuda::counted(stream)>>>(nchunks, C, ptr<T>(dw_part), mut<T>(dweight));
    if (dbias.defined())
      sum_chunks_kernel<T><<<blocks_for(C), kThreads, 0, cuda::counted(stream)>>>(nchunks, C, ptr<T>(db_part), mut<T>(dbias));
    MVGPT_CUDA_CHECK_LAUNCH();
  });
}

CudaBackend& backend_of(const Tensor& x) { return static_cast<CudaBackend&>(backend_for(x.device())); }

}  // namespace

NormKernels norms_cuda_kernels() {
  NormKernels k;
  k.layer_norm = [](const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                    const Tensor& mean, const Tensor& rstd) {
    check_norm_args("layer_norm (cuda)", x.device(), x, {&weight, &bias, &y, &mean, &rstd});
    norm_forward(backend_of(x), x, weight, bias, eps, y, mean, rstd);
  };
  k.layer_norm_backward = [](const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                             const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias) {
    check_norm_args("layer_norm_backward (cuda)", x.device(), x, {&dy, &weight, &mean, &rstd, &dx, &dweight, &dbias});
    norm_backward(backend_of(x), dy, x, weight, mean, rstd, dx, dweight, dbias);
  };
  k.rms_norm = [](const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd) {
    check_norm_args("rms_norm (cuda)", x.device(), x, {&weight, &y, &rstd});
    norm_forward(backend_of(x), x, weight, Tensor(), eps, y, Tensor(), rstd);
  };
  k.rms_norm_backward = [](const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                           const Tensor& dx, const Tensor& dweight) {
    check_norm_args("rms_norm_backward (cuda)", x.device(), x, {&dy, &weight, &rstd, &dx, &dweight});
    norm_backward(backend_of(x), dy, x, weight, Tensor(), rstd, dx, dweight, Tensor());
  };
  return k;
}

}  // namespace mvgpt::fused
