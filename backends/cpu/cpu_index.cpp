// Indexing kernels. index_select is gather with the index expanded (stride 0 off the axis), and
// index_add is scatter_add likewise, so each pair shares one strided kernel.
//
// Scatter-adds are deterministic with repeated indices: threads split the positions off the axis
// (distinct positions write distinct destination elements) and each walks the axis in order, so an
// element's additions always happen in index order. Indices were range-checked by the ops layer.
#include <stdexcept>
#include <type_traits>
#include <utility>

#include <mvgpt/backends/cpu/cpu_backend.h>
#include <mvgpt/backends/cpu/strided.h>
#include <mvgpt/backends/index_plan.h>

namespace mvgpt::cpu {
namespace {

using index_plan::along_axis;

// out[pos] = src[pos with axis coordinate replaced by index[pos]]; idx_strides describe index over out's shape.
template <typename T, typename I>
void gather_kernel(const Tensor& src, int axis, const Tensor& index, const Strides& idx_strides, const Tensor& out) {
  const index_plan::GatherSource source = index_plan::gather_source(src, axis);
  const int64_t axis_stride = source.axis_stride;
  const T* sp = static_cast<const T*>(src.raw_data());
  const I* ip = static_cast<const I*>(index.raw_data());
  T* op = out.data<T>();
  auto l = make_layout<3>(out.shape(), {&out.strides(), &source.strides, &idx_strides});
  parallel_runs(l, kElementwiseGrain, [&](const int64_t* off, int64_t n, const int64_t* s) {
    T* o = op + off[0];
    const T* a = sp + off[1];
    const I* ix = ip + off[2];
    if (s[2] == 0) {  // one index for the whole run (index_select, embedding rows): a plain row copy
      const T* row = a + int64_t(*ix) * axis_stride;
      if (s[0] == 1 && s[1] == 1) {
        for (int64_t i = 0; i < n; ++i) o[i] = row[i];
      } else {
        for (int64_t i = 0; i < n; ++i) o[i * s[0]] = row[i * s[1]];
      }
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * s[0]] = a[i * s[1] + int64_t(ix[i * s[2]]) * axis_stride];
    }
  });
}

template <typename T>
inline void add_into(T& d, T v) {
  if constexpr (std::is_same_v<T, bfloat16>) d = bfloat16(float(d) + float(v));
  else if constexpr (std::is_same_v<T, bool>) d = d || v;
  else d = T(d + v);
}

// dst[pos with axis coordinate index[pos]] += src[pos] over src's shape; idx_strides describe index over it.
template <typename T, typename I>
void scatter_add_kernel(const Tensor& dst, int axis, const Tensor& index, const Strides& idx_strides,
                        const Tensor& src) {
  if (src.shape()[axis] == 0 || src.numel() == 0) return;
  const index_plan::ScatterAddPlan p = index_plan::plan_scatter_add(dst, axis, idx_strides, src);
  const int64_t n = p.length, dst_axis = p.dst_axis, src_axis = p.src_axis, idx_axis = p.index_axis;
  T* dp = static_cast<T*>(dst.raw_data());
  const T* sp = static_cast<const T*>(src.raw_data());
  const I* ip = static_cast<const I*>(index.raw_data());
  auto l = make_layout<3>(p.positions, {&p.dst, &p.src, &p.index});
  const int64_t grain = std::max<int64_t>(64, kElementwiseGrain / n);
  parallel_runs(l, grain, [&](const int64_t* off, int64_t count, const int64_t* s) {
    for (int64_t k = 0; k < n; ++k) {  // in index order: repeated indices accumulate deterministically
      const T* a = sp + off[1] + k * src_axis;
      const I* ix = ip + off[2] + k * idx_axis;
      if (s[2] == 0) {  // index_add: one destination row for the whole run
        T* row = dp + off[0] + int64_t(*ix) * dst_axis;
        if (s[0] == 1 && s[1] == 1) {
          for (int64_t j = 0; j < count; ++j) add_into(row[j], a[j]);
        } else {
          for (int64_t j = 0; j < count; ++j) add_into(row[j * s[0]], a[j * s[1]]);
        }
      } else {
        T* d = dp + off[0];
        for (int64_t j = 0; j < count; ++j) add_into(d[j * s[0] + int64_t(ix[j * s[2]]) * dst_axis], a[j * s[1]]);
      }
    }
  });
}

template <typename F>
void dispatch_index(const Tensor& index, F&& f) {
  index_plan::dispatch_index(index, "CpuBackend", std::forward<F>(f));
}

}  // namespace

void CpuBackend::index_select(const Tensor& src, int axis, const Tensor& index, const Tensor& out) {
  if (out.numel() == 0) return;
  Strides is = along_axis(index, axis, out.dim());
  dispatch_dtype(src.dtype(), [&](auto tag) {
    dispatch_index(index, [&](auto itag) { gather_kernel<decltype(tag), decltype(itag)>(src, axis, index, is, out); });
  });
}

void CpuBackend::gather(const Tensor& src, int axis, const Tensor& index, const Tensor& out) {
  if (out.numel() == 0) return;
  dispatch_dtype(src.dtype(), [&](auto tag) {
    dispatch_index(index, [&](auto itag) {
      gather_kernel<decltype(tag), decltype(itag)>(src, axis, index, index.strides(), out);
    });
  });
}

void CpuBackend::index_add(const Tensor& dst, int axis, const Tensor& index, const Tensor& src) {
  Strides is = along_axis(index, axis, src.dim());
  dispatch_dtype(dst.dtype(), [&](auto tag) {
    dispatch_index(index, [&](auto itag) {
      scatter_add_kernel<decltype(tag), decltype(itag)>(dst, axis, index, is, src);
    });
  });
}

void CpuBackend::scatter_add(const Tensor& dst, int axis, const Tensor& index, const Tensor& src) {
  dispatch_dtype(dst.dtype(), [&](auto tag) {
    dispatch_index(index, [&](auto itag) {
      scatter_add_kernel<decltype(tag), decltype(itag)>(dst, axis, index, index.strides(), src);
    });
  });
}

}  // namespace mvgpt::cpu
