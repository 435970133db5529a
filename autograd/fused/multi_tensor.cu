// The CUDA kernels of the multi-tensor unit (autograd/fused/multi_tensor.h).
//
// NOTE [ Multi-tensor kernels ]
// A launch covers up to kMaxTensors tensors: their pointers and sizes travel in the kernel's
// parameters, a table kept under the 4 KiB every CUDA version and GPU accepts (PyTorch's
// multi_tensor_apply does the same), so no table is copied to the device and nothing waits. Each
// block takes one chunk of kChunk elements of one tensor, found by walking the table's chunk counts
// (at most kMaxTensors steps). More tensors than a table holds take more launches; the series' model
// has 75 parameters, so its AdamW step is one launch and clipping three (sum, total, scale) where
// clipping took about 460 (a conversion, a square, a one-block sum and an add per 1M-element chunk,
// a multiply and a copy per tensor) and AdamW 75.
//   sum_squares: each block writes its chunk's sum of squares in float64 to its own slot; one block
//   then adds the slots in order: deterministic, no atomics.
//   scale: x = x * T(factor), rounded once, as ops::mul's kernel.
//   adamw: math::adamw_update, the single-tensor kernel's arithmetic, so the bits are those of
//   adamw_step_ (and of the CPU); the table carries each tensor's scalar set (its group's lr and
//   weight decay) as an index into at most kMaxScalarSets sets.
#include <mvgpt/fused/multi_tensor.h>

#include <cstring>
#include <stdexcept>

#include <mvgpt/backends/cuda/cuda_backend_impl.h>
#include <mvgpt/backends/cuda/cuda_kernels.cuh>
#include <mvgpt/backends/ops.h>
#include <mvgpt/fused/adamw_math.h>

namespace mvgpt::fused {
namespace {

using namespace mvgpt::cuda;

constexpr int kMaxTensors = 80;
constexpr int kMaxScalarSets = 4;
constexpr int64_t kChunk = 16384;  // elements per block
constexpr int kBlock = 256;

__host__ __device__ inline int64_t chunks_of(int64_t n) { return (n + kChunk - 1) / kChunk; }

// This block's tensor t in a table of `count` sizes n, and the elements [begin, end) of its chunk.
struct ChunkRange {
  int t;
  int64_t begin, end;
};
__device__ inline ChunkRange block_chunk(const int64_t* n, int count) {
  int t = 0;
  int64_t c = blockIdx.x;
  while (t < count - 1 && c >= chunks_of(n[t])) c -= chunks_of(n[t++]);
  const int64_t begin = c * kChunk;
  return {t, begin, min(n[t], begin + kChunk)};
}

template <typename T>
struct SumTable {
  int count;
  int64_t n[kMaxTensors];
  const T* x[kMaxTensors];
};

template <typename T>
struct ScaleTable {
  int count;
  T factor;
  int64_t n[kMaxTensors];
  T* x[kMaxTensors];
};

template <typename T>
struct AdamWTable {
  int count;
  int64_t n[kMaxTensors];
  T* param[kMaxTensors];
  const T* grad[kMaxTensors];
  T* m[kMaxTensors];
  T* v[kMaxTensors];
  unsigned char set[kMaxTensors];
  math::AdamWScalars<T> scalars[kMaxScalarSets];
};

static_assert(sizeof(AdamWTable<double>) <= 4000 && sizeof(SumTable<double>) <= 4000 &&
              sizeof(ScaleTable<double>) <= 4000, "a launch's table must fit the 4 KiB of kernel parameters");

// partial[base + blockIdx.x] = the sum of squares of the block's chunk, in float64.
template <typename T>
__global__ void __launch_bounds__(kBlock) sum_squares_kernel(SumTable<T> table, double* partial, int64_t base) {
  __shared__ double red[kBlock];
  const ChunkRange r = block_chunk(table.n, table.count);
  double s = 0;
  for (int64_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) {
    const double x = double(table.x[r.t][i]);
    s += x * x;
  }
  s = block_reduce(s, red, SumOp{});
  if (threadIdx.x == 0) partial[base + blockIdx.x] = s;
}

// out[0] = the sum of partial[0, n), each thread adding a fixed stride of slots, then a fixed tree.
__global__ void __launch_bounds__(kBlock) sum_partials_kernel(const double* partial, int64_t n, double* out) {
  __shared__ double red[kBlock];
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
  s = block_reduce(s, red, SumOp{});
  if (threadIdx.x == 0) out[0] = s;
}

template <typename T>
__global__ void __launch_bounds__(kBlock) scale_kernel(ScaleTable<T> table) {
  const ChunkRange r = block_chunk(table.n, table.count);
  T* x = table.x[r.t];
  for (int64_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) x[i] = math::rn_mul(x[i], table.factor);
}

template <typename T>
__global__ void __launch_bounds__(kBlock) adamw_many_kernel(AdamWTable<T> table) {
  const ChunkRange r = block_chunk(table.n, table.count);
  const math::AdamWScalars<T> s = table.scalars[table.set[r.t]];
  T *param = table.param[r.t], *m = table.m[r.t], *v = table.v[r.t];
  const T* grad = table.grad[r.t];
  for (int64_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) {
    T p = param[i], mi = m[i], vi = v[i];
    math::adamw_update(p, grad[i], mi, vi, s);
    param[i] = p;
    m[i] = mi;
    v[i] = vi;
  }
}

// ------------------------------------------------------------------------------------------ host

CudaBackend& backend_of(const Tensor& x) { return static_cast<CudaBackend&>(backend_for(x.device())); }

// Every tensor of a call on one device, contiguous float32 or float64 (the entry points prepare them).
void require_kernel_ready(const Tensor& x, const Device& d, const char* op) {
  require_on(x, d, op);
  if (!x.is_contiguous() || (x.dtype() != DType::f32 && x.dtype() != DType::f64))
    throw std::logic_error(std::string(op) + ": tensors must be contiguous float32 or float64, found " +
                           std::string(dtype_name(x.dtype())) + " (the entry point prepares them)");
}

// Calls launch(table, blocks) for each run of at most kMaxTensors non-empty tensors of dtype T;
// fill(table, i, x) puts tensor x into slot i.
template <typename Table, typename T, typename Item, typename Fill, typename Launch>
void for_each_table(const std::vector<Item>& items, const Tensor& (*tensor_of)(const Item&), Table table, Fill fill,
                    Launch launch) {
  int64_t blocks = 0;
  table.count = 0;
  for (const Item& item : items) {
    const Tensor& x = tensor_of(item);
    if (x.dtype() != dtype_v<T> || x.numel() == 0) continue;
    if (!fill(table, table.count, item)) {  // the table has no room for this item's data: flush first
      launch(table, blocks);
      table.count = 0, blocks = 0;
      if (!fill(table, 0, item)) throw std::logic_error("multi_tensor (cuda): an empty table refused a tensor");
    }
    table.n[table.count++] = x.numel();
    blocks += chunks_of(x.numel());
    if (table.count == kMaxTensors) {
      launch(table, blocks);
      table.count = 0, blocks = 0;
    }
  }
  if (table.count > 0) launch(table, blocks);
}

const Tensor& self(const Tensor& x) { return x; }
const Tensor& param_of(const AdamWSlot& s) { return s.param; }

double sum_squares_cuda(const std::vector<Tensor>& xs) {
  const char* op = "sum_squares (cuda)";
  if (xs.empty()) return 0;
  CudaBackend& be = backend_of(xs[0]);
  int64_t slots = 0;
  for (const Tensor& x : xs) {
    require_kernel_ready(x, xs[0].device(), op);
    slots += chunks_of(x.numel());
  }
  if (slots == 0) return 0;
  cudaStream_t stream = be.activate();
  Tensor partial = be.scratch({slots}, DType::f64);
  int64_t base = 0;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    for_each_table<SumTable<T>, T>(
        xs, self, SumTable<T>{},
        [](SumTable<T>& table, int i, const Tensor& x) {
          table.x[i] = x.data<T>();
          return true;
        },
        [&](const SumTable<T>& table, int64_t blocks) {
          sum_squares_kernel<T><<<unsigned(blocks), kBlock, 0, cuda::counted(stream)>>>(table, partial.data<double>(), base);
          MVGPT_CUDA_CHECK_LAUNCH();
          base += blocks;
        });
  };
  run(float{});
  run(double{});
  Tensor total = be.scratch({}, DType::f64);
  sum_partials_kernel<<<1, kBlock, 0, cuda::counted(stream)>>>(partial.data<double>(), slots, total.data<double>());
  MVGPT_CUDA_CHECK_LAUNCH();
  return ops::to(total, Device::cpu()).item<double>();
}

void scale_cuda(const std::vector<Tensor>& xs, double factor) {
  const char* op = "scale_ (cuda)";
  if (xs.empty()) return;
  CudaBackend& be = backend_of(xs[0]);
  for (const Tensor& x : xs) require_kernel_ready(x, xs[0].device(), op);
  cudaStream_t stream = be.activate();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    ScaleTable<T> table{};
    table.factor = T(factor);
    for_each_table<ScaleTable<T>, T>(
        xs, self, table,
        [](ScaleTable<T>& t, int i, const Tensor& x) {
          t.x[i] = x.data<T>();
          return true;
        },
        [&](const ScaleTable<T>& t, int64_t blocks) {
          scale_kernel<T><<<unsigned(blocks), kBlock, 0, cuda::counted(stream)>>>(t);
          MVGPT_CUDA_CHECK_LAUNCH();
        });
  };
  run(float{});
  run(double{});
}

void adamw_cuda(const std::vector<AdamWSlot>& slots) {
  const char* op = "adamw_step_many_ (cuda)";
  if (slots.empty()) return;
  CudaBackend& be = backend_of(slots[0].param);
  for (const AdamWSlot& s : slots) {
    if (s.rounded.defined()) throw std::logic_error(std::string(op) + ": no rounded copy of the weights on CUDA");
    for (const Tensor* x : {&s.param, &s.grad, &s.m, &s.v}) {
      require_kernel_ready(*x, slots[0].param.device(), op);
      if (x->dtype() != s.param.dtype()) throw std::logic_error(std::string(op) + ": a slot mixes dtypes");
    }
  }
  cudaStream_t stream = be.activate();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    int sets = 0;  // scalar sets in the current table
    for_each_table<AdamWTable<T>, T>(
        slots, param_of, AdamWTable<T>{},
        [&sets](AdamWTable<T>& t, int i, const AdamWSlot& s) {
          if (i == 0) sets = 0;
          const math::AdamWScalars<T> sc = math::adamw_scalars<T>(s.hp);
          int k = 0;
          while (k < sets && std::memcmp(&t.scalars[k], &sc, sizeof sc) != 0) ++k;
          if (k == sets) {
            if (sets == kMaxScalarSets) return false;
            t.scalars[sets++] = sc;
          }
          t.set[i] = static_cast<unsigned char>(k);
          t.param[i] = s.param.data<T>(), t.grad[i] = s.grad.data<T>(), t.m[i] = s.m.data<T>(), t.v[i] = s.v.data<T>();
          return true;
        },
        [&](const AdamWTable<T>& t, int64_t blocks) {
          adamw_many_kernel<T><<<unsigned(blocks), kBlock, 0, cuda::counted(stream)>>>(t);
          MVGPT_CUDA_CHECK_LAUNCH();
        });
  };
  run(float{});
  run(double{});
}

}  // namespace

MultiTensorKernels multi_tensor_cuda_kernels() { return {sum_squares_cuda, scale_cuda, adamw_cuda}; }

}  // namespace mvgpt::fused
