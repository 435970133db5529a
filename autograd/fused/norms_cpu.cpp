// The CPU kernels of layer norm and RMS norm (autograd/fused/norms.h) over the last axis of a
// contiguous (N, C) input, forward and backward. One row per task; the weight/bias gradients are
// sums over rows, computed as partial sums over fixed row chunks (independent of the thread count)
// added in chunk order, so they are deterministic.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include <mvgpt/backends/cpu/fused_common.h>
#include <mvgpt/backends/cpu/parallel.h>
#include <mvgpt/fused/norms.h>

namespace mvgpt::fused {
namespace {

using cpu::parallel_for;
namespace vec = cpu::fused;


// out[i] = float(x[i]) for a row of n bfloat16 (exact).
void widen_row(const bfloat16* x, int64_t n, float* out) {
  int64_t i = 0;
#ifdef __AVX512F__
  for (; i + 16 <= n; i += 16) cpu::store16(out + i, vec::load16_widened(x + i));
#endif
  for (; i + 8 <= n; i += 8) vec::store8(out + i, vec::load8_widened(x + i));
  for (; i < n; ++i) out[i] = float(x[i]);
}

// Rows per task: enough work per task to amortise scheduling (~16k elements).
int64_t row_grain(int64_t C) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)); }

// The row chunks of a parameter-gradient reduction: a function of N only, never of the thread count.
int64_t chunk_rows(int64_t N, int64_t C) { return std::max<int64_t>(row_grain(C), (N + 63) / 64); }

// Bytes ahead of a row that its pass fetches at its start: the rows about 4 KB on (NOTE
// [ Prefetching ahead ] in backends/cpu/vec_math.h; on the 2-core AMX Xeon the norms' passes waited
// on memory without it).
template <typename T>
int64_t rows_ahead_bytes(int64_t C) {
  const int64_t row = C * int64_t(sizeof(T));
  return row * std::max<int64_t>(1, (4096 + row - 1) / std::max<int64_t>(row, 1));
}

// One row's pieces of arithmetic, each compiled once (noipa: neither inlined nor cloned) and called
// by every kernel that needs it, and this file is compiled without FMA contraction (CMakeLists.txt):
// the float32 kernels and their variants for products (a rounded y, a bfloat16 dy) then give the
// same bits on every CPU, as NOTE [ Norms made for products ] promises. Inlined into each variant,
// the copies were contracted and vectorised differently on the 2-core AMD EPYC Zen 4 (the rounded
// variant's rstd one float32 ulp from the float32 kernel's for rows of 21).

// The row's mean and 1 / sqrt(variance + eps); two passes (the mean, then the centred sum of squares)
// avoid the cancellation of E[x^2] - E[x]^2.
template <typename T>
struct Moments {
  T mu, rs;
};
template <typename T>
[[gnu::noipa]] Moments<T> row_moments(const T* xr, int64_t C, T eps) {
  const T mu = vec::row_sum(xr, C) / T(C);
  const T var = vec::row_sq_centred(xr, mu, C) / T(C);
  return {mu, T(1) / std::sqrt(var + eps)};
}

// yr = (xr - mu) * rs * w + b, w and b each optional.
template <typename T>
[[gnu::noipa]] void affine_row(const T* xr, T mu, T rs, const T* wp, const T* bp, int64_t C, T* yr) {
  if (wp && bp)
    for (int64_t i = 0; i < C; ++i) yr[i] = (xr[i] - mu) * rs * wp[i] + bp[i];
  else if (wp)
    for (int64_t i = 0; i < C; ++i) yr[i] = (xr[i] - mu) * rs * wp[i];
  else if (bp)
    for (int64_t i = 0; i < C; ++i) yr[i] = (xr[i] - mu) * rs + bp[i];
  else
    for (int64_t i = 0; i < C; ++i) yr[i] = (xr[i] - mu) * rs;
}

// NOTE [ A norm's backward in two passes ]
// The model's case of a row's backward (an affine norm, every gradient wanted, rows of whole
// sixteen-float vectors) in two passes where layer_norm_row_backward's loops take six: the same
// expressions (this file has no FMA contraction), and the sums of g and g (x - mu) in vsum's two
// accumulators in its order (the first eight floats of each sixteen in one, the next eight in the
// other), so the same bits: the float32 weights of `pretrain --rope --steps 6 --precision fp32` were
// byte for byte those of the six passes. A bfloat16 dy is widened as it is read (exact). On the 2-core
// AMD EPYC Zen 4 (two runs of three alternations, a CI run beside them): BM_LayerNormBackward/bf16:0
// 702-745 us against 869-949, bf16:1 (a bfloat16 dy, the model's) 781-783 against 882-898.
bool two_pass_backward(const float* wp, const float* dw, const float* db, const float* dxr, int64_t C) {
  return wp && dw && db && dxr && C % (2 * vec::kVec) == 0;
}
template <typename DY>
[[gnu::noipa]] void layer_norm_row_backward_two_pass(const DY* dyr, const float* xr, const float* wp, float mu,
                                                     float rs, int64_t C, float* g, float* dw, float* db, float* dxr) {
  using vec::f32x8;
  f32x8 sum0 = {}, sum1 = {}, dot0 = {}, dot1 = {};
  auto eight = [&](int64_t i, f32x8& sum, f32x8& dot) {
    const f32x8 dy = vec::as_float8(dyr + i), xc = vec::load8(xr + i) - mu;
    vec::store8(dw + i, vec::load8(dw + i) + dy * xc * rs);
    vec::store8(db + i, vec::load8(db + i) + dy);
    const f32x8 gi = dy * vec::load8(wp + i);
    vec::store8(g + i, gi);
    sum += gi;
    dot += gi * xc;
  };
  for (int64_t i = 0; i < C; i += 2 * vec::kVec) {
    eight(i, sum0, dot0);
    eight(i + vec::kVec, sum1, dot1);
  }
  const float g_mean = (vec::hsum8(sum0 + sum1) + 0.0f) / float(C);
  const float gx_mean = (vec::hsum8(dot0 + dot1) + 0.0f) * rs / float(C);
  for (int64_t i = 0; i < C; i += vec::kVec)
    vec::store8(dxr + i, rs * (vec::load8(g + i) - g_mean - (vec::load8(xr + i) - mu) * rs * gx_mean));
}

// One row of the backward (the formula above layer_norm_rows_backward): dw and db (each optional)
// accumulate the row's terms, dxr (optional) gets its input gradient; g is C of scratch.
template <typename T>
[[gnu::noipa]] void layer_norm_row_backward(const T* dyr, const T* xr, const T* wp, T mu, T rs, int64_t C, T* g,
                                            T* dw, T* db, T* dxr) {
  if constexpr (std::is_same_v<T, float>)
    if (two_pass_backward(wp, dw, db, dxr, C)) return layer_norm_row_backward_two_pass(dyr, xr, wp, mu, rs, C, g, dw, db, dxr);
  if (dw)
    for (int64_t i = 0; i < C; ++i) dw[i] += dyr[i] * (xr[i] - mu) * rs;
  if (db)
    for (int64_t i = 0; i < C; ++i) db[i] += dyr[i];
  if (!dxr) return;
  if (wp)
    for (int64_t i = 0; i < C; ++i) g[i] = dyr[i] * wp[i];
  else
    for (int64_t i = 0; i < C; ++i) g[i] = dyr[i];
  const T g_mean = vec::row_sum(g, C) / T(C);
  const T gx_mean = vec::row_dot_centred(g, xr, mu, C) * rs / T(C);
  for (int64_t i = 0; i < C; ++i) dxr[i] = rs * (g[i] - g_mean - (xr[i] - mu) * rs * gx_mean);
}

// Y: T, or bfloat16 for float32 rows (NOTE [ Norms made for products ] in norms.h): each row made in
// float32 as for a float32 y, then rounded as ops::to rounds (fused::round_to_bf16).
template <typename T, typename Y = T>
void layer_norm_rows(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                        const Tensor& mean, const Tensor& rstd) {
  constexpr bool rounded = !std::is_same_v<Y, T>;
  static_assert(!rounded || (std::is_same_v<T, float> && std::is_same_v<Y, bfloat16>));
  const int64_t C = x.size(-1), N = rstd.numel();  // rows counted by rstd: x may have C = 0
  const T* xp = x.data<T>();
  const T* wp = weight ? weight.data<T>() : nullptr;
  const T* bp = bias ? bias.data<T>() : nullptr;
  Y* yp = y.data<Y>();
  T* mp = mean.data<T>();
  T* rp = rstd.data<T>();
  const int64_t ahead = rows_ahead_bytes<T>(C), row_bytes = C * int64_t(sizeof(T));
  parallel_for(N, row_grain(C), [&](int64_t r0, int64_t r1) {
    std::vector<T> row(rounded ? size_t(C) : 0);
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = xp + r * C;
      T* yr;
      if constexpr (rounded) yr = row.data();
      else yr = yp + r * C;
      cpu::prefetch_lines(xr, ahead, row_bytes);
      cpu::prefetch_lines(yp + r * C, rows_ahead_bytes<Y>(C), C * int64_t(sizeof(Y)), /*for_write=*/true);
      const auto [mu, rs] = row_moments(xr, C, T(eps));
      mp[r] = mu;
      rp[r] = rs;
#ifdef __AVX512F__
      if constexpr (rounded) {
        // The affine rows sixteen at a time, rounded as stored: affine_row's expression, uncontracted
        // as it is (the tests compare the bits with the float32 kernel's rows rounded).
        if (wp && bp && C % 16 == 0) {
          const cpu::f32x16 muv = cpu::splat_as<cpu::f32x16>(mu), rsv = cpu::splat_as<cpu::f32x16>(rs);
          for (int64_t i = 0; i < C; i += 16)
            vec::store16_rounded(yp + r * C + i, (cpu::load16(xr + i) - muv) * rsv * cpu::load16(wp + i) + cpu::load16(bp + i));
          continue;
        }
      }
#endif
      affine_row(xr, mu, rs, wp, bp, C, yr);
      if constexpr (rounded) vec::round_to_bf16(yr, C, yp + r * C);
    }
  });
}

// Sums per-chunk partials (nchunks, C) in chunk order into out (C), in T.
template <typename T>
void reduce_chunks(const std::vector<T>& partial, int64_t nchunks, int64_t C, T* out) {
  for (int64_t i = 0; i < C; ++i) out[i] = 0;
  for (int64_t c = 0; c < nchunks; ++c) {
    const T* p = partial.data() + c * C;
    for (int64_t i = 0; i < C; ++i) out[i] += p[i];
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w, xhat = (x - mean) * rstd;
// dweight = sum_rows dy * xhat, dbias = sum_rows dy.
// DY: T, or bfloat16 for float32 rows (the gradient of a norm made for a product): each row of dy
// widened first (exact), so the values are those of the float32 kernel on the widened dy.
template <typename T, typename DY = T>
void layer_norm_rows_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                              const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias) {
  constexpr bool widened = !std::is_same_v<DY, T>;
  static_assert(!widened || (std::is_same_v<T, float> && std::is_same_v<DY, bfloat16>));
  const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
  const DY* dyp = dy.data<DY>();
  const T* xp = x.data<T>();
  const T* wp = weight ? weight.data<T>() : nullptr;
  const T* mp = mean.data<T>();
  const T* rp = rstd.data<T>();
  T* dxp = dx ? dx.data<T>() : nullptr;
  const int64_t chunk = chunk_rows(N, C);
  const int64_t nchunks = N ? (N + chunk - 1) / chunk : 0;
  std::vector<T> dw_part(dweight ? size_t(nchunks * C) : 0, T(0));
  std::vector<T> db_part(dbias ? size_t(nchunks * C) : 0, T(0));
  const int64_t ahead = rows_ahead_bytes<T>(C), row_bytes = C * int64_t(sizeof(T));
  parallel_for(nchunks, 1, [&](int64_t c0, int64_t c1) {
    std::vector<T> g(static_cast<size_t>(C)), dy_row(widened ? size_t(C) : 0);
    for (int64_t c = c0; c < c1; ++c) {
      T* dw = dweight ? dw_part.data() + c * C : nullptr;
      T* db = dbias ? db_part.data() + c * C : nullptr;
      for (int64_t r = c * chunk; r < std::min(N, (c + 1) * chunk); ++r) {
        const T* xr = xp + r * C;
        cpu::prefetch_lines(xr, ahead, row_bytes);
        cpu::prefetch_lines(dyp + r * C, rows_ahead_bytes<DY>(C), C * int64_t(sizeof(DY)));
        if (dxp) cpu::prefetch_lines(dxp + r * C, ahead, row_bytes, /*for_write=*/true);
        if constexpr (widened)  // dy read as it lies (NOTE [ A norm's backward in two passes ])
          if (two_pass_backward(wp, dw, db, dxp, C)) {
            layer_norm_row_backward_two_pass(dyp + r * C, xr, wp, mp[r], rp[r], C, g.data(), dw, db, dxp + r * C);
            continue;
          }
        const T* dyr;
        if constexpr (widened) {
          widen_row(dyp + r * C, C, dy_row.data());
          dyr = dy_row.data();
        } else {
          dyr = dyp + r * C;
        }
        layer_norm_row_backward(dyr, xr, wp, mp[r], rp[r], C, g.data(), dw, db, dxp ? dxp + r * C : nullptr);
      }
    }
  });
  if (dweight) reduce_chunks(dw_part, nchunks, C, dweight.data<T>());
  if (dbias) reduce_chunks(db_part, nchunks, C, dbias.data<T>());
}

template <typename T>
void rms_norm_rows(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd) {
  const int64_t C = x.size(-1), N = rstd.numel();
  const T* xp = x.data<T>();
  const T* wp = weight ? weight.data<T>() : nullptr;
  T* yp = y.data<T>();
  T* rp = rstd.data<T>();
  parallel_for(N, row_grain(C), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = xp + r * C;
      T* yr = yp + r * C;
      const T ms = vec::row_dot(xr, xr, C) / T(C);
      const T rs = T(1) / std::sqrt(ms + T(eps));
      rp[r] = rs;
      if (wp)
        for (int64_t i = 0; i < C; ++i) yr[i] = xr[i] * rs * wp[i];
      else
        for (int64_t i = 0; i < C; ++i) yr[i] = xr[i] * rs;
    }
  });
}

// y = x * r * w with r = (mean(x^2) + eps)^(-1/2): dx = r * g - x * r^3 * mean(g * x), g = dy * w;
// dweight = sum_rows dy * x * r.
template <typename T>
void rms_norm_rows_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                            const Tensor& dx, const Tensor& dweight) {
  const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
  const T* dyp = dy.data<T>();
  const T* xp = x.data<T>();
  const T* wp = weight ? weight.data<T>() : nullptr;
  const T* rp = rstd.data<T>();
  T* dxp = dx ? dx.data<T>() : nullptr;
  const int64_t chunk = chunk_rows(N, C);
  const int64_t nchunks = N ? (N + chunk - 1) / chunk : 0;
  std::vector<T> dw_part(dweight ? size_t(nchunks * C) : 0, T(0));
  parallel_for(nchunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      T* dw = dweight ? dw_part.data() + c * C : nullptr;
      for (int64_t r = c * chunk; r < std::min(N, (c + 1) * chunk); ++r) {
        const T* xr = xp + r * C;
        const T* dyr = dyp + r * C;
        const T rs = rp[r];
        if (dw)
          for (int64_t i = 0; i < C; ++i) dw[i] += dyr[i] * xr[i] * rs;
        if (!dxp) continue;
        const T gx_mean =
            (wp ? vec::row_dot3(dyr, wp, xr, C) : vec::row_dot(dyr, xr, C)) /
            T(C);
        const T k = rs * rs * rs * gx_mean;
        T* dxr = dxp + r * C;
        if (wp)
          for (int64_t i = 0; i < C; ++i) dxr[i] = rs * dyr[i] * wp[i] - xr[i] * k;
        else
          for (int64_t i = 0; i < C; ++i) dxr[i] = rs * dyr[i] - xr[i] * k;
      }
    }
  });
  if (dweight) reduce_chunks(dw_part, nchunks, C, dweight.data<T>());
}

// Checks the layout contract shared by the norm kernels; all tensors have x's dtype.
void check_norm_args(const char* op, const Tensor& x, std::initializer_list<const Tensor*> others) {
  vec::require_float(x, op, "x");
  vec::require_contiguous(x, op, "x");
  for (const Tensor* t : others) {
    if (!t->defined()) continue;
    vec::require_contiguous(*t, op, "every tensor");
    if (t->dtype() != x.dtype()) throw std::logic_error(std::string(op) + ": mixed dtypes reached the kernel");
  }
}

}  // namespace

NormKernels norms_cpu_kernels() {
  NormKernels k;
  k.layer_norm = [](const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                    const Tensor& mean, const Tensor& rstd) {
    const bool rounded = x.dtype() == DType::f32 && y.dtype() == DType::bf16;  // NOTE [ Norms made for products ]
    check_norm_args("layer_norm (cpu)", x, {&weight, &bias, &mean, &rstd});
    if (rounded) vec::require_contiguous(y, "layer_norm (cpu)", "y");
    else check_norm_args("layer_norm (cpu)", x, {&y});
    if (x.dtype() == DType::f64) layer_norm_rows<double>(x, weight, bias, eps, y, mean, rstd);
    else if (rounded) layer_norm_rows<float, bfloat16>(x, weight, bias, eps, y, mean, rstd);
    else layer_norm_rows<float>(x, weight, bias, eps, y, mean, rstd);
  };
  k.layer_norm_backward = [](const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                             const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias) {
    const bool widened = x.dtype() == DType::f32 && dy.dtype() == DType::bf16;  // NOTE [ Norms made for products ]
    check_norm_args("layer_norm_backward (cpu)", x, {&weight, &mean, &rstd, &dx, &dweight, &dbias});
    if (widened) vec::require_contiguous(dy, "layer_norm_backward (cpu)", "dy");
    else check_norm_args("layer_norm_backward (cpu)", x, {&dy});
    if (x.dtype() == DType::f64) layer_norm_rows_backward<double>(dy, x, weight, mean, rstd, dx, dweight, dbias);
    else if (widened) layer_norm_rows_backward<float, bfloat16>(dy, x, weight, mean, rstd, dx, dweight, dbias);
    else layer_norm_rows_backward<float>(dy, x, weight, mean, rstd, dx, dweight, dbias);
  };
  k.rms_norm = [](const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd) {
    check_norm_args("rms_norm (cpu)", x, {&weight, &y, &rstd});
    if (x.dtype() == DType::f64) rms_norm_rows<double>(x, weight, eps, y, rstd);
    else rms_norm_rows<float>(x, weight, eps, y, rstd);
  };
  k.rms_norm_backward = [](const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                           const Tensor& dx, const Tensor& dweight) {
    check_norm_args("rms_norm_backward (cpu)", x, {&dy, &weight, &rstd, &dx, &dweight});
    if (x.dtype() == DType::f64) rms_norm_rows_backward<double>(dy, x, weight, rstd, dx, dweight);
    else rms_norm_rows_backward<float>(dy, x, weight, rstd, dx, dweight);
  };
  return k;
}

}  // namespace mvgpt::fused
