#pragma once
// Device-side helpers shared by the .cu files: launch shapes, grid-stride loops, fixed-order block
// reductions (deterministic: the combining order depends only on the block size), and typed loads
// of every dtype as int64 or double.
#include <cuda_runtime.h>

#include <cstdint>

#include <mvgpt/backends/cuda/cuda_check.h>
#include <mvgpt/backends/elementwise_math.h>
#include <mvgpt/tensor/dtype.h>

namespace mvgpt::cuda {

inline constexpr int kThreads = 256;

// Blocks for n elements at kThreads per block; grid-stride loops cover the rest.
inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

// Threads for a block that works on one row of n elements: a power of two in [32, 256].
inline int threads_for_row(int64_t n) {
  int t = 32;
  while (t < 256 && t < n) t *= 2;
  return t;
}

#define MVGPT_GRID_STRIDE(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

template <typename T>
__device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <typename T>
__device__ inline T max_nan(T a, T b) {  // NaN wins, as in PyTorch
  return (b > a || b != b) ? b : a;
}
template <typename T>
__device__ inline T min_nan(T a, T b) {
  return (b < a || b != b) ? b : a;
}

// Combines one value per thread of the block with `f` in a fixed tree; every thread gets the result.
// `shared` holds blockDim.x values; blockDim.x is a power of two. Ends with a barrier, so the buffer
// may be reused right after.
template <typename T, typename F>
__device__ T block_reduce(T v, T* shared, F f) {
  const int tid = threadIdx.x;
  shared[tid] = v;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (tid < w) shared[tid] = f(shared[tid], shared[tid + w]);
    __syncthreads();
  }
  const T r = shared[0];
  __syncthreads();
  return r;
}

struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  template <typename T>
  __device__ T operator()(T a, T b) const { return max_nan(a, b); }
};
struct MinOp {
  template <typename T>
  __device__ T operator()(T a, T b) const { return min_nan(a, b); }
};

// Every dtype read as a number: integers and bool as int64 (exact), floats as double (exact).
struct Number {
  bool is_int;
  int64_t i;
  double d;
};

__device__ inline Number load_number(const void* base, int64_t off, DType dt) {
  switch (dt) {
    case DType::f32: return {false, 0, double(static_cast<const float*>(base)[off])};
    case DType::f64: return {false, 0, static_cast<const double*>(base)[off]};
    case DType::bf16: return {false, 0, double(math::bf16_bits_to_float(static_cast<const uint16_t*>(base)[off]))};
    case DType::i32: return {true, static_cast<const int32_t*>(base)[off], 0};
    case DType::i64: return {true, static_cast<const int64_t*>(base)[off], 0};
    case DType::boolean: return {true, static_cast<const bool*>(base)[off] ? 1 : 0, 0};
  }
  return {true, 0, 0};
}

// Stores n converted as the CPU converts (static_cast; bfloat16 through float; bool is "nonzero").
__device__ inline void store_number(void* base, int64_t off, DType dt, Number n) {
  switch (dt) {
    case DType::f32: static_cast<float*>(base)[off] = n.is_int ? float(n.i) : float(n.d); break;
    case DType::f64: static_cast<double*>(base)[off] = n.is_int ? double(n.i) : n.d; break;
    case DType::bf16:
      static_cast<uint16_t*>(base)[off] = math::float_to_bf16_bits(n.is_int ? float(n.i) : float(n.d));
      break;
    case DType::i32: static_cast<int32_t*>(base)[off] = n.is_int ? int32_t(n.i) : int32_t(n.d); break;
    case DType::i64: static_cast<int64_t*>(base)[off] = n.is_int ? n.i : int64_t(n.d); break;
    case DType::boolean: static_cast<bool*>(base)[off] = n.is_int ? n.i != 0 : n.d != 0; break;
  }
}

}  // namespace mvgpt::cuda
