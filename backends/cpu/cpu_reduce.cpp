// Reductions and softmax on the CPU.
//
// NOTE [ Deterministic reductions ]
// A reduction's result must not depend on the thread count. Every output element is reduced in a
// fixed order: its reduced elements are split into fixed blocks of kBlock (independent of threads),
// each block is summed with fixed lanes, and the block results are combined in order. Threads only
// decide who computes which block, never how the arithmetic is grouped.
//
// x's shape is out's shape followed by the reduced dims (the ops layer permutes them last). Two
// layouts are fast: reduced elements contiguous per output ("rows", e.g. over the last axis), and
// outputs contiguous in x ("columns", e.g. a bias gradient summed over the batch), where a chunk of
// outputs accumulates one reduced slice at a time with unit-stride vector adds. Anything else is
// copied into the rows layout first.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <mvgpt/backends/cpu/column_sum_order.h>
#include <mvgpt/backends/cpu/cpu_backend.h>
#include <mvgpt/backends/cpu/fused_common.h>
#include <mvgpt/backends/cpu/strided.h>
#include <mvgpt/backends/cpu/vec_math.h>
#include <mvgpt/backends/reduce_plan.h>

namespace mvgpt::cpu {
namespace {

constexpr int64_t kBlock = 8192;     // reduced elements per block of a row reduction
constexpr int64_t kLanes = 16;       // independent accumulators: vectorizes, and sums more accurately
constexpr int64_t kColumnChunk = 256;  // outputs per task in a column reduction
constexpr int64_t kRowBlock = kColumnSumRowBlock;  // rows per block of a row-streaming column sum

// Floats accumulate blocks in their own type (lanes) and combine blocks in double; ints use int64.
template <typename T>
using SumAcc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
template <typename T>
using LaneAcc = std::conditional_t<std::is_floating_point_v<T>, T, int64_t>;

template <typename T>
inline T max_nan(T a, T b) {  // NaN wins, as in PyTorch
  return (b > a || b != b) ? b : a;
}
template <typename T>
inline T min_nan(T a, T b) {
  return (b < a || b != b) ? b : a;
}

// Sum of p[0, n) with kLanes accumulators of T combined pairwise in a fixed order.
template <typename T>
SumAcc<T> block_sum(const T* p, int64_t n) {
  LaneAcc<T> acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) acc[j] += p[i + j];
  for (int64_t j = 0; i < n; ++i, ++j) acc[j] += p[i];
  for (int64_t w = kLanes / 2; w > 0; w /= 2)
    for (int64_t j = 0; j < w; ++j) acc[j] += acc[j + w];
  return SumAcc<T>(acc[0]);
}

template <typename T, bool kMax>
T block_extreme(const T* p, int64_t n) {
  if constexpr (std::is_same_v<T, float>) return extreme8<kMax>(p, n);
  T acc[kLanes];
  for (int64_t j = 0; j < kLanes; ++j) acc[j] = p[0];
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) acc[j] = kMax ? max_nan(acc[j], p[i + j]) : min_nan(acc[j], p[i + j]);
  for (; i < n; ++i) acc[0] = kMax ? max_nan(acc[0], p[i]) : min_nan(acc[0], p[i]);
  T r = acc[0];
  for (int64_t j = 1; j < kLanes; ++j) r = kMax ? max_nan(r, acc[j]) : min_nan(r, acc[j]);
  return r;
}

// First maximum (a NaN counts as the maximum, the first one wins).
template <typename T>
int64_t block_argmax(const T* p, int64_t n, T* best_value) {
  T best = p[0];
  int64_t at = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (best != best) break;
    if (p[i] > best || p[i] != p[i]) {
      best = p[i];
      at = i;
    }
  }
  *best_value = best;
  return at;
}

// Offset in x of output element o's first reduced element, from the merged outer layout.
inline int64_t outer_offset(const Layout<1>& l, int64_t o) {
  int64_t off = 0;
  for (int d = l.ndim - 1; d >= 0; --d) {
    off += (o % l.shape[d]) * l.strides[0][d];
    o /= l.shape[d];
  }
  return off;
}

// Rows: each output's R reduced elements are contiguous at its outer offset.
template <typename T>
void reduce_rows(ReduceOp op, const T* xp, const Layout<1>& outer, int64_t R, const Tensor& out) {
  const int64_t O = outer.numel;
  const int64_t nb = (R + kBlock - 1) / kBlock;
  auto row = [&](int64_t o) { return xp + outer_offset(outer, o); };
  if (op == ReduceOp::argmax) {
    int64_t* op_ = out.data<int64_t>();
    // Blocks of one row are scanned in order, so the first maximum wins across blocks too.
    parallel_for(O, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(R, 1)), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        T v;
        op_[o] = block_argmax(row(o), R, &v);
      }
    });
    return;
  }
  T* outp = out.data<T>();
  // Block results, in order per output; combined below.
  std::vector<SumAcc<T>> sums;
  std::vector<T> extremes;
  if (op == ReduceOp::sum) sums.resize(size_t(O * nb));
  else extremes.resize(size_t(O * nb));
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::min(R, kBlock));
  parallel_for(O * nb, grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t o = t / nb, blk = t % nb;
      const T* p = row(o) + blk * kBlock;
      int64_t n = std::min(kBlock, R - blk * kBlock);
      switch (op) {
        case ReduceOp::sum: sums[size_t(t)] = block_sum(p, n); break;
        case ReduceOp::max: extremes[size_t(t)] = block_extreme<T, true>(p, n); break;
        case ReduceOp::min: extremes[size_t(t)] = block_extreme<T, false>(p, n); break;
        default: break;
      }
    }
  });
  parallel_for(O, kElementwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      if (op == ReduceOp::sum) {
        SumAcc<T> s = 0;
        for (int64_t k = 0; k < nb; ++k) s += sums[size_t(o * nb + k)];
        outp[o] = T(s);
      } else {
        T r = extremes[size_t(o * nb)];
        for (int64_t k = 1; k < nb; ++k)
          r = op == ReduceOp::max ? max_nan(r, extremes[size_t(o * nb + k)]) : min_nan(r, extremes[size_t(o * nb + k)]);
        outp[o] = r;
      }
    }
  });
}

// Column sums of floats in rows of unit stride (x (R, L) summed over R: a bias gradient), in the
// order of NOTE [ Column sum order ] (column_sum_order.h). Tasks stream whole rows, each summing a
// fixed block of kRowBlock rows into double accumulators; the block sums are then added in block
// order. Reads are contiguous (the strip-wise walk below reads
// 1 KB per row and jumps, at a third of the bandwidth), and the grouping depends only on R.
// Groups of kRowGroup rows are added in T first, one column at a time in row order, and each
// group's sum then goes into the double accumulator: widening every element and updating the
// accumulator row by row kept the loop at half the read bandwidth (BM_Sum cols, 2-core Zen 3). The
// price: up to 7 roundings in T per element (as the row reductions' float lanes), and a group of
// values near T's largest can overflow where a double sum would not.
template <typename T>
void sum_columns_by_row_blocks(const T* xp, int64_t L, int64_t R, int64_t row_stride, const Tensor& out) {
  constexpr int64_t kRowGroup = kColumnSumRowGroup;
  const int64_t nb = (R + kRowBlock - 1) / kRowBlock;
  Tensor scratch = Tensor::empty({nb, L}, DType::f64);  // block sums, from the caching allocator
  double* part = scratch.data<double>();
  parallel_for(nb, std::max<int64_t>(1, kElementwiseGrain / (kRowBlock * L)), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      double* acc = part + b * L;
      std::fill(acc, acc + L, 0.0);
      const int64_t r0 = b * kRowBlock, r1 = std::min(R, r0 + kRowBlock);
      for (int64_t g0 = r0; g0 < r1; g0 += kRowGroup) {
        const int64_t n = std::min(kRowGroup, r1 - g0);
        const T* p = xp + g0 * row_stride;
        if (n == kRowGroup) {
          const T *p1 = p + row_stride, *p2 = p1 + row_stride, *p3 = p2 + row_stride, *p4 = p3 + row_stride,
                  *p5 = p4 + row_stride, *p6 = p5 + row_stride, *p7 = p6 + row_stride;
          for (int64_t j = 0; j < L; ++j)
            acc[j] += double(((((((p[j] + p1[j]) + p2[j]) + p3[j]) + p4[j]) + p5[j]) + p6[j]) + p7[j]);
        } else {
          for (int64_t j = 0; j < L; ++j) {
            T s = p[j];
            for (int64_t r = 1; r < n; ++r) s += p[r * row_stride + j];
            acc[j] += double(s);
          }
        }
      }
    }
  });
  add_block_sums(part, nb, L, out.data<T>());
}

// Columns: the innermost outer dim has unit stride in x. A task owns up to kColumnChunk outputs of
// one outer row and walks the reduced elements in order, adding whole contiguous slices.
template <typename T>
void reduce_columns(ReduceOp op, const T* xp, const Layout<1>& outer, const Layout<1>& reduced, const Tensor& out) {
  const int last = outer.ndim - 1;
  const int64_t L = outer.shape[last];
  const int64_t P = outer.numel / L;
  const int64_t chunks = (L + kColumnChunk - 1) / kColumnChunk;
  Layout<1> rows_of_outer = outer;  // the outer dims above the innermost one
  rows_of_outer.ndim = last;
  rows_of_outer.numel = P;
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, kColumnChunk * reduced.numel));
  parallel_for(P * chunks, grain, [&](int64_t b, int64_t e) {
    using Acc = SumAcc<T>;  // exact for max/min/argmax, wide for sums
    Acc acc[kColumnChunk];
    int64_t arg[kColumnChunk];
    for (int64_t t = b; t < e; ++t) {
      const int64_t p = t / chunks, c0 = (t % chunks) * kColumnChunk, n = std::min(kColumnChunk, L - c0);
      const T* base = xp + outer_offset(rows_of_outer, p) + c0;
      int64_t r = 0;  // position in the reduced order
      for_each_run(reduced, 0, reduced.numel, [&](const int64_t* off, int64_t count, const int64_t* s) {
        for (int64_t k = 0; k < count; ++k, ++r) {
          const T* q = base + off[0] + k * s[0];
          if (op == ReduceOp::sum) {
            if (r == 0) for (int64_t j = 0; j < n; ++j) acc[j] = Acc(q[j]);
            else for (int64_t j = 0; j < n; ++j) acc[j] += Acc(q[j]);
          } else if (r == 0) {
            for (int64_t j = 0; j < n; ++j) acc[j] = Acc(q[j]), arg[j] = 0;
          } else if (op == ReduceOp::max) {
            for (int64_t j = 0; j < n; ++j) acc[j] = max_nan(acc[j], Acc(q[j]));
          } else if (op == ReduceOp::min) {
            for (int64_t j = 0; j < n; ++j) acc[j] = min_nan(acc[j], Acc(q[j]));
          } else {  // argmax: strictly greater keeps the first maximum; the first NaN sticks
            for (int64_t j = 0; j < n; ++j)
              if (acc[j] == acc[j] && (Acc(q[j]) > acc[j] || q[j] != q[j])) acc[j] = Acc(q[j]), arg[j] = r;
          }
        }
      });
      const int64_t o0 = p * L + c0;
      if (op == ReduceOp::argmax) {
        int64_t* op_ = out.data<int64_t>() + o0;
        for (int64_t j = 0; j < n; ++j) op_[j] = arg[j];
      } else {
        T* op_ = out.data<T>() + o0;
        for (int64_t j = 0; j < n; ++j) op_[j] = T(acc[j]);
      }
    }
  });
}

template <typename T>
void reduce_typed(ReduceOp op, const Tensor& x, const Tensor& out) {
  const int k = out.dim();
  const reduce_plan::DimSplit dims = reduce_plan::split_dims(x, k);
  const int64_t O = out.numel(), R = dims.inner_numel;
  if (O == 0) return;
  if (R == 0) {
    if (op != ReduceOp::sum) throw std::logic_error("CpuBackend::reduce: max/min/argmax over no elements");
    T* p = out.data<T>();
    for (int64_t i = 0; i < O; ++i) p[i] = T(0);
    return;
  }
  const T* xp = static_cast<const T*>(x.raw_data());
  Layout<1> outer = make_layout<1>(dims.outer_shape, {&dims.outer_strides});
  Layout<1> reduced = make_layout<1>(dims.inner_shape, {&dims.inner_strides});
  if (reduced.ndim == 0 || (reduced.ndim == 1 && reduced.strides[0][0] == 1))
    return reduce_rows(op, xp, outer, R, out);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (op == ReduceOp::sum && outer.ndim == 1 && outer.strides[0][0] == 1 && reduced.ndim == 1)
      return sum_columns_by_row_blocks(xp, outer.shape[0], reduced.shape[0], reduced.strides[0][0], out);
  }
  if (outer.ndim > 0 && outer.strides[0][outer.ndim - 1] == 1)
    return reduce_columns(op, xp, outer, reduced, out);
  Tensor packed = Tensor::empty(x.shape(), x.dtype());
  backend_for(Device::cpu()).copy(x, packed);
  const reduce_plan::DimSplit packed_dims = reduce_plan::split_dims(packed, k);
  reduce_rows(op, packed.data<T>(), make_layout<1>(packed_dims.outer_shape, {&packed_dims.outer_strides}), R, out);
}

template <typename T>
void softmax_typed(const Tensor& x, const Tensor& out, bool log) {
  const int64_t C = x.shape().back();
  const int64_t rows = x.numel() / C;
  const reduce_plan::DimSplit dims = reduce_plan::split_dims(x, x.dim() - 1);  // rows, then C
  Layout<1> outer = make_layout<1>(dims.outer_shape, {&dims.outer_strides});
  const int64_t sc = x.strides().back();
  const T* xp = static_cast<const T*>(x.raw_data());
  T* op = out.data<T>();
  parallel_for(rows, std::max<int64_t>(1, kElementwiseGrain / C), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* xr = xp + outer_offset(outer, r);
      T* y = op + r * C;
      if (sc != 1) {  // gather a strided row into the output and work there
        for (int64_t i = 0; i < C; ++i) y[i] = xr[i * sc];
        xr = y;
      }
      const T m = block_extreme<T, true>(xr, C);
      T acc[kLanes] = {};
      int64_t i = 0;
      if constexpr (std::is_same_v<T, float>) {
        acc[0] = exp_shift_sum(xr, m, log ? nullptr : y, C);
        i = C;
      } else if (log) {
        for (; i + kLanes <= C; i += kLanes)
          for (int64_t j = 0; j < kLanes; ++j) acc[j] += vexp(xr[i + j] - m);
        for (int64_t j = 0; i < C; ++i, ++j) acc[j] += vexp(xr[i] - m);
      } else {
        for (; i + kLanes <= C; i += kLanes)
          for (int64_t j = 0; j < kLanes; ++j) acc[j] += (y[i + j] = vexp(xr[i + j] - m));
        for (int64_t j = 0; i < C; ++i, ++j) acc[j] += (y[i] = vexp(xr[i] - m));
      }
      for (int64_t w = kLanes / 2; w > 0; w /= 2)
        for (int64_t j = 0; j < w; ++j) acc[j] += acc[j + w];
      const T s = acc[0];
      if (log) {
        const T shift = m + std::log(s);
        for (int64_t j = 0; j < C; ++j) y[j] = xr[j] - shift;
      } else {
        const T inv = T(1) / s;
        for (int64_t j = 0; j < C; ++j) y[j] *= inv;
      }
    }
  });
}

}  // namespace

// NOTE [ A gradient's operand and column sums ]
// Under bf16 products a linear layer's backward takes its float32 incoming gradient twice: rounded
// to bfloat16 for its two products, and summed over its rows for the bias gradient (in the series'
// bf16 step three layers a block, each pass reading the whole gradient). This pass reads each
// row once for both: it rounds the row as it adds it into its group's float sums, in the order of
// NOTE [ Column sum order ] (the same groups, blocks and double sums as sum_columns_by_row_blocks),
// so the operand is the conversion's bits and the sums are ops::sum's (but for one column, which
// ops::sum adds as a row: the two ops run then). A row at a time, as the GELU's backward does: eight
// rows side by side would be sixteen streams. On the 2-core AMX Xeon the step's 18 conversions and
// 18 sums took 6.0-6.1 + 5.2-5.3 ms a step, this pass 7.3-7.8 (10.3 before it fetched its lines ahead).
void CpuBackend::convert_with_column_sums(const Tensor& x, const Tensor& out, const Tensor& sums) {
  const bool fits = x.dim() == 2 && x.is_contiguous() && x.dtype() == DType::f32 && out.is_contiguous() &&
                    out.dtype() == DType::bf16 && out.shape() == x.shape() && sums.is_contiguous() &&
                    sums.dtype() == DType::f32 && sums.dim() == 1 && sums.size(0) == x.size(1);
  if (!fits)
    throw std::logic_error("CpuBackend::convert_with_column_sums: a contiguous float32 x (R, C), bfloat16 out of its "
                           "shape and float32 sums (C) expected");
  const int64_t R = x.size(0), C = x.size(1);
  // One column is a row to ops::sum (reduce_rows, lanes and blocks of its own): the two ops then.
  if (C == 1) return Backend::convert_with_column_sums(x, out, sums);
  const float* xp = x.data<float>();
  bfloat16* bp = out.data<bfloat16>();
  sum_columns_row_by_row(R, C, sums.data<float>(), [&](int64_t r, float* s, bool first) {
    const float* xr = xp + r * C;
    bfloat16* br = bp + r * C;
    int64_t j = 0;
#ifdef __AVX512F__
    for (; j + 16 <= C; j += 16) {
      prefetch_ahead(xr + j);  // NOTE [ Prefetching ahead ] (vec_math.h)
      prefetch_ahead_for_write(br + j);
      const f32x16 v = load16(xr + j);
      fused::store16_rounded(br + j, v);
      store16(s + j, first ? v : load16(s + j) + v);
    }
#endif
    // The rest (the whole row without AVX-512): the conversion's own vector pass, then the sums.
    fused::round_to_bf16(xr + j, C - j, br + j, fused::Ahead::both);
    for (; j < C; ++j) s[j] = first ? xr[j] : s[j] + xr[j];
  });
}

void CpuBackend::reduce(ReduceOp op, const Tensor& x, const Tensor& out) {
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
                  std::is_same_v<T, int64_t>)
      reduce_typed<T>(op, x, out);
    else
      throw std::logic_error("CpuBackend::reduce: dtype " + std::string(dtype_name(x.dtype())) + " reached the kernel");
  });
}

void CpuBackend::softmax(const Tensor& x, const Tensor& out, bool log) {
  if (x.numel() == 0) return;
  switch (x.dtype()) {
    case DType::f32: return softmax_typed<float>(x, out, log);
    case DType::f64: return softmax_typed<double>(x, out, log);
    default:
      throw std::logic_error("CpuBackend::softmax: dtype " + std::string(dtype_name(x.dtype())) + " reached the kernel");
  }
}

}  // namespace mvgpt::cpu
