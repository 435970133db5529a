// The CUDA kernels of attention (autograd/fused/attention.h): the CPU kernel's math in the simplest
// parallel shape that needs no atomics, so results are deterministic.
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
#include <mvgpt/fused/attention.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include <mvgpt/backends/cuda/cuda_backend_impl.h>
#include <mvgpt/backends/cuda/cuda_kernels.cuh>
#include <mvgpt/backends/cuda/fused_host.h>

namespace mvgpt::fused {
namespace {

using namespace mvgpt::cuda;

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

CudaBackend& backend_of(const Tensor& x) { return static_cast<CudaBackend&>(backend_for(x.device())); }

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

// bf16_products is not used: these kernels compute in float32 (attention.h).
void forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal, bool /*bf16_products*/,
             const Tensor& out, const Tensor& lse) {
  const char* op = "attention (cuda)";
  CudaBackend& be = backend_of(q);
  check_attention(op, q.device(), {&q, &k, &v}, {&out, &lse});
  const AttnDims d = attn_dims(q, k, causal);
  const int64_t rows = d.B * d.H * d.Tq;
  if (rows == 0) return;
  cudaStream_t stream = be.activate();
  dispatch_float(q, [&](auto tag) {
    using T = decltype(tag);
    const size_t shared = attention_shared(op, d.D, 2, sizeof(T), kTile + kAttnThreads);
    attention_forward_kernel<T><<<grid_rows(rows), kAttnThreads, shared, cuda::counted(stream)>>>(
        d, rows_of<T>(q), rows_of<T>(k), rows_of<T>(v), T(scale), mut<T>(out), mut<T>(lse));
  });
  MVGPT_CUDA_CHECK_LAUNCH();
}

void backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
              const Tensor& lse, double scale, bool causal, bool /*bf16_products*/, const Tensor& dq, const Tensor& dk,
              const Tensor& dv) {
  const char* op = "attention_backward (cuda)";
  CudaBackend& be = backend_of(q);
  check_attention(op, q.device(), {&dout, &q, &k, &v, &out}, {&lse, &dq, &dk, &dv});
  const AttnDims d = attn_dims(q, k, causal);
  if (d.D == 0) return;  // dq, dk, dv are empty
  cudaStream_t stream = be.activate();
  const int64_t qrows = d.B * d.H * d.Tq, krows = d.B * d.Hkv * d.Tk;
  dispatch_float(q, [&](auto tag) {
    using T = decltype(tag);
    Tensor di = be.scratch({std::max<int64_t>(qrows, 1)}, q.dtype());
    if (qrows > 0) {
      attention_rowdot_kernel<T><<<blocks_for(qrows), kThreads, 0, cuda::counted(stream)>>>(d, rows_of<T>(dout), rows_of<T>(out),
                                                                             mut<T>(di));
      MVGPT_CUDA_CHECK_LAUNCH();
      const size_t shared = attention_shared(op, d.D, 3, sizeof(T), kTile);
      attention_dq_kernel<T><<<grid_rows(qrows), kAttnThreads, shared, cuda::counted(stream)>>>(
          d, rows_of<T>(q), rows_of<T>(k), rows_of<T>(v), rows_of<T>(dout), ptr<T>(lse), ptr<T>(di), T(scale),
          mut<T>(dq));
      MVGPT_CUDA_CHECK_LAUNCH();
    }
    if (krows > 0) {
      const size_t shared = attention_shared(op, d.D, 2, sizeof(T), 2 * kTile);
      attention_dkdv_kernel<T><<<grid_rows(krows), kAttnThreads, shared, cuda::counted(stream)>>>(
          d, rows_of<T>(q), rows_of<T>(k), rows_of<T>(v), rows_of<T>(dout), ptr<T>(lse), ptr<T>(di), T(scale),
          mut<T>(dk), mut<T>(dv));
      MVGPT_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace

AttentionKernels attention_cuda_kernels() { return {forward, backward}; }

}  // namespace mvgpt::fused
