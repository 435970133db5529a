// Reductions, softmax / log-softmax and cross-entropy.
//
// NOTE [ Deterministic reductions on the GPU ]
// No atomics: every output is reduced by one block (or, when outputs are many and rows short, by
// one thread walking its row in order). A block's threads take strided slices of the row and are
// combined in a fixed tree (block_reduce), so the arithmetic order depends only on the shapes and
// the block size, never on scheduling. Float sums accumulate in double.
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <mvgpt/backends/cuda/cuda_backend_impl.h>
#include <mvgpt/backends/cuda/cuda_kernels.cuh>
#include <mvgpt/backends/cuda/fused_host.h>
#include <mvgpt/backends/cuda/strided_indexer.h>
#include <mvgpt/backends/index_plan.h>
#include <mvgpt/backends/reduce_plan.h>

namespace mvgpt::cuda {
namespace {

template <typename T>
using SumAcc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

// The running first maximum of a slice: a NaN counts as the maximum and the first one sticks.
template <typename T>
struct ArgBest {
  T value;
  int64_t index;  // -1: nothing seen yet

  __device__ void see(T v, int64_t r) {
    if (index < 0) {
      value = v, index = r;
    } else if (value == value && (v > value || v != v)) {
      value = v, index = r;
    }
  }
};

// Which of two partial results comes first in the row's order of preference.
template <typename T>
__device__ ArgBest<T> arg_combine(ArgBest<T> a, ArgBest<T> b) {
  if (a.index < 0) return b;
  if (b.index < 0) return a;
  const bool an = a.value != a.value, bn = b.value != b.value;
  if (an || bn) return an && bn ? (a.index < b.index ? a : b) : (an ? a : b);
  if (a.value != b.value) return a.value > b.value ? a : b;
  return a.index < b.index ? a : b;
}

// at(r): the r-th (row-major) of the reduced elements that make output o.
template <typename T>
__device__ inline auto row_reader(const StridedIndexer<1>& outer, const StridedIndexer<1>& red, const T* x,
                                  int64_t o) {
  int64_t base;
  outer.offsets(o, &base);
  return [&red, x, base](int64_t r) {
    int64_t off;
    red.offsets(r, &off);
    return x[base + off];
  };
}

// One block per output element (grid-stride over outputs).
template <typename T>
__global__ void reduce_block_kernel(StridedIndexer<1> outer, StridedIndexer<1> red, int64_t O, int64_t R,
                                    ReduceOp op, const T* x, void* out) {
  extern __shared__ __align__(16) unsigned char smem[];
  for (int64_t o = blockIdx.x; o < O; o += gridDim.x) {
    const auto at = row_reader(outer, red, x, o);
    if (op == ReduceOp::sum) {
      SumAcc<T> acc = 0;
      for (int64_t r = threadIdx.x; r < R; r += blockDim.x) acc += SumAcc<T>(at(r));
      acc = block_reduce(acc, reinterpret_cast<SumAcc<T>*>(smem), SumOp{});
      if (threadIdx.x == 0) static_cast<T*>(out)[o] = T(acc);
    } else if (op == ReduceOp::argmax) {
      ArgBest<T> best{T(0), -1};
      for (int64_t r = threadIdx.x; r < R; r += blockDim.x) best.see(at(r), r);
      auto* values = reinterpret_cast<T*>(smem);
      auto* indices = reinterpret_cast<int64_t*>(smem + sizeof(double) * blockDim.x);
      values[threadIdx.x] = best.value;
      indices[threadIdx.x] = best.index;
      __syncthreads();
      for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (int(threadIdx.x) < w) {
          const ArgBest<T> c = arg_combine(ArgBest<T>{values[threadIdx.x], indices[threadIdx.x]},
                                           ArgBest<T>{values[threadIdx.x + w], indices[threadIdx.x + w]});
          values[threadIdx.x] = c.value;
          indices[threadIdx.x] = c.index;
        }
        __syncthreads();
      }
      if (threadIdx.x == 0) static_cast<int64_t*>(out)[o] = indices[0];
      __syncthreads();
    } else {
      const bool is_max = op == ReduceOp::max;
      T acc = at(0);  // every thread starts from the first element: idempotent for max/min
      for (int64_t r = threadIdx.x; r < R; r += blockDim.x) acc = is_max ? max_nan(acc, at(r)) : min_nan(acc, at(r));
      acc = is_max ? block_reduce(acc, reinterpret_cast<T*>(smem), MaxOp{})
                   : block_reduce(acc, reinterpret_cast<T*>(smem), MinOp{});
      if (threadIdx.x == 0) static_cast<T*>(out)[o] = acc;
    }
  }
}

// One thread per output element, walking its reduced elements in order.
template <typename T>
__global__ void reduce_thread_kernel(StridedIndexer<1> outer, StridedIndexer<1> red, int64_t O, int64_t R,
                                     ReduceOp op, const T* x, void* out) {
  MVGPT_GRID_STRIDE(o, O) {
    const auto at = row_reader(outer, red, x, o);
    if (op == ReduceOp::sum) {
      SumAcc<T> acc = 0;
      for (int64_t r = 0; r < R; ++r) acc += SumAcc<T>(at(r));
      static_cast<T*>(out)[o] = T(acc);
    } else if (op == ReduceOp::argmax) {
      ArgBest<T> best{T(0), -1};
      for (int64_t r = 0; r < R; ++r) best.see(at(r), r);
      static_cast<int64_t*>(out)[o] = best.index;
    } else {
      T acc = at(0);
      for (int64_t r = 1; r < R; ++r) acc = op == ReduceOp::max ? max_nan(acc, at(r)) : min_nan(acc, at(r));
      static_cast<T*>(out)[o] = acc;
    }
  }
}

// One block per row of the last axis: max, then the sum of exponentials, then the normalised row.
template <typename T>
__global__ void softmax_kernel(StridedIndexer<1> rows, int64_t nrows, int64_t C, int64_t sc, const T* x, T* out,
                               bool log) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* shared = reinterpret_cast<T*>(smem);
  for (int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
    int64_t base;
    rows.offsets(r, &base);
    const T* xr = x + base;
    T* y = out + r * C;
    T m = xr[0];
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) m = max_nan(m, xr[j * sc]);
    m = block_reduce(m, shared, MaxOp{});
    T s = 0;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
      const T e = math::m_exp(xr[j * sc] - m);
      s += e;
      if (!log) y[j] = e;
    }
    s = block_reduce(s, shared, SumOp{});
    if (log) {
      const T shift = m + math::m_log(s);
      for (int64_t j = threadIdx.x; j < C; j += blockDim.x) y[j] = xr[j * sc] - shift;
    } else {
      const T inv = T(1) / s;
      for (int64_t j = threadIdx.x; j < C; j += blockDim.x) y[j] *= inv;  // each thread rescales what it wrote
    }
  }
}

}  // namespace

void CudaBackend::reduce(ReduceOp op, const Tensor& x, const Tensor& out) {
  require_on(x, device(), "CudaBackend::reduce");
  require_on(out, device(), "CudaBackend::reduce");
  const reduce_plan::DimSplit dims = reduce_plan::split_dims(x, out.dim());
  const int64_t O = out.numel(), R = dims.inner_numel;
  if (O == 0) return;
  if (R == 0) {
    if (op != ReduceOp::sum) throw std::logic_error("CudaBackend::reduce: max/min/argmax over no elements");
    fill(out, 0.0);
    return;
  }
  if (!out.is_contiguous()) throw std::logic_error("CudaBackend::reduce: out must be contiguous");
  cudaStream_t stream = activate();
  const auto outer = make_indexer<1>(dims.outer_shape, {&dims.outer_strides});
  const auto red = make_indexer<1>(dims.inner_shape, {&dims.inner_strides});
  // Many short rows: a thread per output; otherwise a block per output.
  const bool per_thread = R <= 64 || (O >= 32768 && R <= 1024);
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.raw_data());
    if (per_thread) {
      reduce_thread_kernel<T><<<blocks_for(O), kThreads, 0, counted(stream)>>>(outer, red, O, R, op, xp, out.raw_data());
    } else {
      const int threads = threads_for_row(R);
      const size_t shared = size_t(threads) * (sizeof(double) + sizeof(int64_t));
      reduce_block_kernel<T><<<grid_rows(O), threads, shared, counted(stream)>>>(outer, red, O, R, op, xp, out.raw_data());
    }
  };
  switch (x.dtype()) {
    case DType::f32: launch(float{}); break;
    case DType::f64: launch(double{}); break;
    case DType::i32: launch(int32_t{}); break;
    case DType::i64: launch(int64_t{}); break;
    default:
      throw std::logic_error("CudaBackend::reduce: dtype " + std::string(dtype_name(x.dtype())) + " reached the kernel");
  }
  MVGPT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::softmax(const Tensor& x, const Tensor& out, bool log) {
  require_on(x, device(), "CudaBackend::softmax");
  require_on(out, device(), "CudaBackend::softmax");
  if (x.numel() == 0) return;
  check_float(x, "CudaBackend::softmax");
  require_contiguous({&out}, "CudaBackend::softmax");
  cudaStream_t stream = activate();
  const int64_t C = x.shape().back(), rows = x.numel() / C;
  const reduce_plan::DimSplit dims = reduce_plan::split_dims(x, x.dim() - 1);  // rows, then C
  const auto outer = make_indexer<1>(dims.outer_shape, {&dims.outer_strides});
  const int64_t sc = x.strides().back();
  const int threads = threads_for_row(C);
  if (x.dtype() == DType::f64)
    softmax_kernel<double><<<grid_rows(rows), threads, threads * sizeof(double), counted(stream)>>>(
        outer, rows, C, sc, x.data<double>(), out.data<double>(), log);
  else
    softmax_kernel<float><<<grid_rows(rows), threads, threads * sizeof(float), counted(stream)>>>(
        outer, rows, C, sc, x.data<float>(), out.data<float>(), log);
  MVGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace mvgpt::cuda
