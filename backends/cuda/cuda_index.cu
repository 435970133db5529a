// Indexing kernels. index_select is gather with the index expanded (stride 0 off the axis) and
// index_add is scatter_add likewise, so each pair shares one kernel, as on the CPU.
//
// Scatter-adds are deterministic without atomics: one thread per position off the axis (distinct
// positions write distinct destination elements) walks the axis in index order, so repeated
// indices accumulate in the same order on every run. Indices were range-checked by the ops layer.
#include <stdexcept>
#include <string>
#include <utility>

#include <mvgpt/backends/cuda/cuda_backend_impl.h>
#include <mvgpt/backends/cuda/cuda_kernels.cuh>
#include <mvgpt/backends/cuda/strided_indexer.h>
#include <mvgpt/backends/index_plan.h>

namespace mvgpt::cuda {
namespace {

// bfloat16 elements as their bits; additions go through float, as mvgpt::bfloat16 does on the CPU.
struct Bf16 {
  uint16_t bits;
};

template <typename T>
__device__ inline void add_into(T& d, T v) {
  if constexpr (std::is_same_v<T, Bf16>) d.bits = math::float_to_bf16_bits(math::bf16_bits_to_float(d.bits) +
                                                                           math::bf16_bits_to_float(v.bits));
  else if constexpr (std::is_same_v<T, bool>) d = d || v;
  else d = T(d + v);
}

// out[pos] = src[pos with the axis coordinate replaced by index[pos]]; operands: out, src (axis
// stride zeroed), index.
template <typename W, typename I>
__global__ void gather_kernel(StridedIndexer<3> ix, int64_t n, const W* src, int64_t axis_stride, const I* index,
                              W* out) {
  MVGPT_GRID_STRIDE(i, n) {
    int64_t off[3];
    ix.offsets(i, off);
    out[off[0]] = src[off[1] + int64_t(index[off[2]]) * axis_stride];
  }
}

// dst[pos with axis coordinate index[pos]] += src[pos]; ix walks the positions off the axis
// (operands: dst, src, index), each thread the whole axis in order.
template <typename T, typename I>
__global__ void scatter_add_kernel(StridedIndexer<3> ix, int64_t positions, int64_t n, T* dst, int64_t dst_axis,
                                   const T* src, int64_t src_axis, const I* index, int64_t idx_axis) {
  MVGPT_GRID_STRIDE(p, positions) {
    int64_t off[3];
    ix.offsets(p, off);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t row = int64_t(index[off[2] + k * idx_axis]);
      add_into(dst[off[0] + row * dst_axis], src[off[1] + k * src_axis]);
    }
  }
}

template <typename F>
void dispatch_index(const Tensor& index, F&& f) {
  index_plan::dispatch_index(index, "CudaBackend", std::forward<F>(f));
}

using index_plan::along_axis;

void gather_impl(cudaStream_t stream, const Tensor& src, int axis, const Tensor& index, const Strides& idx_strides,
                 const Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const index_plan::GatherSource source = index_plan::gather_source(src, axis);
  const int64_t axis_stride = source.axis_stride;
  const auto ix = make_indexer<3>(out.shape(), {&out.strides(), &source.strides, &idx_strides});
  dispatch_index(index, [&](auto itag) {
    using I = decltype(itag);
    auto launch = [&](auto word) {
      using W = decltype(word);
      gather_kernel<W, I><<<blocks_for(n), kThreads, 0, stream>>>(ix, n, static_cast<const W*>(src.raw_data()),
                                                                  axis_stride, static_cast<const I*>(index.raw_data()),
                                                                  static_cast<W*>(out.raw_data()));
    };
    switch (dtype_size(src.dtype())) {
      case 1: launch(uint8_t{}); break;
      case 2: launch(uint16_t{}); break;
      case 4: launch(uint32_t{}); break;
      default: launch(uint64_t{}); break;
    }
  });
  MVGPT_CUDA_CHECK_LAUNCH();
}

void scatter_add_impl(cudaStream_t stream, const Tensor& dst, int axis, const Tensor& index,
                      const Strides& idx_strides, const Tensor& src) {
  if (src.shape()[axis] == 0 || src.numel() == 0) return;
  const index_plan::ScatterAddPlan p = index_plan::plan_scatter_add(dst, axis, idx_strides, src);
  const int64_t n = p.length, dst_axis = p.dst_axis, src_axis = p.src_axis, idx_axis = p.index_axis;
  const int64_t positions = numel(p.positions);
  const auto ix = make_indexer<3>(p.positions, {&p.dst, &p.src, &p.index});
  dispatch_index(index, [&](auto itag) {
    using I = decltype(itag);
    auto launch = [&](auto tag) {
      using T = decltype(tag);
      scatter_add_kernel<T, I><<<blocks_for(positions), kThreads, 0, stream>>>(
          ix, positions, n, static_cast<T*>(dst.raw_data()), dst_axis, static_cast<const T*>(src.raw_data()), src_axis,
          static_cast<const I*>(index.raw_data()), idx_axis);
    };
    switch (dst.dtype()) {
      case DType::f32: launch(float{}); break;
      case DType::f64: launch(double{}); break;
      case DType::bf16: launch(Bf16{}); break;
      case DType::i32: launch(int32_t{}); break;
      case DType::i64: launch(int64_t{}); break;
      case DType::boolean: launch(bool{}); break;
    }
  });
  MVGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void CudaBackend::index_select(const Tensor& src, int axis, const Tensor& index, const Tensor& out) {
  for (const Tensor* t : {&src, &index, &out}) require_on(*t, device(), "CudaBackend::index_select");
  gather_impl(activate(), src, axis, index, along_axis(index, axis, out.dim()), out);
}

void CudaBackend::gather(const Tensor& src, int axis, const Tensor& index, const Tensor& out) {
  for (const Tensor* t : {&src, &index, &out}) require_on(*t, device(), "CudaBackend::gather");
  gather_impl(activate(), src, axis, index, index.strides(), out);
}

void CudaBackend::index_add(const Tensor& dst, int axis, const Tensor& index, const Tensor& src) {
  for (const Tensor* t : {&dst, &index, &src}) require_on(*t, device(), "CudaBackend::index_add");
  scatter_add_impl(activate(), dst, axis, index, along_axis(index, axis, src.dim()), src);
}

void CudaBackend::scatter_add(const Tensor& dst, int axis, const Tensor& index, const Tensor& src) {
  for (const Tensor* t : {&dst, &index, &src}) require_on(*t, device(), "CudaBackend::scatter_add");
  scatter_add_impl(activate(), dst, axis, index, index.strides(), src);
}

}  // namespace mvgpt::cuda
