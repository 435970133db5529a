// The CUDA kernel of rotary embedding (autograd/fused/rope.h): one thread per (row, pair), angles in
// double as on the CPU.
#include <cmath>
#include <stdexcept>
#include <string>

#include <mvgpt/backends/cuda/cuda_backend_impl.h>
#include <mvgpt/backends/cuda/cuda_kernels.cuh>
#include <mvgpt/backends/cuda/fused_host.h>
#include <mvgpt/fused/rope.h>

namespace mvgpt::fused {
namespace {

using namespace mvgpt::cuda;

// ------------------------------------------------------------------------------------------- rope

// One thread per (row, pair). x rows at strides (sb, sh, st) with a unit stride on D; out contiguous.
template <typename T, typename I>
__global__ void rope_kernel(int64_t B, int64_t H, int64_t Tn, int64_t D, int64_t sb, int64_t sh, int64_t st,
                            const T* x, const I* positions, bool per_sequence, double base, double position_scale,
                            double sign, bool interleaved, T* out) {
  const int64_t half = D / 2;
  MVGPT_GRID_STRIDE(e, B * H * Tn * half) {
    const int64_t i = e % half, row = e / half;
    const int64_t t = row % Tn, h = (row / Tn) % H, b = row / (Tn * H);
    const double pos = double(positions[(per_sequence ? b * Tn : 0) + t]) * position_scale;
    // The angle in double, as on the CPU: positions can exceed 100k, where a float angle is off by radians.
    const double angle = sign * pos * pow(base, -2.0 * double(i) / double(D));
    const T c = T(cos(angle)), s = T(sin(angle));
    const T* xr = x + b * sb + h * sh + t * st;
    T* o = out + row * D;
    const int64_t i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half;
    const T a = xr[i0], bb = xr[i1];
    o[i0] = a * c - bb * s;
    o[i1] = a * s + bb * c;
  }
}

void rotate(const Tensor& x, const Tensor& positions, double base, RopeLayout layout, bool inverse,
            double position_scale, const Tensor& out) {
  const char* op = "rope (cuda)";
  check_float(x, op);
  for (const Tensor* t : {&x, &positions, &out}) require_on(*t, x.device(), op);
  if (x.dim() > 0 && x.size(-1) > 1 && x.strides()[x.dim() - 1] != 1)
    throw std::logic_error("rope (cuda): x must have a unit stride on its last axis");
  if (!positions.is_contiguous() || !out.is_contiguous())
    throw std::logic_error("rope (cuda): positions and out must be contiguous");
  const bool batched = x.dim() == 4;  // (B, H, T, D), else (H, T, D)
  const int64_t B = batched ? x.size(0) : 1, H = x.size(-3), Tn = x.size(-2), D = x.size(-1);
  const int64_t sb = batched ? x.strides()[0] : 0, sh = x.strides()[x.dim() - 3], st = x.strides()[x.dim() - 2];
  const int64_t n = B * H * Tn * (D / 2);
  if (n == 0) return;
  cudaStream_t stream = static_cast<CudaBackend&>(backend_for(x.device())).activate();
  const bool per_sequence = positions.dim() == 2;
  const bool interleaved = layout == RopeLayout::interleaved;
  const double sign = inverse ? -1.0 : 1.0;
  dispatch_float(x, [&](auto tag) {
    using T = decltype(tag);
    auto launch = [&](auto itag) {
      using I = decltype(itag);
      rope_kernel<T, I><<<blocks_for(n), kThreads, 0, cuda::counted(stream)>>>(B, H, Tn, D, sb, sh, st, ptr<T>(x), ptr<I>(positions),
                                                                per_sequence, base, position_scale, sign, interleaved,
                                                                mut<T>(out));
    };
    if (positions.dtype() == DType::i64) launch(int64_t{});
    else if (positions.dtype() == DType::i32) launch(int32_t{});
    else throw std::logic_error("rope (cuda): positions must be int32 or int64");
  });
  MVGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace

RopeKernels rope_cuda_kernels() { return {rotate}; }

}  // namespace mvgpt::fused
