// Fused kernels: layer norm and RMS norm (forward and backward), rotary embedding, and attention
// (forward and backward). Each is the CPU kernel's math in the simplest parallel shape that needs
// no atomics, so results are deterministic.
//
// NOTE [ Attention on the GPU ]
// Forward: one block per (batch, head, query row). The visible keys are walked in tiles: each warp
// takes keys of the tile and computes scale * q.k with a shuffle-reduced dot product; then the tile
// is folded into a running softmax (max m, sum l, and the output accumulator, rescaled by
// exp(m_old - m_new)), FlashAttention's online softmax for a single row. lse = m + log(l).
// Backward recomputes P = exp(scale q.k - lse) instead of storing it, with D_i = rowsum(dO_i * O_i):
//   dS_ij = P_ij (dO_i.v_j - D_i),  dq_i = scale sum_j dS_ij k_j   (one block per query row),
//   dv_j = sum_i P_ij dO_i,  dk_j = scale sum_i dS_ij q_i          (one block per key row, walking
// the query heads of its kv group and their queries in order: deterministic, no atomics).
// Query i sits at key position (Tk - Tq) + i and, when causal, sees keys 0..(Tk - Tq) + i.
#include <cmath>
#include <stdexcept>
#include <string>

#include <mvgpt/backends/cuda/cuda_backend_impl.h>
#include <mvgpt/backends/cuda/cuda_kernels.cuh>

namespace mvgpt::cuda {
namespace {

// ------------------------------------------------------------------------------------------ norms

// One block per row of x (N, C). mean is null for RMS norm (x is then not centred).
template <typename T>
__global__ void norm_forward_kernel(int64_t N, int64_t C, const T* x, const T* weight, const T* bias, T eps, T* y,
                                    T* mean, T* rstd) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* shared = reinterpret_cast<T*>(smem);
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    const T* xr = x + r * C;
    T* yr = y + r * C;
    T mu = 0;
    if (mean) {
      T s = 0;
      for (int64_t i = threadIdx.x; i < C; i += blockDim.x) s += xr[i];
      mu = block_reduce(s, shared, SumOp{}) / T(C);
    }
    // Centred second moment (two passes: no cancellation of E[x^2] - E[x]^2).
    T s2 = 0;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) s2 += (xr[i] - mu) * (xr[i] - mu);
    const T var = block_reduce(s2, shared, SumOp{}) / T(C);
    const T rs = T(1) / math::m_sqrt(var + eps);
    if (threadIdx.x == 0) {
      if (mean) mean[r] = mu;
      rstd[r] = rs;
    }
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
      T v = (xr[i] - mu) * rs;
      if (weight) v *= weight[i];
      if (bias) v += bias[i];
      yr[i] = v;
    }
  }
}

// dx of one row per block. Layer norm (mean given): dx = rstd (g - mean(g) - xhat mean(g xhat));
// RMS norm: dx = rstd g - x rstd^3 mean(g x); g = dy * weight.
template <typename T>
__global__ void norm_backward_dx_kernel(int64_t N, int64_t C, const T* dy, const T* x, const T* weight,
                                        const T* mean, const T* rstd, T* dx) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* shared = reinterpret_cast<T*>(smem);
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    const T* xr = x + r * C;
    const T* dyr = dy + r * C;
    T* dxr = dx + r * C;
    const T rs = rstd[r];
    auto g_at = [&](int64_t i) { return weight ? dyr[i] * weight[i] : dyr[i]; };
    if (mean) {
      const T mu = mean[r];
      T sg = 0, sgx = 0;
      for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
        const T g = g_at(i);
        sg += g;
        sgx += g * (xr[i] - mu) * rs;
      }
      const T g_mean = block_reduce(sg, shared, SumOp{}) / T(C);
      const T gx_mean = block_reduce(sgx, shared, SumOp{}) / T(C);
      for (int64_t i = threadIdx.x; i < C; i += blockDim.x)
        dxr[i] = rs * (g_at(i) - g_mean - (xr[i] - mu) * rs * gx_mean);
    } else {
      T sgx = 0;
      for (int64_t i = threadIdx.x; i < C; i += blockDim.x) sgx += g_at(i) * xr[i];
      const T k = rs * rs * rs * (block_reduce(sgx, shared, SumOp{}) / T(C));
      for (int64_t i = threadIdx.x; i < C; i += blockDim.x) dxr[i] = rs * g_at(i) - xr[i] * k;
    }
  }
}

// Parameter gradients in two deterministic stages. Stage 1: block (column tile, row chunk) writes
// the chunk's partial sums of dy * xhat (and dy) per column; xhat = (x - mean) rstd, mean 0 for RMS.
// The chunk size depends only on N.
int64_t norm_chunk_rows(int64_t N) { return std::max<int64_t>(128, (N + 65534) / 65535); }

template <typename T>
__global__ void norm_param_partial_kernel(int64_t N, int64_t C, int64_t chunk_rows, const T* dy, const T* x, const T* mean,
                                          const T* rstd, T* dw_part, T* db_part) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  if (c >= C) return;
  T dw = 0, db = 0;
  const int64_t r1 = min(N, (chunk + 1) * chunk_rows);
  for (int64_t r = chunk * chunk_rows; r < r1; ++r) {
    const T g = dy[r * C + c];
    dw += g * (x[r * C + c] - (mean ? mean[r] : T(0))) * rstd[r];
    db += g;
  }
  if (dw_part) dw_part[chunk * C + c] = dw;
  if (db_part) db_part[chunk * C + c] = db;
}

// Stage 2: out[c] = sum of the chunks' partials, in chunk order.
template <typename T>
__global__ void sum_chunks_kernel(int64_t nchunks, int64_t C, const T* part, T* out) {
  MVGPT_GRID_STRIDE(c, C) {
    T s = 0;
    for (int64_t k = 0; k < nchunks; ++k) s += part[k * C + c];
    out[c] = s;
  }
}

// ------------------------------------------------------------------------------------------- rope

// One thread per (row, pair). x rows at strides (sb, sh, st) with a unit stride on D; out contiguous.
template <typename T, typename I>
__global__ void rope_kernel(int64_t B, int64_t H, int64_t Tn, int64_t D, int64_t sb, int64_t sh, int64_t st,
                            const T* x, const I* positions, bool per_sequence, double base, double position_scale,
                            double sign, bool interleaved, T* out) {
  const int64_t half = D / 2;
  MVGPT_GRID_STRIDE(e, B * H * Tn * half) {
    const int64_t i = e % half, row = e / half;
    const int64_t t = row % Tn, h = (row / Tn) % H, b = row / (Tn * H);
    const double pos = double(positions[(per_sequence ? b * Tn : 0) + t]) * position_scale;
    // The angle in double, as on the CPU: positions can exceed 100k, where a float angle is off by radians.
    const double angle = sign * pos * pow(base, -2.0 * double(i) / double(D));
    const T c = T(cos(angle)), s = T(sin(angle));
    const T* xr = x + b * sb + h * sh + t * st;
    T* o = out + row * D;
    const int64_t i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half;
    const T a = xr[i0], bb = xr[i1];
    o[i0] = a * c - bb * s;
    o[i1] = a * s + bb * c;
  }
}

// -------------------------------------------------------------------------------------- attention

constexpr int kAttnThreads = 128;  // four warps
constexpr int kAttnWarps = kAttnThreads / 32;
constexpr int64_t kTile = 128;     // keys (or queries) per tile

// (B, heads, T, D) rows with a unit stride on D.
template <typename T>
struct Rows {
  const T* data;
  int64_t sb, sh, st;
  __device__ const T* at(int64_t b, int64_t h, int64_t t) const { return data + b * sb + h * sh + t * st; }
};

template <typename T>
Rows<T> rows_of(const Tensor& t) {
  return {static_cast<const T*>(t.raw_data()), t.strides()[0], t.strides()[1], t.strides()[2]};
}

struct AttnDims {
  int64_t B, H, Hkv, Tq, Tk, D, group, offset;  // offset: the key position of query 0
  bool causal;
  __device__ int64_t visible(int64_t i) const {  // keys [0, n) seen by query i
    if (!causal) return Tk;
    const int64_t n = offset + i + 1;
    return n < 0 ? 0 : (n > Tk ? Tk : n);
  }
};

// a . b over D by one warp (lane-strided, then a shuffle tree: every lane gets the same value).
template <typename T>
__device__ inline T warp_dot(const T* a, const T* b, int64_t D) {
  T s = 0;
  for (int64_t c = threadIdx.x % 32; c < D; c += 32) s += a[c] * b[c];
  return warp_sum(s);
}

template <typename T>
__global__ void attention_forward_kernel(AttnDims d, Rows<T> Q, Rows<T> K, Rows<T> V, T scale, T* out, T* lse) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* q = reinterpret_cast<T*>(smem);  // (D)
  T* acc = q + d.D;                   // (D)
  T* p = acc + d.D;                   // (kTile)
  T* red = p + kTile;                 // (kAttnThreads)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t row = blockIdx.x; row < d.B * d.H * d.Tq; row += gridDim.x) {
    const int64_t i = row % d.Tq, h = (row / d.Tq) % d.H, b = row / (d.Tq * d.H), hk = h / d.group;
    const int64_t n = d.visible(i);
    const T* qr = Q.at(b, h, i);
    for (int64_t c = threadIdx.x; c < d.D; c += blockDim.x) q[c] = qr[c], acc[c] = 0;
    __syncthreads();
    T m = -INFINITY, l = 0;
    for (int64_t j0 = 0; j0 < n; j0 += kTile) {
      const int64_t cnt = min(kTile, n - j0);
      for (int64_t jj = warp; jj < cnt; jj += kAttnWarps) {
        const T s = scale * warp_dot(q, K.at(b, hk, j0 + jj), d.D);
        if (lane == 0) p[jj] = s;
      }
      __syncthreads();
      T tm = -INFINITY;
      for (int64_t jj = threadIdx.x; jj < cnt; jj += blockDim.x) tm = p[jj] > tm ? p[jj] : tm;
      tm = block_reduce(tm, red, MaxOp{});
      const T m_new = tm > m ? tm : m;
      if (m_new == -INFINITY) continue;  // every score so far is -inf: nothing to add
      const T alpha = math::m_exp(m - m_new);  // 0 on the first tile (m = -inf)
      T ts = 0;
      for (int64_t jj = threadIdx.x; jj < cnt; jj += blockDim.x) {
        const T e = math::m_exp(p[jj] - m_new);
        p[jj] = e;
        ts += e;
      }
      ts = block_reduce(ts, red, SumOp{});  // its barriers also publish p
      l = l * alpha + ts;
      for (int64_t c = threadIdx.x; c < d.D; c += blockDim.x) {
        T a = acc[c] * alpha;
        for (int64_t jj = 0; jj < cnt; ++jj) a += p[jj] * V.at(b, hk, j0 + jj)[c];
        acc[c] = a;
      }
      m = m_new;
      __syncthreads();  // p is rewritten by the next tile
    }
    const bool empty = n == 0 || m == -INFINITY;
    for (int64_t c = threadIdx.x; c < d.D; c += blockDim.x) out[row * d.D + c] = empty ? T(0) : acc[c] / l;
    if (threadIdx.x == 0) lse[row] = empty ? T(-INFINITY) : m + math::m_log(l);
    __syncthreads();  // q and acc are reused by the next row
  }
}

// D_i = rowsum(dO_i * O_i), one thread per query row.
template <typename T>
__global__ void attention_rowdot_kernel(AttnDims d, Rows<T> dO, Rows<T> O, T* Di) {
  MVGPT_GRID_STRIDE(row, d.B * d.H * d.Tq) {
    const int64_t i = row % d.Tq, h = (row / d.Tq) % d.H, b = row / (d.Tq * d.H);
    const T* a = dO.at(b, h, i);
    const T* o = O.at(b, h, i);
    T s = 0;
    for (int64_t c = 0; c < d.D; ++c) s += a[c] * o[c];
    Di[row] = s;
  }
}

// P and dS of query row i against key row j, computed by one warp.
template <typename T>
__device__ inline void p_and_ds(const T* q, const T* k, const T* dout, const T* v, int64_t D, T scale, T lse_i,
                                T di, T* p, T* ds) {
  const T s = scale * warp_dot(q, k, D);
  const T pij = lse_i == -INFINITY ? T(0) : math::m_exp(s - lse_i);
  const T dp = warp_dot(dout, v, D);
  *p = pij;
  *ds = pij * (dp - di);
}

template <typename T>
__global__ void attention_dq_kernel(AttnDims d, Rows<T> Q, Rows<T> K, Rows<T> V, Rows<T> dO, const T* lse,
                                    const T* Di, T scale, T* dq) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* q = reinterpret_cast<T*>(smem);  // (D)
  T* go = q + d.D;                    // the dO row (D)
  T* acc = go + d.D;                  // dq accumulator (D)
  T* ds = acc + d.D;                  // (kTile)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t row = blockIdx.x; row < d.B * d.H * d.Tq; row += gridDim.x) {
    const int64_t i = row % d.Tq, h = (row / d.Tq) % d.H, b = row / (d.Tq * d.H), hk = h / d.group;
    const int64_t n = d.visible(i);
    for (int64_t c = threadIdx.x; c < d.D; c += blockDim.x) q[c] = Q.at(b, h, i)[c], go[c] = dO.at(b, h, i)[c], acc[c] = 0;
    __syncthreads();
    for (int64_t j0 = 0; j0 < n; j0 += kTile) {
      const int64_t cnt = min(kTile, n - j0);
      for (int64_t jj = warp; jj < cnt; jj += kAttnWarps) {
        T pij, dsij;
        p_and_ds(q, K.at(b, hk, j0 + jj), go, V.at(b, hk, j0 + jj), d.D, scale, lse[row], Di[row], &pij, &dsij);
        if (lane == 0) ds[jj] = dsij;
      }
      __syncthreads();
      for (int64_t c = threadIdx.x; c < d.D; c += blockDim.x) {
        T a = acc[c];
        for (int64_t jj = 0; jj < cnt; ++jj) a += ds[jj] * K.at(b, hk, j0 + jj)[c];
        acc[c] = a;
      }
      __syncthreads();  // ds is rewritten by the next tile
    }
    for (int64_t c = threadIdx.x; c < d.D; c += blockDim.x) dq[row * d.D + c] = scale * acc[c];
    __syncthreads();  // q, go and acc are reused by the next row
  }
}

template <typename T>
__global__ void attention_dkdv_kernel(AttnDims d, Rows<T> Q, Rows<T> K, Rows<T> V, Rows<T> dO, const T* lse,
                                      const T* Di, T scale, T* dk, T* dv) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* kj = reinterpret_cast<T*>(smem);  // (D)
  T* vj = kj + d.D;                    // (D)
  T* pt = vj + d.D;                    // (kTile)
  T* dst = pt + kTile;                 // (kTile)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t krow = blockIdx.x; krow < d.B * d.Hkv * d.Tk; krow += gridDim.x) {
    const int64_t j = krow % d.Tk, hk = (krow / d.Tk) % d.Hkv, b = krow / (d.Tk * d.Hkv);
    for (int64_t c = threadIdx.x; c < d.D; c += blockDim.x) {
      kj[c] = K.at(b, hk, j)[c], vj[c] = V.at(b, hk, j)[c];
      dk[krow * d.D + c] = 0, dv[krow * d.D + c] = 0;
    }
    __syncthreads();
    // Query i sees key j when j < visible(i), i.e. i >= j - offset when causal.
    int64_t i_first = d.causal ? j - d.offset : 0;
    i_first = i_first < 0 ? 0 : i_first;
    for (int64_t g = 0; g < d.group; ++g) {
      const int64_t h = hk * d.group + g;
      const int64_t base = (b * d.H + h) * d.Tq;
      for (int64_t i0 = i_first; i0 < d.Tq; i0 += kTile) {
        const int64_t cnt = min(kTile, d.Tq - i0);
        for (int64_t ii = warp; ii < cnt; ii += kAttnWarps) {
          const int64_t i = i0 + ii;
          T pij, dsij;
          p_and_ds(Q.at(b, h, i), kj, dO.at(b, h, i), vj, d.D, scale, lse[base + i], Di[base + i], &pij, &dsij);
          if (lane == 0) pt[ii] = pij, dst[ii] = dsij;
        }
        __syncthreads();
        for (int64_t c = threadIdx.x; c < d.D; c += blockDim.x) {
          T a = 0, e = 0;
          for (int64_t ii = 0; ii < cnt; ++ii) {
            a += pt[ii] * dO.at(b, h, i0 + ii)[c];
            e += dst[ii] * Q.at(b, h, i0 + ii)[c];
          }
          dv[krow * d.D + c] += a;
          dk[krow * d.D + c] += e;
        }
        __syncthreads();
      }
    }
    for (int64_t c = threadIdx.x; c < d.D; c += blockDim.x) dk[krow * d.D + c] *= scale;
    __syncthreads();
  }
}

// ------------------------------------------------------------------------------------------ host

unsigned grid_rows(int64_t rows) { return unsigned(std::min<int64_t>(std::max<int64_t>(rows, 1), 65535 * 4)); }

void check_float(const Tensor& x, const char* op) {
  if (x.dtype() != DType::f32 && x.dtype() != DType::f64)
    throw std::logic_error(std::string(op) + ": expects float32 or float64 (the ops layer widens), found " +
                           std::string(dtype_name(x.dtype())));
}

void check_norm_args(const char* op, Device dev, const Tensor& x, std::initializer_list<const Tensor*> others) {
  check_float(x, op);
  require_on(x, dev, op);
  if (!x.is_contiguous()) throw std::logic_error(std::string(op) + ": x must be contiguous");
  for (const Tensor* t : others) {
    if (!t->defined()) continue;
    require_on(*t, dev, op);
    if (!t->is_contiguous()) throw std::logic_error(std::string(op) + ": every tensor must be contiguous");
    if (t->dtype() != x.dtype()) throw std::logic_error(std::string(op) + ": mixed dtypes reached the kernel");
  }
}

template <typename T>
const T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.raw_data()) : nullptr;
}
template <typename T>
T* mut(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.raw_data()) : nullptr;
}

// Calls f(T{}) for float or double x.
template <typename F>
void dispatch_float(const Tensor& x, F&& f) {
  if (x.dtype() == DType::f64) f(double{});
  else f(float{});
}

void norm_forward(CudaBackend& be, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                  const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  const int64_t C = x.size(-1), N = rstd.numel();  // rows counted by rstd: x may have C = 0
  if (N == 0) return;
  cudaStream_t stream = be.activate();
  const int threads = threads_for_row(C);
  dispatch_float(x, [&](auto tag) {
    using T = decltype(tag);
    norm_forward_kernel<T><<<grid_rows(N), threads, threads * sizeof(T), stream>>>(
        N, C, ptr<T>(x), ptr<T>(weight), ptr<T>(bias), T(eps), mut<T>(y), mut<T>(mean), mut<T>(rstd));
  });
  MVGPT_CUDA_CHECK_LAUNCH();
}

void norm_backward(CudaBackend& be, const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                   const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias) {
  const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
  cudaStream_t stream = be.activate();
  dispatch_float(x, [&](auto tag) {
    using T = decltype(tag);
    if (dx.defined() && N > 0) {
      const int threads = threads_for_row(C);
      norm_backward_dx_kernel<T><<<grid_rows(N), threads, threads * sizeof(T), stream>>>(
          N, C, ptr<T>(dy), ptr<T>(x), ptr<T>(weight), ptr<T>(mean), ptr<T>(rstd), mut<T>(dx));
      MVGPT_CUDA_CHECK_LAUNCH();
    }
    if ((!dweight.defined() && !dbias.defined()) || C == 0) return;
    const int64_t chunk_rows = norm_chunk_rows(N);
    const int64_t nchunks = (N + chunk_rows - 1) / chunk_rows;
    if (nchunks == 0) {  // no rows: the sums are empty
      if (dweight.defined()) be.fill(dweight, 0.0);
      if (dbias.defined()) be.fill(dbias, 0.0);
      return;
    }
    Tensor dw_part = dweight.defined() ? be.scratch({nchunks, C}, x.dtype()) : Tensor();
    Tensor db_part = dbias.defined() ? be.scratch({nchunks, C}, x.dtype()) : Tensor();
    const dim3 grid(unsigned((C + kThreads - 1) / kThreads), unsigned(nchunks));
    norm_param_partial_kernel<T><<<grid, kThreads, 0, stream>>>(N, C, chunk_rows, ptr<T>(dy), ptr<T>(x), ptr<T>(mean),
                                                                ptr<T>(rstd), mut<T>(dw_part), mut<T>(db_part));
    MVGPT_CUDA_CHECK_LAUNCH();
    if (dweight.defined())
      sum_chunks_kernel<T><<<blocks_for(C), kThreads, 0, stream>>>(nchunks, C, ptr<T>(dw_part), mut<T>(dweight));
    if (dbias.defined())
      sum_chunks_kernel<T><<<blocks_for(C), kThreads, 0, stream>>>(nchunks, C, ptr<T>(db_part), mut<T>(dbias));
    MVGPT_CUDA_CHECK_LAUNCH();
  });
}

AttnDims attn_dims(const Tensor& q, const Tensor& k, bool causal) {
  AttnDims d{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3), 1, 0, causal};
  d.group = d.Hkv ? d.H / d.Hkv : 1;
  d.offset = d.Tk - d.Tq;
  return d;
}

void check_attention(const char* op, Device dev, std::initializer_list<const Tensor*> views,
                     std::initializer_list<const Tensor*> outputs) {
  for (const Tensor* t : views) {
    check_float(*t, op);
    require_on(*t, dev, op);
    if (t->dim() != 4 || (t->size(3) > 1 && t->strides()[3] != 1))
      throw std::logic_error(std::string(op) + ": inputs must be (B, H, T, D) with a unit stride on D, found strides " +
                             to_string(t->strides()));
  }
  for (const Tensor* t : outputs) {
    require_on(*t, dev, op);
    if (!t->is_contiguous()) throw std::logic_error(std::string(op) + ": outputs must be contiguous");
  }
}

// Dynamic shared memory of an attention kernel; the default limit (48 KiB) bounds the head size.
size_t attention_shared(const char* op, int64_t D, int64_t rows_of_d, size_t elem, int64_t extra) {
  const size_t bytes = size_t(rows_of_d * D + extra) * elem;
  if (bytes > 48 * 1024)
    throw std::invalid_argument(std::string(op) + ": head size " + std::to_string(D) +
                                " is too large for the CUDA attention kernel (at most about 1000 channels)");
  return bytes;
}

}  // namespace

void CudaBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                             const Tensor& mean, const Tensor& rstd) {
  check_norm_args("CudaBackend::layer_norm", device(), x, {&weight, &bias, &y, &mean, &rstd});
  norm_forward(*this, x, weight, bias, eps, y, mean, rstd);
}

void CudaBackend::layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                                      const Tensor& dbias) {
  check_norm_args("CudaBackend::layer_norm_backward", device(), x, {&dy, &weight, &mean, &rstd, &dx, &dweight, &dbias});
  norm_backward(*this, dy, x, weight, mean, rstd, dx, dweight, dbias);
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, const Tensor& rstd) {
  check_norm_args("CudaBackend::rms_norm", device(), x, {&weight, &y, &rstd});
  norm_forward(*this, x, weight, Tensor(), eps, y, Tensor(), rstd);
}

void CudaBackend::rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                    const Tensor& dx, const Tensor& dweight) {
  check_norm_args("CudaBackend::rms_norm_backward", device(), x, {&dy, &weight, &rstd, &dx, &dweight});
  norm_backward(*this, dy, x, weight, Tensor(), rstd, dx, dweight, Tensor());
}

void CudaBackend::rope(const Tensor& x, const Tensor& positions, double base, RopeLayout layout, bool inverse,
                       double position_scale, const Tensor& out) {
  const char* op = "CudaBackend::rope";
  check_float(x, op);
  for (const Tensor* t : {&x, &positions, &out}) require_on(*t, device(), op);
  if (x.dim() > 0 && x.size(-1) > 1 && x.strides()[x.dim() - 1] != 1)
    throw std::logic_error("CudaBackend::rope: x must have a unit stride on its last axis");
  if (!positions.is_contiguous() || !out.is_contiguous())
    throw std::logic_error("CudaBackend::rope: positions and out must be contiguous");
  const bool batched = x.dim() == 4;  // (B, H, T, D), else (H, T, D)
  const int64_t B = batched ? x.size(0) : 1, H = x.size(-3), Tn = x.size(-2), D = x.size(-1);
  const int64_t sb = batched ? x.strides()[0] : 0, sh = x.strides()[x.dim() - 3], st = x.strides()[x.dim() - 2];
  const int64_t n = B * H * Tn * (D / 2);
  if (n == 0) return;
  cudaStream_t stream = activate();
  const bool per_sequence = positions.dim() == 2;
  const bool interleaved = layout == RopeLayout::interleaved;
  const double sign = inverse ? -1.0 : 1.0;
  dispatch_float(x, [&](auto tag) {
    using T = decltype(tag);
    auto launch = [&](auto itag) {
      using I = decltype(itag);
      rope_kernel<T, I><<<blocks_for(n), kThreads, 0, stream>>>(B, H, Tn, D, sb, sh, st, ptr<T>(x), ptr<I>(positions),
                                                                per_sequence, base, position_scale, sign, interleaved,
                                                                mut<T>(out));
    };
    if (positions.dtype() == DType::i64) launch(int64_t{});
    else if (positions.dtype() == DType::i32) launch(int32_t{});
    else throw std::logic_error("CudaBackend::rope: positions must be int32 or int64");
  });
  MVGPT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal,
                            const Tensor& out, const Tensor& lse) {
  const char* op = "CudaBackend::attention";
  check_attention(op, device(), {&q, &k, &v}, {&out, &lse});
  const AttnDims d = attn_dims(q, k, causal);
  const int64_t rows = d.B * d.H * d.Tq;
  if (rows == 0) return;
  cudaStream_t stream = activate();
  dispatch_float(q, [&](auto tag) {
    using T = decltype(tag);
    const size_t shared = attention_shared(op, d.D, 2, sizeof(T), kTile + kAttnThreads);
    attention_forward_kernel<T><<<grid_rows(rows), kAttnThreads, shared, stream>>>(
        d, rows_of<T>(q), rows_of<T>(k), rows_of<T>(v), T(scale), mut<T>(out), mut<T>(lse));
  });
  MVGPT_CUDA_CHECK_LAUNCH();
}

void CudaBackend::attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& out, const Tensor& lse, double scale, bool causal,
                                     const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const char* op = "CudaBackend::attention_backward";
  check_attention(op, device(), {&dout, &q, &k, &v, &out}, {&lse, &dq, &dk, &dv});
  const AttnDims d = attn_dims(q, k, causal);
  if (d.D == 0) return;  // dq, dk, dv are empty
  cudaStream_t stream = activate();
  const int64_t qrows = d.B * d.H * d.Tq, krows = d.B * d.Hkv * d.Tk;
  dispatch_float(q, [&](auto tag) {
    using T = decltype(tag);
    Tensor di = scratch({std::max<int64_t>(qrows, 1)}, q.dtype());
    if (qrows > 0) {
      attention_rowdot_kernel<T><<<blocks_for(qrows), kThreads, 0, stream>>>(d, rows_of<T>(dout), rows_of<T>(out),
                                                                             mut<T>(di));
      MVGPT_CUDA_CHECK_LAUNCH();
      const size_t shared = attention_shared(op, d.D, 3, sizeof(T), kTile);
      attention_dq_kernel<T><<<grid_rows(qrows), kAttnThreads, shared, stream>>>(
          d, rows_of<T>(q), rows_of<T>(k), rows_of<T>(v), rows_of<T>(dout), ptr<T>(lse), ptr<T>(di), T(scale),
          mut<T>(dq));
      MVGPT_CUDA_CHECK_LAUNCH();
    }
    if (krows > 0) {
      const size_t shared = attention_shared(op, d.D, 2, sizeof(T), 2 * kTile);
      attention_dkdv_kernel<T><<<grid_rows(krows), kAttnThreads, shared, stream>>>(
          d, rows_of<T>(q), rows_of<T>(k), rows_of<T>(v), rows_of<T>(dout), ptr<T>(lse), ptr<T>(di), T(scale),
          mut<T>(dk), mut<T>(dv));
      MVGPT_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace mvgpt::cuda
