// The CPU kernel of rotary embedding (autograd/fused/rope.h). The cos/sin of every (position, pair) are computed once per call, in
// double (positions can exceed 100k, where a float angle would be off by radians), into a table
// shared by all heads; the rotation itself is a vectorizable loop over each row of D channels.
#include <cmath>
#include <vector>

#include <mvgpt/backends/cpu/fused_common.h>
#include <mvgpt/backends/cpu/parallel.h>
#include <mvgpt/fused/rope.h>
#include <mvgpt/fused/rope_row_cpu.h>

namespace mvgpt::fused {
namespace {

using cpu::parallel_for;
namespace vec = cpu::fused;

// base^(-2i/D) for the D/2 pairs, kept per thread for the last (D, base) asked: decoding fills a
// one-row table per layer and token, where the pows cost as much as the angles' cos and sin.
const std::vector<double>& inverse_frequencies(int64_t D, double base) {
  thread_local int64_t cached_d = -1;
  thread_local double cached_base = 0;
  thread_local std::vector<double> inv_freq;
  if (D != cached_d || !(base == cached_base)) {
    inv_freq.resize(size_t(D / 2));
    for (int64_t i = 0; i < D / 2; ++i) inv_freq[size_t(i)] = std::pow(base, -2.0 * double(i) / double(D));
    cached_d = D, cached_base = base;
  }
  return inv_freq;
}

// (positions.numel(), D/2) cos and sin of every (position, pair), in positions' order.
template <typename T>
void fill_table(const Tensor& positions, int64_t D, double base, bool inverse, double position_scale,
                std::vector<T>& cos_t, std::vector<T>& sin_t) {
  const int64_t table_rows = positions.numel(), half = D / 2;
  cos_t.resize(size_t(table_rows * half));
  sin_t.resize(size_t(table_rows * half));
  // A copy: a thread waiting in the parallel_for below may run another call's fill_table meanwhile.
  const std::vector<double> inv_freq = inverse_frequencies(D, base);
  const double sign = inverse ? -1.0 : 1.0;
  const bool pos64 = positions.dtype() == DType::i64;
  const int64_t* p64 = pos64 ? positions.data<int64_t>() : nullptr;
  const int32_t* p32 = pos64 ? nullptr : positions.data<int32_t>();
  parallel_for(table_rows, std::max<int64_t>(1, 2048 / std::max<int64_t>(half, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      // Scaled before the product with the frequency: a scale of 1 leaves every angle bit for bit.
      const double pos = (pos64 ? double(p64[r]) : double(p32[r])) * position_scale;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = sign * pos * inv_freq[size_t(i)];
        cos_t[size_t(r * half + i)] = T(std::cos(angle));
        sin_t[size_t(r * half + i)] = T(std::sin(angle));
      }
    }
  });
}

template <typename T>
void rope_impl(const Tensor& x, const Tensor& positions, double base, RopeLayout layout, bool inverse,
               double position_scale, const Tensor& out) {
  const bool batched = x.dim() == 4;  // (B, H, T, D), else (H, T, D)
  const int64_t B = batched ? x.size(0) : 1, H = x.size(-3), T_ = x.size(-2), D = x.size(-1), half = D / 2;
  const int64_t sb = batched ? x.strides()[0] : 0, sh = x.strides()[x.dim() - 3], st = x.strides()[x.dim() - 2];
  const int64_t pos_rows = positions.dim() == 2 ? B : 1;  // per-sequence positions or one shared row

  // (pos_rows * T, D/2) cos and sin.
  std::vector<T> cos_t, sin_t;
  fill_table(positions, D, base, inverse, position_scale, cos_t, sin_t);

  const T* xp = x.data<T>();
  T* op = out.data<T>();
  const int64_t rows = B * H * T_;
  // Rows in x's memory order. q and k split out of the packed qkv projection (B, T, (H + 2 Hkv) D)
  // have a token's heads side by side and tokens 3C apart: there the heads go fastest, so one walk
  // forwards over the projection reads them; head by head, each head was a pass of its own over the
  // whole projection, 256 bytes of each token's row at a time. In the bf16 training step on a 2-core
  // AMD EPYC Zen 5 (alternated, three runs each) rope forward took 11.0-13.3 ms against 13.9-14.1;
  // on a projection that stays in the cache (BM_RopeFromQkv/3) it is slower, 0.34 against 0.21 ms.
  // Contiguous (B, H, T, D) inputs (the backward's gradients) keep tokens fastest.
  const bool heads_inner = H > 1 && T_ > 1 && sh < st;
  parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(D, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t h = heads_inner ? r % H : (r / T_) % H, t = heads_inner ? (r / H) % T_ : r % T_,
                    b = r / (T_ * H);
      const T* xr = xp + b * sb + h * sh + t * st;
      T* o = op + ((b * H + h) * T_ + t) * D;
      const int64_t tr = (pos_rows == 1 ? 0 : b) * T_ + t;
      rotate_row(xr, cos_t.data() + tr * half, sin_t.data() + tr * half, half, layout == RopeLayout::interleaved, o);
    }
  });
}

// x may be any view with a unit stride on D; positions and out are contiguous.
void rotate(const Tensor& x, const Tensor& positions, double base, RopeLayout layout, bool inverse,
            double position_scale, const Tensor& out) {
  const char* op = "rope (cpu)";
  vec::require_float(x, op, "x");
  vec::require_unit_last_stride(x, op, "x");
  vec::require_contiguous(positions, op, "positions");
  vec::require_contiguous(out, op, "out");
  if (positions.dtype() != DType::i32 && positions.dtype() != DType::i64)
    throw std::logic_error("rope (cpu): positions must be int32 or int64");
  if (x.dtype() == DType::f64) rope_impl<double>(x, positions, base, layout, inverse, position_scale, out);
  else rope_impl<float>(x, positions, base, layout, inverse, position_scale, out);
}

}  // namespace

RopeTable rope_table(const Tensor& positions, int64_t D, double base, bool inverse, double position_scale) {
  if (!positions.device().is_cpu() || !positions.is_contiguous() ||
      (positions.dtype() != DType::i32 && positions.dtype() != DType::i64))
    throw std::logic_error("rope_table: contiguous int32 or int64 positions on the CPU expected");
  RopeTable t;
  t.half = D / 2;
  fill_table(positions, D, base, inverse, position_scale, t.cos, t.sin);
  return t;
}

RopeTable inverse_rope_table(const RopeTable& table) {
  RopeTable t = table;
  for (float& s : t.sin) s = -s;
  return t;
}

RopeKernels rope_cpu_kernels() { return {rotate}; }

}  // namespace mvgpt::fused
