// Elementwise kernels: strided copies with dtype conversion, fill, arange, Philox random fills,
// unary/binary/where over broadcast views (stride 0). One thread per element
// in grid-stride loops; the math is backends/elementwise_math.h, shared with a host test.
#include <stdexcept>
#include <string>

#include <mvgpt/backends/cuda/cuda_backend_impl.h>
#include <mvgpt/backends/cuda/cuda_kernels.cuh>
#include <mvgpt/backends/cuda/strided_indexer.h>
#include <mvgpt/tensor/philox.h>

namespace mvgpt::cuda {
namespace {

// Any dtype to any dtype; operand 0 is dst, 1 is src.
__global__ void convert_kernel(StridedIndexer<2> ix, int64_t n, const void* src, DType st, void* dst, DType dt) {
  MVGPT_GRID_STRIDE(i, n) {
    int64_t off[2];
    ix.offsets(i, off);
    store_number(dst, off[0], dt, load_number(src, off[1], st));
  }
}

// Same dtype: elements moved as raw words of their size.
template <typename W>
__global__ void copy_words_kernel(StridedIndexer<2> ix, int64_t n, const W* src, W* dst) {
  MVGPT_GRID_STRIDE(i, n) {
    int64_t off[2];
    ix.offsets(i, off);
    dst[off[0]] = src[off[1]];
  }
}

template <typename W>
__global__ void fill_words_kernel(StridedIndexer<1> ix, int64_t n, W* dst, W value) {
  MVGPT_GRID_STRIDE(i, n) {
    int64_t off[1];
    ix.offsets(i, off);
    dst[off[0]] = value;
  }
}

__global__ void arange_kernel(int64_t n, void* dst, DType dt, double start, double step) {
  MVGPT_GRID_STRIDE(i, n) { store_number(dst, i, dt, Number{false, 0, start + double(i) * step}); }
}

// Element i is the (offset + i)-th draw of the stream (seed): the same numbers as the CPU's.
template <typename T>
__global__ void random_kernel(int64_t n, T* dst, bool uniform, uint64_t seed, uint64_t offset) {
  MVGPT_GRID_STRIDE(i, n) {
    const uint64_t k = offset + uint64_t(i);
    if constexpr (std::is_same_v<T, float>) {
      if (uniform) {
        const float u = float(philox::uniform(seed, k));
        dst[i] = u < 1.0f ? u : 0x1.fffffep-1f;  // rounding to float must not reach 1
      } else {
        dst[i] = float(philox::normal(seed, k));
      }
    } else {
      dst[i] = uniform ? philox::uniform(seed, k) : philox::normal(seed, k);
    }
  }
}

template <typename T>
__global__ void unary_kernel(StridedIndexer<2> ix, int64_t n, UnaryOp op, const T* x, T* out, T s) {
  MVGPT_GRID_STRIDE(i, n) {
    int64_t off[2];
    ix.offsets(i, off);
    if constexpr (std::is_floating_point_v<T>) out[off[0]] = math::unary_float(op, x[off[1]], s);
    else out[off[0]] = math::unary_int(op, x[off[1]], s);
  }
}

// out = g * f'(x): the fused backward of a unary op (floats only).
template <typename T>
__global__ void unary_backward_kernel(StridedIndexer<3> ix, int64_t n, UnaryOp op, const T* x, const T* g, T* out,
                                      T s) {
  MVGPT_GRID_STRIDE(i, n) {
    int64_t off[3];
    ix.offsets(i, off);
    out[off[0]] = g[off[2]] * math::unary_derivative(op, x[off[1]], s);
  }
}

template <typename T>
__global__ void arith_kernel(StridedIndexer<3> ix, int64_t n, BinaryOp op, const T* a, const T* b, T* out) {
  MVGPT_GRID_STRIDE(i, n) {
    int64_t off[3];
    ix.offsets(i, off);
    out[off[0]] = math::binary_arith(op, a[off[1]], b[off[2]]);
  }
}

template <typename T>
__global__ void compare_kernel(StridedIndexer<3> ix, int64_t n, BinaryOp op, const T* a, const T* b, bool* out) {
  MVGPT_GRID_STRIDE(i, n) {
    int64_t off[3];
    ix.offsets(i, off);
    out[off[0]] = math::binary_compare(op, a[off[1]], b[off[2]]);
  }
}

// Selection only moves elements: raw words of the element size.
template <typename W>
__global__ void where_kernel(StridedIndexer<4> ix, int64_t n, const bool* cond, const W* a, const W* b, W* out) {
  MVGPT_GRID_STRIDE(i, n) {
    int64_t off[4];
    ix.offsets(i, off);
    out[off[0]] = cond[off[1]] ? a[off[2]] : b[off[3]];
  }
}

// Calls f with a value of the unsigned word type of `size` bytes.
template <typename F>
void dispatch_word(size_t size, F&& f) {
  switch (size) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    case 8: return f(uint64_t{});
    default: throw std::logic_error("CudaBackend: element size " + std::to_string(size) + " has no word type");
  }
}

[[noreturn]] void unsupported(const char* op, const std::string& what, DType dt) {
  throw std::logic_error(std::string("CudaBackend::") + op + ": " + what + " is not implemented for " +
                         std::string(dtype_name(dt)));
}

}  // namespace

void CudaBackend::copy(const Tensor& src, const Tensor& dst) {
  require_on(src, device(), "CudaBackend::copy");
  require_on(dst, device(), "CudaBackend::copy");
  const int64_t n = dst.numel();
  if (n == 0) return;
  cudaStream_t stream = activate();
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    MVGPT_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const auto ix = make_indexer<2>(dst.shape(), {&dst.strides(), &src.strides()});
  if (src.dtype() == dst.dtype()) {
    dispatch_word(dtype_size(dst.dtype()), [&](auto word) {
      using W = decltype(word);
      copy_words_kernel<W><<<blocks_for(n), kThreads, 0, counted(stream)>>>(ix, n, static_cast<const W*>(src.raw_data()),
                                                                   static_cast<W*>(dst.raw_data()));
    });
  } else {
    convert_kernel<<<blocks_for(n), kThreads, 0, counted(stream)>>>(ix, n, src.raw_data(), src.dtype(), dst.raw_data(),
                                                           dst.dtype());
  }
  MVGPT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::fill(const Tensor& dst, double value) {
  require_on(dst, device(), "CudaBackend::fill");
  const int64_t n = dst.numel();
  if (n == 0) return;
  cudaStream_t stream = activate();
  // The value converted on the host exactly as the CPU converts it, then written as raw words.
  uint64_t bits = 0;
  dispatch_dtype(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T v;
    if constexpr (std::is_same_v<T, bfloat16>) v = bfloat16(static_cast<float>(value));
    else if constexpr (std::is_same_v<T, bool>) v = value != 0;
    else v = static_cast<T>(value);
    std::memcpy(&bits, &v, sizeof v);
  });
  const auto ix = make_indexer<1>(dst.shape(), {&dst.strides()});
  dispatch_word(dtype_size(dst.dtype()), [&](auto word) {
    using W = decltype(word);
    W w;
    std::memcpy(&w, &bits, sizeof w);
    fill_words_kernel<W><<<blocks_for(n), kThreads, 0, counted(stream)>>>(ix, n, static_cast<W*>(dst.raw_data()), w);
  });
  MVGPT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::arange(const Tensor& dst, double start, double step) {
  require_on(dst, device(), "CudaBackend::arange");
  if (!dst.is_contiguous()) throw std::logic_error("CudaBackend::arange: dst must be contiguous");
  const int64_t n = dst.numel();
  if (n == 0) return;
  cudaStream_t stream = activate();
  arange_kernel<<<blocks_for(n), kThreads, 0, counted(stream)>>>(n, dst.raw_data(), dst.dtype(), start, step);
  MVGPT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::random(const Tensor& dst, RandomKind kind, uint64_t seed, uint64_t offset) {
  require_on(dst, device(), "CudaBackend::random");
  if (!dst.is_contiguous()) throw std::logic_error("CudaBackend::random: dst must be contiguous");
  const int64_t n = dst.numel();
  if (n == 0) return;
  cudaStream_t stream = activate();
  const bool uniform = kind == RandomKind::uniform;
  switch (dst.dtype()) {
    case DType::f32:
      random_kernel<float><<<blocks_for(n), kThreads, 0, counted(stream)>>>(n, dst.data<float>(), uniform, seed, offset);
      break;
    case DType::f64:
      random_kernel<double><<<blocks_for(n), kThreads, 0, counted(stream)>>>(n, dst.data<double>(), uniform, seed, offset);
      break;
    default:
      throw std::logic_error("CudaBackend::random: expects float32 or float64, found " +
                             std::string(dtype_name(dst.dtype())));
  }
  MVGPT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::unary(UnaryOp op, const Tensor& x, const Tensor& out, double scalar) {
  require_on(x, device(), "CudaBackend::unary");
  require_on(out, device(), "CudaBackend::unary");
  const int64_t n = out.numel();
  if (n == 0) return;
  cudaStream_t stream = activate();
  const auto ix = make_indexer<2>(out.shape(), {&out.strides(), &x.strides()});
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    unary_kernel<T><<<blocks_for(n), kThreads, 0, counted(stream)>>>(ix, n, op, static_cast<const T*>(x.raw_data()),
                                                            static_cast<T*>(out.raw_data()), static_cast<T>(scalar));
  };
  switch (x.dtype()) {
    case DType::f32: launch(float{}); break;
    case DType::f64: launch(double{}); break;
    case DType::i32:
    case DType::i64:
      if (!math::unary_int_supported(op)) unsupported("unary", unary_op_name(op), x.dtype());
      if (x.dtype() == DType::i32) launch(int32_t{});
      else launch(int64_t{});
      break;
    default: unsupported("unary", unary_op_name(op), x.dtype());
  }
  MVGPT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::unary_backward(UnaryOp op, const Tensor& x, const Tensor& grad, const Tensor& out,
                                 double scalar) {
  for (const Tensor* t : {&x, &grad, &out}) require_on(*t, device(), "CudaBackend::unary_backward");
  const int64_t n = out.numel();
  if (n == 0) return;
  cudaStream_t stream = activate();
  const auto ix = make_indexer<3>(out.shape(), {&out.strides(), &x.strides(), &grad.strides()});
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    unary_backward_kernel<T><<<blocks_for(n), kThreads, 0, counted(stream)>>>(
        ix, n, op, static_cast<const T*>(x.raw_data()), static_cast<const T*>(grad.raw_data()),
        static_cast<T*>(out.raw_data()), static_cast<T>(scalar));
  };
  switch (x.dtype()) {
    case DType::f32: launch(float{}); break;
    case DType::f64: launch(double{}); break;
    default: unsupported("unary_backward", unary_op_name(op), x.dtype());
  }
  MVGPT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  for (const Tensor* t : {&a, &b, &out}) require_on(*t, device(), "CudaBackend::binary");
  const int64_t n = out.numel();
  if (n == 0) return;
  cudaStream_t stream = activate();
  const auto ix = make_indexer<3>(out.shape(), {&out.strides(), &a.strides(), &b.strides()});
  const DType dt = a.dtype();
  if (is_comparison(op)) {
    auto launch = [&](auto tag) {
      using T = decltype(tag);
      compare_kernel<T><<<blocks_for(n), kThreads, 0, counted(stream)>>>(ix, n, op, static_cast<const T*>(a.raw_data()),
                                                                static_cast<const T*>(b.raw_data()),
                                                                static_cast<bool*>(out.raw_data()));
    };
    switch (dt) {
      case DType::f32: launch(float{}); break;
      case DType::f64: launch(double{}); break;
      case DType::i32: launch(int32_t{}); break;
      case DType::i64: launch(int64_t{}); break;
      case DType::boolean: launch(bool{}); break;
      default: unsupported("binary", binary_op_name(op), dt);
    }
  } else {
    auto launch = [&](auto tag) {
      using T = decltype(tag);
      arith_kernel<T><<<blocks_for(n), kThreads, 0, counted(stream)>>>(ix, n, op, static_cast<const T*>(a.raw_data()),
                                                              static_cast<const T*>(b.raw_data()),
                                                              static_cast<T*>(out.raw_data()));
    };
    const bool int_ok = op != BinaryOp::div;
    switch (dt) {
      case DType::f32: launch(float{}); break;
      case DType::f64: launch(double{}); break;
      case DType::i32:
        if (!int_ok) unsupported("binary", binary_op_name(op), dt);
        launch(int32_t{});
        break;
      case DType::i64:
        if (!int_ok) unsupported("binary", binary_op_name(op), dt);
        launch(int64_t{});
        break;
      default: unsupported("binary", binary_op_name(op), dt);
    }
  }
  MVGPT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  for (const Tensor* t : {&cond, &a, &b, &out}) require_on(*t, device(), "CudaBackend::where");
  const int64_t n = out.numel();
  if (n == 0) return;
  cudaStream_t stream = activate();
  const auto ix = make_indexer<4>(out.shape(), {&out.strides(), &cond.strides(), &a.strides(), &b.strides()});
  dispatch_word(dtype_size(out.dtype()), [&](auto word) {
    using W = decltype(word);
    where_kernel<W><<<blocks_for(n), kThreads, 0, counted(stream)>>>(ix, n, static_cast<const bool*>(cond.raw_data()),
                                                            static_cast<const W*>(a.raw_data()),
                                                            static_cast<const W*>(b.raw_data()),
                                                            static_cast<W*>(out.raw_data()));
  });
  MVGPT_CUDA_CHECK_LAUNCH();
}

}  // namespace mvgpt::cuda
