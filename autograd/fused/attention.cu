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
// These per-row kernels are the reference of the batched route below and still run for fewer than
// 16 queries (decoding), where one launch beats six.
//
// NOTE [ Attention through batched products ]
// The per-row kernels re-read K and V from global memory for every query and never touch the tensor
// cores: at the series' shape (64 x 256, 6 heads of 64) attention was most of a GPU step. From 16
// queries on, attention runs as cuBLAS strided-batched products around small elementwise kernels,
// FlashAttention's math without its tiling: the (Tq, Tk) scores are materialised, which at T <= 1024
// costs less memory than the activations around them (64 x 6 x 256 x 256 fp32 scores: 100 MB), and
// cuBLAS's tuned tiles then do the work on tensor cores.
//   A batch is one kv head of one sequence, u = b Hkv + hk. The `group` query heads that share that
//   kv head are stacked as rows: with q contiguous (B, H, Tq, D), the rows of unit u are the
//   (group Tq, D) matrix at u group Tq D, so grouped heads need no repeated K or V, and the backward's
//   dK and dV sum over the group inside the product. Score row r = u group Tq + g Tq + i is the
//   (b, h, i) row of lse, h = hk group + g.
//   Forward:  S = Q K^T (one GEMM over all units); a row kernel takes the causal softmax
//             (P = exp(scale S - lse) on the visible keys, 0 beyond; lse = m + log l); O = P V.
//   Backward: D_i = rowsum(dO_i O_i); S = Q K^T and dP = dO V^T (recomputed, not stored: the
//             forward keeps only lse, as the per-row kernels); an elementwise kernel makes
//             P and dS = scale P (dP - D_i) (scale folded in once); dV = P^T dO, dQ = dS K,
//             dK = dS^T Q. Five GEMMs, two small kernels, no atomics: deterministic.
// Operands: q, k, v (and dO) are packed once into contiguous buffers of the products' type, which
// also rounds them to bfloat16 when bf16_products asks for it on a GPU with bf16 tensor cores
// (sm_80 on); P and dS are written in that type by the kernels that make them. Scores, lse and
// everything summed stay in the compute dtype (float32 or float64); float32 GEMMs run without TF32.
// Memory: a scores buffer holds at most kScoreBudget bytes (the forward holds S, and P when it is
// bfloat16; the backward S and dP, and P and dS when they are bfloat16: up to 3x the budget);
// larger batches run in slices of whole units. A unit whose scores alone exceed the budget (very
// long contexts) runs per row.
// Against the CPU kernels under bf16_products: the same operands are rounded, but dS is rounded
// after the scale is folded in (the CPU scales the product instead), so for a scale that is not a
// power of two dq and dk may differ by a bfloat16 step; float32 and float64 agree to rounding.
// Masked keys enter the products as exact zeros of P and dS; like the per-row kernels' skipped
// keys, they contribute nothing unless a masked key's v or k is itself infinite or NaN.
#include <mvgpt/fused/attention.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <mvgpt/backends/cuda/cuda_backend_impl.h>
#include <mvgpt/backends/cuda/cuda_gemm.h>
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

// ------------------------------------------------------------------ the batched route's kernels

// A product operand's element: float and double as they are, bfloat16 as its bits (rounded to
// nearest even, as the CPU rounds).
__device__ inline void put(float* dst, int64_t i, float x) { dst[i] = x; }
__device__ inline void put(double* dst, int64_t i, double x) { dst[i] = x; }
__device__ inline void put(uint16_t* dst, int64_t i, float x) { dst[i] = math::float_to_bf16_bits(x); }

// (B, heads, T, D) rows with a unit stride on D -> a contiguous (B, heads, T, D) buffer of TA.
template <typename T, typename TA>
__global__ void pack_heads_kernel(int64_t heads, int64_t T_, int64_t D, int64_t n, Rows<T> src, TA* dst) {
  MVGPT_GRID_STRIDE(e, n) {
    const int64_t c = e % D, t = (e / D) % T_, h = (e / (D * T_)) % heads, b = e / (D * T_ * heads);
    put(dst, e, src.at(b, h, t)[c]);
  }
}

// One block per score row r in [row0, row0 + rows) (rows of S and P start at row0): the causal
// softmax of scale S over the visible keys into P (0 beyond them), and lse. P may be S itself (no
// __restrict__): each element is read and then written by the same thread, after the reductions. A row that sees no key,
// or only -inf scores, gets P = 0 and lse = -inf, as the per-row kernel gives it.
template <typename T, typename TA>
__global__ void batched_softmax_kernel(AttnDims d, int64_t row0, int64_t rows, const T* S, T scale, TA* P, T* lse) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* red = reinterpret_cast<T*>(smem);  // (blockDim.x)
  for (int64_t rl = blockIdx.x; rl < rows; rl += gridDim.x) {
    const int64_t r = row0 + rl, n = d.visible(r % d.Tq);
    const T* s = S + rl * d.Tk;
    T m = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = max_nan(m, scale * s[j]);
    m = block_reduce(m, red, MaxOp{});
    T l = 0;
    if (m != -INFINITY)
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) l += math::m_exp(scale * s[j] - m);
    l = block_reduce(l, red, SumOp{});
    const bool empty = n == 0 || m == -INFINITY;
    for (int64_t j = threadIdx.x; j < d.Tk; j += blockDim.x)
      put(P + rl * d.Tk, j, (empty || j >= n) ? T(0) : math::m_exp(scale * s[j] - m) / l);
    if (threadIdx.x == 0) lse[r] = empty ? T(-INFINITY) : m + math::m_log(l);
  }
}

// Element (r, j) of rows [row0, row0 + rows): P = exp(scale S - lse) on the visible keys (0 beyond,
// and 0 for a row whose lse is -inf), dS = scale P (dP - D_r) (0 where P is masked). P and dS may be
// S and dP themselves (no __restrict__): element e is read, then written, by one thread only.
template <typename T, typename TA>
__global__ void batched_dscores_kernel(AttnDims d, int64_t row0, int64_t rows, const T* S, const T* dP, const T* lse,
                                       const T* Di, T scale, TA* P, TA* dS) {
  MVGPT_GRID_STRIDE(e, rows * d.Tk) {
    const int64_t rl = e / d.Tk, j = e % d.Tk, r = row0 + rl;
    const T lse_r = lse[r];
    const bool masked = j >= d.visible(r % d.Tq) || lse_r == -INFINITY;
    const T p = masked ? T(0) : math::m_exp(scale * S[e] - lse_r);
    const T ds = masked ? T(0) : scale * (p * (dP[e] - Di[r]));  // a masked dP may be anything
    put(P, e, p);
    put(dS, e, ds);
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

// --- the batched route (NOTE [ Attention through batched products ])

constexpr int64_t kBatchedMinQueries = 16;
constexpr int64_t kScoreBudget = int64_t(256) << 20;  // bytes of one scores buffer

// Units (b, hk) per slice, or 0 when the batched route does not take this shape.
int64_t batched_units_per_slice(const AttnDims& d, size_t elem) {
  const CudaAttentionRoute route = cuda_attention_route();
  if (route == CudaAttentionRoute::rows) return 0;
  if (d.B == 0 || d.H == 0 || d.Hkv == 0 || d.Tq == 0 || d.Tk == 0 || d.D == 0) return 0;  // empties: per row
  const int64_t budget = cuda_attention_score_budget() > 0 ? cuda_attention_score_budget() : kScoreBudget;
  const int64_t unit_bytes = d.group * d.Tq * d.Tk * int64_t(elem);
  if (route == CudaAttentionRoute::automatic && (d.Tq < kBatchedMinQueries || unit_bytes > budget)) return 0;
  return std::max<int64_t>(1, std::min(d.B * d.Hkv, budget / unit_bytes));
}

// The products' operands: bfloat16 when asked for on a GPU with bf16 tensor cores, else the compute
// dtype (so the per-row kernels and this route then agree to rounding).
bool bf16_operands(CudaBackend& be, bool bf16_products, DType compute) {
  return bf16_products && compute == DType::f32 && be.bf16_tensor_cores();
}

// t as a contiguous (B, heads, T, D) operand of dtype `as`: t itself when it already is one.
template <typename T, typename TA>
Tensor operand(CudaBackend& be, cudaStream_t stream, const Tensor& t, DType as) {
  if (t.dtype() == as && t.is_contiguous()) return t;
  Tensor packed = be.scratch(t.shape(), as);
  const int64_t n = t.numel();
  pack_heads_kernel<T, TA><<<blocks_for(n), kThreads, 0, cuda::counted(stream)>>>(t.size(1), t.size(2), t.size(3), n,
                                                                                   rows_of<T>(t), mut<TA>(packed));
  MVGPT_CUDA_CHECK_LAUNCH();
  return packed;
}

// cuBLAS's element type of a product operand of kernel type TA (bfloat16 bits: uint16_t).
template <typename TA>
using GemmType = std::conditional_t<std::is_same_v<TA, uint16_t>, bfloat16, TA>;
template <typename TA>
const GemmType<TA>* gemm_ptr(const Tensor& t, int64_t offset) {
  return reinterpret_cast<const GemmType<TA>*>(static_cast<const TA*>(t.raw_data()) + offset);
}

template <typename T, typename TA>
void forward_batched(CudaBackend& be, cudaStream_t stream, const AttnDims& d, int64_t per_slice, const Tensor& q,
                     const Tensor& k, const Tensor& v, T scale, DType operand_dtype, const Tensor& out,
                     const Tensor& lse) {
  const Tensor Q = operand<T, TA>(be, stream, q, operand_dtype), K = operand<T, TA>(be, stream, k, operand_dtype),
               V = operand<T, TA>(be, stream, v, operand_dtype);
  const int64_t units = d.B * d.Hkv, G = d.group * d.Tq;  // G: score rows of one unit
  const int64_t slice = std::min(per_slice, units);
  Tensor S = be.scratch({slice * G, d.Tk}, out.dtype());
  Tensor P = std::is_same_v<T, TA> ? S : be.scratch({slice * G, d.Tk}, operand_dtype);  // P may overwrite S
  cublasHandle_t h = be.cublas();
  for (int64_t u0 = 0; u0 < units; u0 += slice) {
    const int64_t U = std::min(slice, units - u0), rows = U * G;
    gemm<GemmType<TA>, T>(h, false, true, G, d.Tk, d.D, gemm_ptr<TA>(Q, u0 * G * d.D), d.D, G * d.D,
                          gemm_ptr<TA>(K, u0 * d.Tk * d.D), d.D, d.Tk * d.D, mut<T>(S), d.Tk, G * d.Tk, U);
    batched_softmax_kernel<T, TA><<<grid_rows(rows), threads_for_row(d.Tk), threads_for_row(d.Tk) * sizeof(T),
                                    cuda::counted(stream)>>>(d, u0 * G, rows, ptr<T>(S), scale, mut<TA>(P), mut<T>(lse));
    MVGPT_CUDA_CHECK_LAUNCH();
    gemm<GemmType<TA>, T>(h, false, false, G, d.D, d.Tk, gemm_ptr<TA>(P, 0), d.Tk, G * d.Tk,
                          gemm_ptr<TA>(V, u0 * d.Tk * d.D), d.D, d.Tk * d.D, mut<T>(out) + u0 * G * d.D, d.D, G * d.D,
                          U);
  }
}

template <typename T, typename TA>
void backward_batched(CudaBackend& be, cudaStream_t stream, const AttnDims& d, int64_t per_slice, const Tensor& dout,
                      const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, T scale,
                      DType operand_dtype, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const int64_t qrows = d.B * d.H * d.Tq;
  Tensor di = be.scratch({qrows}, dq.dtype());
  attention_rowdot_kernel<T><<<blocks_for(qrows), kThreads, 0, cuda::counted(stream)>>>(d, rows_of<T>(dout),
                                                                                        rows_of<T>(out), mut<T>(di));
  MVGPT_CUDA_CHECK_LAUNCH();
  const Tensor Q = operand<T, TA>(be, stream, q, operand_dtype), K = operand<T, TA>(be, stream, k, operand_dtype),
               V = operand<T, TA>(be, stream, v, operand_dtype), dO = operand<T, TA>(be, stream, dout, operand_dtype);
  const int64_t units = d.B * d.Hkv, G = d.group * d.Tq;
  const int64_t slice = std::min(per_slice, units);
  Tensor S = be.scratch({slice * G, d.Tk}, dq.dtype()), dP = be.scratch({slice * G, d.Tk}, dq.dtype());
  // P and dS may overwrite S and dP: each element is read once, then written, by one thread.
  Tensor P = std::is_same_v<T, TA> ? S : be.scratch({slice * G, d.Tk}, operand_dtype);
  Tensor dS = std::is_same_v<T, TA> ? dP : be.scratch({slice * G, d.Tk}, operand_dtype);
  cublasHandle_t h = be.cublas();
  for (int64_t u0 = 0; u0 < units; u0 += slice) {
    const int64_t U = std::min(slice, units - u0), rows = U * G;
    const auto* Qu = gemm_ptr<TA>(Q, u0 * G * d.D);
    const auto* dOu = gemm_ptr<TA>(dO, u0 * G * d.D);
    const auto* Ku = gemm_ptr<TA>(K, u0 * d.Tk * d.D);
    const auto* Vu = gemm_ptr<TA>(V, u0 * d.Tk * d.D);
    gemm<GemmType<TA>, T>(h, false, true, G, d.Tk, d.D, Qu, d.D, G * d.D, Ku, d.D, d.Tk * d.D, mut<T>(S), d.Tk,
                          G * d.Tk, U);
    gemm<GemmType<TA>, T>(h, false, true, G, d.Tk, d.D, dOu, d.D, G * d.D, Vu, d.D, d.Tk * d.D, mut<T>(dP), d.Tk,
                          G * d.Tk, U);
    batched_dscores_kernel<T, TA><<<blocks_for(rows * d.Tk), kThreads, 0, cuda::counted(stream)>>>(
        d, u0 * G, rows, ptr<T>(S), ptr<T>(dP), ptr<T>(lse), ptr<T>(di), scale, mut<TA>(P), mut<TA>(dS));
    MVGPT_CUDA_CHECK_LAUNCH();
    // dV = P^T dO and dK = dS^T Q: (Tk, G) (G, D), the sum over the group's queries inside the product.
    gemm<GemmType<TA>, T>(h, true, false, d.Tk, d.D, G, gemm_ptr<TA>(P, 0), d.Tk, G * d.Tk, dOu, d.D, G * d.D,
                          mut<T>(dv) + u0 * d.Tk * d.D, d.D, d.Tk * d.D, U);
    gemm<GemmType<TA>, T>(h, true, false, d.Tk, d.D, G, gemm_ptr<TA>(dS, 0), d.Tk, G * d.Tk, Qu, d.D, G * d.D,
                          mut<T>(dk) + u0 * d.Tk * d.D, d.D, d.Tk * d.D, U);
    // dQ = dS K: (G, Tk) (Tk, D).
    gemm<GemmType<TA>, T>(h, false, false, G, d.D, d.Tk, gemm_ptr<TA>(dS, 0), d.Tk, G * d.Tk, Ku, d.D, d.Tk * d.D,
                          mut<T>(dq) + u0 * G * d.D, d.D, G * d.D, U);
  }
}

// Runs the batched route when it takes this shape (returns false otherwise): T the compute type.
template <typename T>
bool try_forward_batched(CudaBackend& be, cudaStream_t stream, const AttnDims& d, const Tensor& q, const Tensor& k,
                         const Tensor& v, double scale, bool bf16_products, const Tensor& out, const Tensor& lse) {
  const int64_t per_slice = batched_units_per_slice(d, sizeof(T));
  if (per_slice == 0) return false;
  if (bf16_operands(be, bf16_products, q.dtype()))
    forward_batched<float, uint16_t>(be, stream, d, per_slice, q, k, v, float(scale), DType::bf16, out, lse);
  else
    forward_batched<T, T>(be, stream, d, per_slice, q, k, v, T(scale), q.dtype(), out, lse);
  return true;
}

template <typename T>
bool try_backward_batched(CudaBackend& be, cudaStream_t stream, const AttnDims& d, const Tensor& dout, const Tensor& q,
                          const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, double scale,
                          bool bf16_products, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const int64_t per_slice = batched_units_per_slice(d, sizeof(T));
  if (per_slice == 0) return false;
  if (bf16_operands(be, bf16_products, q.dtype()))
    backward_batched<float, uint16_t>(be, stream, d, per_slice, dout, q, k, v, out, lse, float(scale), DType::bf16, dq,
                                      dk, dv);
  else
    backward_batched<T, T>(be, stream, d, per_slice, dout, q, k, v, out, lse, T(scale), q.dtype(), dq, dk, dv);
  return true;
}

// --- entry points: the batched route where it takes the shape, else the per-row kernels (which
// compute in float32 whatever bf16_products asks, attention.h).

void forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal, bool bf16_products,
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
    if (try_forward_batched<T>(be, stream, d, q, k, v, scale, bf16_products, out, lse)) return;
    const size_t shared = attention_shared(op, d.D, 2, sizeof(T), kTile + kAttnThreads);
    attention_forward_kernel<T><<<grid_rows(rows), kAttnThreads, shared, cuda::counted(stream)>>>(
        d, rows_of<T>(q), rows_of<T>(k), rows_of<T>(v), T(scale), mut<T>(out), mut<T>(lse));
  });
  MVGPT_CUDA_CHECK_LAUNCH();
}

void backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
              const Tensor& lse, double scale, bool causal, bool bf16_products, const Tensor& dq, const Tensor& dk,
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
    if (try_backward_batched<T>(be, stream, d, dout, q, k, v, out, lse, scale, bf16_products, dq, dk, dv)) return;
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
