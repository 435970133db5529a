// Data movement on the CPU: strided copies with dtype conversion, fill, arange and Philox random fills.
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include <mvgpt/backends/cpu/cpu_backend.h>
#include <mvgpt/backends/cpu/fused_common.h>  // round_to_bf16
#include <mvgpt/backends/cpu/strided.h>
#include <mvgpt/tensor/philox.h>

namespace mvgpt::cpu {
namespace {

// Value conversion between any two dtypes: bfloat16 goes through float, bool is "nonzero".
template <typename D, typename S>
inline D convert(S v) {
  if constexpr (std::is_same_v<D, S>) return v;
  else if constexpr (std::is_same_v<S, bfloat16>) return convert<D>(float(v));
  else if constexpr (std::is_same_v<D, bfloat16>) return bfloat16(static_cast<float>(v));
  else if constexpr (std::is_same_v<D, bool>) return v != S(0);
  else return static_cast<D>(v);
}

// Bytes per parallel chunk of a plain memcpy.
constexpr int64_t kCopyGrainBytes = int64_t(1) << 20;

void parallel_memcpy(void* dst, const void* src, int64_t nbytes) {
  parallel_for(nbytes, kCopyGrainBytes, [&](int64_t b, int64_t e) {
    std::memcpy(static_cast<char*>(dst) + b, static_cast<const char*>(src) + b, size_t(e - b));
  });
}

}  // namespace

void CpuBackend::copy(const Tensor& src, const Tensor& dst) {
  if (src.numel() == 0) return;
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    parallel_memcpy(dst.raw_data(), src.raw_data(), int64_t(dst.nbytes()));
    return;
  }
  dispatch_dtype(src.dtype(), [&](auto stag) {
    dispatch_dtype(dst.dtype(), [&](auto dtag) {
      using S = decltype(stag);
      using D = decltype(dtag);
      const S* sp = static_cast<const S*>(src.raw_data());
      D* dp = static_cast<D*>(dst.raw_data());
      auto l = make_layout<2>(dst.shape(), {&dst.strides(), &src.strides()});
      parallel_runs(l, kElementwiseGrain, [&](const int64_t* off, int64_t n, const int64_t* s) {
        D* o = dp + off[0];
        const S* a = sp + off[1];
        if (s[0] == 1 && s[1] == 1) {
          // float32 -> bfloat16 runs eight at a time (a product's operand under --precision bf16).
          if constexpr (std::is_same_v<S, float> && std::is_same_v<D, bfloat16>) fused::round_to_bf16(a, n, o, fused::Ahead::both);
          else for (int64_t i = 0; i < n; ++i) o[i] = convert<D>(a[i]);
        } else if (s[0] == 1 && s[1] == 0) {
          const D v = convert<D>(*a);
          for (int64_t i = 0; i < n; ++i) o[i] = v;
        } else {
          for (int64_t i = 0; i < n; ++i) o[i * s[0]] = convert<D>(a[i * s[1]]);
        }
      });
    });
  });
}

void CpuBackend::copy_between_devices(const Tensor& src, const Tensor& dst) {
  // The CPU backend only ever sees host memory on both sides; other devices implement their own.
  if (!src.device().is_cpu() || !dst.device().is_cpu())
    throw std::logic_error("CpuBackend::copy_between_devices: " + src.device().str() + " -> " + dst.device().str() +
                           " must go through that device's backend");
  if (src.dtype() != dst.dtype() || !src.is_contiguous() || !dst.is_contiguous() || src.numel() != dst.numel())
    throw std::logic_error("CpuBackend::copy_between_devices: expects contiguous tensors of one dtype and size");
  if (src.numel() > 0) parallel_memcpy(dst.raw_data(), src.raw_data(), int64_t(dst.nbytes()));
}

void CpuBackend::fill(const Tensor& dst, double value) {
  if (dst.numel() == 0) return;
  dispatch_dtype(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T v = convert<T>(value);
    T* dp = static_cast<T*>(dst.raw_data());
    auto l = make_layout<1>(dst.shape(), {&dst.strides()});
    parallel_runs(l, kElementwiseGrain, [&](const int64_t* off, int64_t n, const int64_t* s) {
      T* o = dp + off[0];
      if (s[0] == 1) {
        for (int64_t i = 0; i < n; ++i) o[i] = v;
      } else {
        for (int64_t i = 0; i < n; ++i) o[i * s[0]] = v;
      }
    });
  });
}

void CpuBackend::arange(const Tensor& dst, double start, double step) {
  dispatch_dtype(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* dp = static_cast<T*>(dst.raw_data());
    parallel_for(dst.numel(), kElementwiseGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dp[i] = convert<T>(start + double(i) * step);
    });
  });
}

void CpuBackend::random(const Tensor& dst, RandomKind kind, uint64_t seed, uint64_t offset) {
  // Element i depends only on (seed, offset + i): the same tensor for any thread count or device.
  auto fill_with = [&](auto* p, auto draw) {
    parallel_for(dst.numel(), 4096, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = draw(offset + uint64_t(i));
    });
  };
  const bool uniform = kind == RandomKind::uniform;
  switch (dst.dtype()) {
    case DType::f64:
      if (uniform) fill_with(dst.data<double>(), [&](uint64_t i) { return philox::uniform(seed, i); });
      else fill_with(dst.data<double>(), [&](uint64_t i) { return philox::normal(seed, i); });
      return;
    case DType::f32:
      if (uniform) {
        fill_with(dst.data<float>(), [&](uint64_t i) {
          float u = float(philox::uniform(seed, i));
          return u < 1.0f ? u : 0x1.fffffep-1f;  // rounding to float must not reach 1
        });
      } else {
        fill_with(dst.data<float>(), [&](uint64_t i) { return float(philox::normal(seed, i)); });
      }
      return;
    default:
      throw std::logic_error("CpuBackend::random: expects float32 or float64, found " +
                             std::string(dtype_name(dst.dtype())));
  }
}

}  // namespace mvgpt::cpu
