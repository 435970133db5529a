// Indexing kernels. index_select is gather with the index expanded (stride 0 off the axis) and
// index_add is scatter_add likewise, so each pair shares one kernel, as on the CPU.
//
// Scatter-adds are deterministic without atomics: one thread per position off the axis (distinct
// positions write distinct destination elements) walks the axis in index order, so repeated
// indices accumulate in the same order on every run. Indices were range-checked by the ops layer.
//
// NOTE [ Sorted scatter-add ]
// That walk has as many threads as positions off the axis: an embedding's backward (index_add of
// 16,384 tokens' gradients into a (vocab, 384) table) is 384 threads, each adding 16,384 rows in
// turn, a sliver of the GPU for milliseconds. Where the index is the same at every position (every
// index_add: the index is one vector along the axis), the axis is sorted by index once, with a stable
// radix sort (equal indices keep their order), and each run of equal indices is one block whose
// threads cover the positions. Every destination element still gets its additions one after another
// in index order, starting from its old value, so the result is the walk's bit for bit, and as
// deterministic; the walk stays for scatter_add, short axes and many positions, and is the reference
// the sorted path is tested against (CudaOnly.SortedIndexAddEqualsTheWalk).
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <atomic>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <mvgpt/backends/cuda/cuda_backend.h>
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

// keys[k] = index[k * idx_axis], order[k] = k: what the sort of NOTE [ Sorted scatter-add ] sorts.
template <typename I>
__global__ void sort_input_kernel(int64_t n, const I* index, int64_t idx_axis, I* keys, int32_t* order) {
  MVGPT_GRID_STRIDE(k, n) {
    keys[k] = index[k * idx_axis];
    order[k] = int32_t(k);
  }
}

// One column of blocks per run of equal sorted keys (blockIdx.x at the run's first entry; the
// others return), their threads over the positions (blockIdx.y splits many positions over several
// blocks, each position still one thread): dst[pos, key] += src[pos, order[j]] for the run's j in order.
template <typename T, typename I>
__global__ void sorted_scatter_add_kernel(StridedIndexer<3> ix, int64_t positions, int64_t n, T* dst,
                                          int64_t dst_axis, const T* src, int64_t src_axis, const I* keys,
                                          const int32_t* order) {
  for (int64_t head = blockIdx.x; head < n; head += gridDim.x) {
    const I key = keys[head];
    if (head > 0 && keys[head - 1] == key) continue;
    int64_t end = head + 1;
    while (end < n && keys[end] == key) ++end;
    for (int64_t p = int64_t(blockIdx.y) * blockDim.x + threadIdx.x; p < positions; p += int64_t(gridDim.y) * blockDim.x) {
      int64_t off[3];
      ix.offsets(p, off);
      T* d = dst + off[0] + int64_t(key) * dst_axis;
      T acc = *d;
      for (int64_t j = head; j < end; ++j) add_into(acc, src[off[1] + int64_t(order[j]) * src_axis]);
      *d = acc;
    }
  }
}

std::atomic<bool> walk_only{false};          // force_walking_scatter_add
std::atomic<int64_t> sorted_launches{0};     // sorted_scatter_add_count

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
      gather_kernel<W, I><<<blocks_for(n), kThreads, 0, counted(stream)>>>(ix, n, static_cast<const W*>(src.raw_data()),
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

// Whether the sorted path pays (NOTE [ Sorted scatter-add ]): one index for every position, an axis
// long enough to be worth a sort, and too few positions to fill the GPU with walking threads.
bool sort_pays(const index_plan::ScatterAddPlan& p, int64_t positions) {
  constexpr int64_t kMinLength = 256, kMaxPositions = 1 << 16;
  const bool one_index = std::all_of(p.index.begin(), p.index.end(), [](int64_t s) { return s == 0; });
  return !walk_only.load() && one_index && p.length >= kMinLength && positions <= kMaxPositions &&
         p.length <= std::numeric_limits<int32_t>::max();
}

void scatter_add_impl(cudaStream_t stream, const Tensor& dst, int axis, const Tensor& index,
                      const Strides& idx_strides, const Tensor& src) {
  if (src.shape()[axis] == 0 || src.numel() == 0) return;
  const index_plan::ScatterAddPlan p = index_plan::plan_scatter_add(dst, axis, idx_strides, src);
  const int64_t n = p.length, dst_axis = p.dst_axis, src_axis = p.src_axis, idx_axis = p.index_axis;
  const int64_t positions = numel(p.positions);
  const auto ix = make_indexer<3>(p.positions, {&p.dst, &p.src, &p.index});
  const bool sorted = sort_pays(p, positions);
  dispatch_index(index, [&](auto itag) {
    using I = decltype(itag);
    // The sort's buffers, on the stream like everything else (NOTE [ Reuse is stream-ordered ]).
    Tensor keys, order;
    if (sorted) {
      const DType key_type = std::is_same_v<I, int32_t> ? DType::i32 : DType::i64;
      Tensor unsorted = Tensor::empty({n}, key_type, dst.device());
      Tensor positions_in = Tensor::empty({n}, DType::i32, dst.device());
      keys = Tensor::empty({n}, key_type, dst.device());
      order = Tensor::empty({n}, DType::i32, dst.device());
      sort_input_kernel<I><<<blocks_for(n), kThreads, 0, counted(stream)>>>(
          n, static_cast<const I*>(index.raw_data()), idx_axis,
          static_cast<I*>(unsorted.raw_data()), static_cast<int32_t*>(positions_in.raw_data()));
      MVGPT_CUDA_CHECK_LAUNCH();
      size_t scratch_bytes = 0;
      auto sort = [&](void* scratch) {
        MVGPT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
            scratch, scratch_bytes, static_cast<const I*>(unsorted.raw_data()), static_cast<I*>(keys.raw_data()),
            static_cast<const int32_t*>(positions_in.raw_data()), static_cast<int32_t*>(order.raw_data()), n, 0,
            int(sizeof(I) * 8), stream));
      };
      sort(nullptr);  // asks for the scratch size
      Tensor scratch = Tensor::empty({int64_t(std::max<size_t>(scratch_bytes, 1))}, DType::boolean, dst.device());
      sort(scratch.raw_data());
      count_launches(1);
    }
    auto launch = [&](auto tag) {
      using T = decltype(tag);
      if (sorted) {
        const int threads = threads_for_row(positions);
        const dim3 grid(unsigned(std::min<int64_t>(n, 65535 * 8)),
                        unsigned(std::min<int64_t>((positions + threads - 1) / threads, 65535)));
        sorted_launches.fetch_add(1);
        sorted_scatter_add_kernel<T, I><<<grid, threads, 0, counted(stream)>>>(
            ix, positions, n, static_cast<T*>(dst.raw_data()), dst_axis, static_cast<const T*>(src.raw_data()),
            src_axis, static_cast<const I*>(keys.raw_data()), static_cast<const int32_t*>(order.raw_data()));
        return;
      }
      scatter_add_kernel<T, I><<<blocks_for(positions), kThreads, 0, counted(stream)>>>(
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

void force_walking_scatter_add(bool on) { walk_only.store(on); }
int64_t sorted_scatter_add_count() { return sorted_launches.load(); }

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
