// The CPU kernels of attention (autograd/fused/attention.h): scaled dot-product attention with an
// optional causal mask, forward and backward.
//
// NOTE [ Attention on the CPU ]
// Forward: parallel over (batch, head, query block). Each task computes the scores of a block of
// query rows against the keys it can see with one GEMM, a row softmax (saving the log-sum-exp), and
// one more GEMM with V. Scratch is a thread-local (block, Tk) buffer; no (T, T) tensor is made.
// Backward (FlashAttention style): the probabilities are recomputed from q, k and the saved lse,
// P = exp(S - lse); then dV += P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dO * O)), dQ = dS K * scale,
// dK += dS^T Q * scale. A task owns one (batch, query head) and walks its query blocks in order, so
// dK/dV accumulate without races; with grouped kv heads each query head accumulates into its own
// buffer and the group's buffers are added in head order (deterministic).
// The per-block products go to OpenBLAS, single-threaded inside the TBB loop. Measured against
// vectorized loops (per row: dot products over D, then axpy over D) with bench/bench_fused.cpp on
// one thread of the 2-core Zen 3 machine, same load: causal forward B=16, H=6, T=256, D=64 takes
// 45 ms with GEMMs vs 149 ms with loops; decode (Tq=1, Tk=256) takes 1.15 ms with loops vs 3.4 ms
// with 1-row GEMMs (all call and packing overhead). So blocks of several rows use GEMMs and
// single-row blocks use the loops.
// bf16_products (NOTE [ Precision policy ] in autograd/precision.h): every GEMM above rounds its two
// operands to bfloat16 into thread-local buffers and sums in float32 (oneDNN, one thread, through
// blas::gemm); the softmax, the row sums and the single-row (decoding) loops stay float32.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include <mvgpt/backends/backend.h>
#include <mvgpt/backends/cpu/blas.h>
#include <mvgpt/backends/cpu/fused_common.h>
#include <mvgpt/backends/cpu/parallel.h>
#include <mvgpt/fused/attention.h>

namespace mvgpt::fused {
namespace {

using cpu::parallel_for;
namespace vec = cpu::fused;


// Query rows per task: a (64, Tk) score block stays in L2 for the model's Tk.
constexpr int64_t kQueryBlock = 64;

// C (M, N) = alpha op(A) op(B) + beta C, row-major.
inline void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(K),
              alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
}
inline void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
                 const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(K),
              alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
}

// X stored as rows x cols with leading dimension ld, rounded to bfloat16 into a dense buffer. The
// buffer only grows: resizing it to each block's size would zero-fill (bfloat16 value-initializes)
// element by element as many bytes as the rounding writes.
void round_to_bf16(const float* x, int64_t rows, int64_t cols, int64_t ld, std::vector<bfloat16>& out) {
  if (out.size() < size_t(rows * cols)) out.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) vec::round_to_bf16(x + r * ld, cols, out.data() + r * cols);
}

// The products of one kernel call: as they are, or (bf16) with both operands rounded to bfloat16
// and the products summed in float32.
template <typename T>
struct Products {
  bool bf16 = false;
  void operator()(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
                  int64_t ldb, T beta, T* C, int64_t ldc) const {
    if constexpr (std::is_same_v<T, float>) {
      if (bf16) {
        thread_local std::vector<bfloat16> a, b;
        const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
        round_to_bf16(A, ar, ac, lda, a);
        round_to_bf16(B, br, bc, ldb, b);
        cpu::blas::gemm(ta, tb, M, N, K, alpha, a.data(), std::max<int64_t>(ac, 1), b.data(), std::max<int64_t>(bc, 1),
                        beta, C, ldc, /*parallel=*/false);
        return;
      }
    }
    gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
};

// OpenBLAS runs its own threads; inside a TBB task that would oversubscribe the cores.
class SingleThreadedBlas {
 public:
  SingleThreadedBlas() : saved_(openblas_get_num_threads()) {
    if (saved_ != 1) openblas_set_num_threads(1);
  }
  ~SingleThreadedBlas() {
    if (saved_ != 1) openblas_set_num_threads(saved_);
  }
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;

 private:
  int saved_;
};

// Strided (B, H, T, D) addressing with a unit stride on D.
template <typename T>
struct Heads {
  const T* data;
  int64_t sb, sh, st;
  explicit Heads(const Tensor& t)
      : data(t.data<T>()), sb(t.strides()[0]), sh(t.strides()[1]),
        // A single row may carry any stride; BLAS wants a leading dimension of at least D.
        st(t.size(2) == 1 ? std::max<int64_t>(t.size(3), 1) : t.strides()[2]) {
    if (t.size(2) > 1 && st < std::max<int64_t>(t.size(3), 1))
      throw std::logic_error("attention (cpu): rows of a (B, H, T, D) input overlap (stride " +
                             std::to_string(st) + " on T); the ops layer must pass a copy");
  }
  const T* at(int64_t b, int64_t h, int64_t t = 0) const { return data + b * sb + h * sh + t * st; }
};

// Shapes shared by forward and backward.
struct Dims4 {
  int64_t B, H, Hkv, Tq, Tk, D, group, offset;  // offset: the key index of query 0
};
Dims4 dims_of(const Tensor& q, const Tensor& k) {
  Dims4 d{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3), 0, 0};
  d.group = d.Hkv ? d.H / d.Hkv : 1;
  d.offset = d.Tk - d.Tq;
  return d;
}

// Keys visible to query row i: [0, n).
inline int64_t visible_keys(const Dims4& d, bool causal, int64_t i) {
  return causal ? std::clamp<int64_t>(d.offset + i + 1, 0, d.Tk) : d.Tk;
}

// Softmax of the (already scaled) rows of s (rows, ld) in place over their visible keys; writes lse
// and zeroes the masked tail up to `width`.
template <typename T>
void softmax_rows(T* s, int64_t rows, int64_t ld, int64_t width, const Dims4& d, bool causal, int64_t i0, T* lse) {
  for (int64_t r = 0; r < rows; ++r) {
    T* sr = s + r * ld;
    const int64_t n = visible_keys(d, causal, i0 + r);
    const T m = vec::row_max(sr, n);
    if (n == 0 || m == -INFINITY) {  // no visible key (Tk = 0) or all -inf
      for (int64_t j = 0; j < width; ++j) sr[j] = 0;
      lse[r] = -INFINITY;
      continue;
    }
    const T l = vec::exp_shifted(sr, n, m, T(1), sr);
    const T inv = T(1) / l;
    for (int64_t j = 0; j < n; ++j) sr[j] *= inv;
    for (int64_t j = n; j < width; ++j) sr[j] = 0;
    lse[r] = m + std::log(l);
  }
}

// One query row by loops: scores by dot products over D, then out = sum_j p_j v_j. Used for
// single-row blocks (decode), where a GEMM call costs more than the work.
template <typename T>
void attend_row(const T* qr, const Heads<T>& K, const Heads<T>& V, int64_t b, int64_t hk, int64_t n, int64_t D, T scale,
                T* s, T* o, T* lse) {
  for (int64_t j = 0; j < n; ++j) {
    const T* kr = K.at(b, hk, j);
    s[j] = scale * vec::row_dot(qr, kr, D);
  }
  for (int64_t c = 0; c < D; ++c) o[c] = 0;
  const T m = vec::row_max(s, n);
  if (n == 0 || m == -INFINITY) {
    *lse = -INFINITY;
    return;
  }
  const T l = vec::exp_shifted(s, n, m, T(1), s);
  for (int64_t j = 0; j < n; ++j) {
    const T* vr = V.at(b, hk, j);
    const T p = s[j];
    for (int64_t c = 0; c < D; ++c) o[c] += p * vr[c];
  }
  const T inv = T(1) / l;
  for (int64_t c = 0; c < D; ++c) o[c] *= inv;
  *lse = m + std::log(l);
}

template <typename T>
void attention_rows(const Tensor& q, const Tensor& k, const Tensor& v, double scale_d, bool causal, bool bf16,
                    const Tensor& out, const Tensor& lse) {
  const Products<T> product{bf16};
  const Dims4 d = dims_of(q, k);
  const T scale = T(scale_d);
  const Heads<T> Q(q), K(k), V(v);
  T* op = out.data<T>();
  T* lp = lse.data<T>();
  const int64_t nblocks = (d.Tq + kQueryBlock - 1) / kQueryBlock;
  const int64_t tasks = d.B * d.H * nblocks;
  SingleThreadedBlas single;
  parallel_for(tasks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<T> scratch(static_cast<size_t>(std::min(d.Tq, kQueryBlock) * std::max<int64_t>(d.Tk, 1)));
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t blk = task % nblocks, h = (task / nblocks) % d.H, b = task / (nblocks * d.H);
      const int64_t hk = h / d.group;
      const int64_t i0 = blk * kQueryBlock, rows = std::min(kQueryBlock, d.Tq - i0);
      T* o = op + ((b * d.H + h) * d.Tq + i0) * d.D;
      T* l = lp + (b * d.H + h) * d.Tq + i0;
      if (rows == 1) {
        attend_row(Q.at(b, h, i0), K, V, b, hk, visible_keys(d, causal, i0), d.D, scale, scratch.data(), o, l);
        continue;
      }
      // Keys [0, width) cover every row of the block.
      const int64_t width = visible_keys(d, causal, i0 + rows - 1);
      if (width == 0) {
        std::fill(o, o + rows * d.D, T(0));
        std::fill(l, l + rows, T(-INFINITY));
        continue;
      }
      T* s = scratch.data();
      // S (rows, width) = scale Q_blk K^T.
      product(false, true, rows, width, d.D, scale, Q.at(b, h, i0), Q.st, K.at(b, hk), K.st, T(0), s, width);
      softmax_rows(s, rows, width, width, d, causal, i0, l);
      // O (rows, D) = P V.
      product(false, false, rows, d.D, width, T(1), s, width, V.at(b, hk), V.st, T(0), o, d.D);
    }
  });
}

template <typename T>
void attention_rows_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse, double scale_d, bool causal, bool bf16,
                             const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const Products<T> product{bf16};
  const Dims4 d = dims_of(q, k);
  const T scale = T(scale_d);
  const Heads<T> Q(q), K(k), V(v), dO(dout), O(out);
  const T* lp = lse.data<T>();
  T* dqp = dq.data<T>();
  // With grouped kv heads, each query head accumulates its own (Tk, D) dK/dV, reduced below.
  const bool grouped = d.group > 1;
  std::vector<T> dk_part(grouped ? size_t(d.B * d.H * d.Tk * d.D) : 0);
  std::vector<T> dv_part(grouped ? size_t(d.B * d.H * d.Tk * d.D) : 0);
  SingleThreadedBlas single;
  parallel_for(d.B * d.H, 1, [&](int64_t t0, int64_t t1) {
    const int64_t blk_rows = std::min(d.Tq, kQueryBlock), width_max = std::max<int64_t>(d.Tk, 1);
    const size_t block_elems = size_t(blk_rows * width_max);
    std::vector<T> P(block_elems), dP(block_elems), Di(static_cast<size_t>(blk_rows));
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t h = task % d.H, b = task / d.H, hk = h / d.group;
      T* dkh = grouped ? dk_part.data() + task * d.Tk * d.D : dk.data<T>() + (b * d.Hkv + hk) * d.Tk * d.D;
      T* dvh = grouped ? dv_part.data() + task * d.Tk * d.D : dv.data<T>() + (b * d.Hkv + hk) * d.Tk * d.D;
      std::fill(dkh, dkh + d.Tk * d.D, T(0));
      std::fill(dvh, dvh + d.Tk * d.D, T(0));
      for (int64_t i0 = 0; i0 < d.Tq; i0 += kQueryBlock) {
        const int64_t rows = std::min(kQueryBlock, d.Tq - i0);
        const int64_t width = visible_keys(d, causal, i0 + rows - 1);
        T* dqb = dqp + ((b * d.H + h) * d.Tq + i0) * d.D;
        if (width == 0) {
          std::fill(dqb, dqb + rows * d.D, T(0));
          continue;
        }
        const T* lb = lp + (b * d.H + h) * d.Tq + i0;
        // P (rows, width) = exp(scale Q K^T - lse), zero where masked.
        product(false, true, rows, width, d.D, scale, Q.at(b, h, i0), Q.st, K.at(b, hk), K.st, T(0), P.data(), width);
        for (int64_t r = 0; r < rows; ++r) {
          T* pr = P.data() + r * width;
          const int64_t n = visible_keys(d, causal, i0 + r);
          const T lr = lb[r];
          if (lr == -INFINITY)
            std::fill(pr, pr + n, T(0));
          else
            vec::exp_shifted(pr, n, lr, T(1), pr);
          for (int64_t j = n; j < width; ++j) pr[j] = 0;
          // Di = rowsum(dO * O).
          const T* dor = dO.at(b, h, i0 + r);
          const T* orow = O.at(b, h, i0 + r);
          Di[size_t(r)] = vec::row_dot(dor, orow, d.D);
        }
        // dV (width, D) += P^T dO.
        product(true, false, width, d.D, rows, T(1), P.data(), width, dO.at(b, h, i0), dO.st, T(1), dvh, d.D);
        // dP (rows, width) = dO V^T.
        product(false, true, rows, width, d.D, T(1), dO.at(b, h, i0), dO.st, V.at(b, hk), V.st, T(0), dP.data(), width);
        // dS = P * (dP - Di), in place in dP.
        for (int64_t r = 0; r < rows; ++r) {
          T* dpr = dP.data() + r * width;
          const T* pr = P.data() + r * width;
          const T di = Di[size_t(r)];
          for (int64_t j = 0; j < width; ++j) dpr[j] = pr[j] * (dpr[j] - di);
        }
        // dQ (rows, D) = scale dS K;  dK (width, D) += scale dS^T Q.
        product(false, false, rows, d.D, width, scale, dP.data(), width, K.at(b, hk), K.st, T(0), dqb, d.D);
        product(true, false, width, d.D, rows, scale, dP.data(), width, Q.at(b, h, i0), Q.st, T(1), dkh, d.D);
      }
    }
  });
  if (!grouped) return;
  // dK/dV of kv head hk = sum over its query heads, in head order.
  T* dkp = dk.data<T>();
  T* dvp = dv.data<T>();
  const int64_t per_head = d.Tk * d.D;
  parallel_for(d.B * d.Hkv, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t b = task / d.Hkv, hk = task % d.Hkv;
      T* dko = dkp + task * per_head;
      T* dvo = dvp + task * per_head;
      std::fill(dko, dko + per_head, T(0));
      std::fill(dvo, dvo + per_head, T(0));
      for (int64_t g = 0; g < d.group; ++g) {
        const int64_t h = hk * d.group + g;
        const T* kp = dk_part.data() + (b * d.H + h) * per_head;
        const T* vp = dv_part.data() + (b * d.H + h) * per_head;
        for (int64_t e = 0; e < per_head; ++e) dko[e] += kp[e];
        for (int64_t e = 0; e < per_head; ++e) dvo[e] += vp[e];
      }
    }
  });
}

void check_attention_layout(const char* op, std::initializer_list<const Tensor*> views,
                            std::initializer_list<const Tensor*> outputs) {
  for (const Tensor* t : views) {
    vec::require_float(*t, op, "every input");
    vec::require_unit_last_stride(*t, op, "every input");
  }
  for (const Tensor* t : outputs) vec::require_contiguous(*t, op, "every output");
}

// q, k, v (and dout, out) may be views with a unit stride on D (e.g. heads split out of a packed
// qkv); outputs are contiguous.
void forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal, bool bf16_products,
             const Tensor& out, const Tensor& lse) {
  check_attention_layout("attention (cpu)", {&q, &k, &v}, {&out, &lse});
  if (q.size(3) == 0) {  // no channels: every visible score is 0, so lse = log(#visible)
    const Dims4 d = dims_of(q, k);
    for (int64_t r = 0; r < lse.numel(); ++r)
      write_element(lse, r, std::log(double(visible_keys(d, causal, r % d.Tq))));
    return;
  }
  if (lse.numel() == 0) return;
  if (q.dtype() == DType::f64) attention_rows<double>(q, k, v, scale, causal, false, out, lse);
  else attention_rows<float>(q, k, v, scale, causal, bf16_products, out, lse);
}

void backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
              const Tensor& lse, double scale, bool causal, bool bf16_products, const Tensor& dq, const Tensor& dk,
              const Tensor& dv) {
  check_attention_layout("attention_backward (cpu)", {&dout, &q, &k, &v, &out}, {&lse, &dq, &dk, &dv});
  if (q.size(3) == 0) return;  // dq, dk, dv are empty
  if (q.dtype() == DType::f64)
    attention_rows_backward<double>(dout, q, k, v, out, lse, scale, causal, false, dq, dk, dv);
  else
    attention_rows_backward<float>(dout, q, k, v, out, lse, scale, causal, bf16_products, dq, dk, dv);
}

}  // namespace

AttentionKernels attention_cpu_kernels() {
  // The CPU backend first: it fixes a mis-detected OpenBLAS core and holds OpenBLAS to one thread
  // (NOTE [ One thread pool ]) before these kernels' first GEMM.
  backend_for(Device::cpu());
  return {forward, backward};
}

}  // namespace mvgpt::fused
