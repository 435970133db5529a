// The CPU kernels of attention (autograd/fused/attention.h): scaled dot-product attention with an
// optional causal mask, forward and backward.
//
// NOTE [ Attention on the CPU ]
// Forward: parallel over (batch, head, query block). Each task computes the scores of a block of
// query rows against the keys it can see with one GEMM, a row softmax (saving the log-sum-exp), and
// one more GEMM with V. Scratch is a thread-local (block, Tk) buffer; no (T, T) tensor is made (but
// the bf16 probabilities rotary_attention may keep: NOTE [ Kept probabilities ]).
// Backward (FlashAttention style): the probabilities are recomputed from q, k and the saved lse,
// P = exp(S - lse) (unless kept); then dV += P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dO * O)),
// dQ = dS K * scale, dK += dS^T Q * scale. A task owns one (batch, query head) and walks its query
// blocks in order, so dK/dV accumulate without races; with grouped kv heads each query head
// accumulates into its own buffer and the group's buffers are added in head order (deterministic).
// The per-block products go to OpenBLAS, single-threaded inside the TBB loop. Measured against
// vectorized loops (per row: dot products over D, then axpy over D) with bench/bench_fused.cpp on
// one thread of the 2-core Zen 3 machine, same load: causal forward B=16, H=6, T=256, D=64 takes
// 45 ms with GEMMs vs 149 ms with loops; decode (Tq=1, Tk=256) takes 1.15 ms with loops vs 3.4 ms
// with 1-row GEMMs (all call and packing overhead). So blocks of several rows use GEMMs and
// single-row blocks use the loops.
// bf16_products (NOTE [ Precision policy ] in autograd/precision.h): every GEMM above multiplies
// bfloat16 operands and sums in float32 (oneDNN, one thread, through blas::gemm); the softmax, the
// row sums and the single-row (decoding) loops stay float32.
//
// NOTE [ bf16 attention ]
// The bf16 kernels (attention_rows_dense<bfloat16> and its backward) round each operand where it is
// made or first read rather than before every product: a backward task rounds its head's q, k, v
// and dout once for all its blocks, the exp pass writes P in bfloat16 beside its float32 copy (kept
// for dS; where the forward kept its bf16 P, neither is made: NOTE [ Kept probabilities ]), and
// the dS pass writes dS in bfloat16 once for its two products (dQ and dK); the forward writes P in
// bfloat16 in its normalization pass. The values are those of rounding each product's operands
// (the same roundings of the same floats). Measured with bench/mvgpt_step_profile --precision bf16
// on the 2-core AMD EPYC Zen 4 (AVX512-BF16), alternated against rounding both operands before each
// product: the backward's attention took 73-76 ms a step against 83-85; the forward's 39-40 either
// way (its reads of q, k and v, not the rounding, are what its passes wait for).
// rotary_attention (attention.h) hands these kernels q and k unrotated, straight from the packed
// projection, with a rope table: rows are rotated where they are rounded, and dq and dk rotated back
// where they are made, so rope's four passes a layer (q and k, forward and backward) go. Those reads
// are 3C apart, a new page every row or so, where the prefetchers stop: the rounding fetches eight
// rows ahead itself. In the bf16 step profile on the Zen 4 (15 steps, alternated three times),
// attention and rope together took 94-98 ms a step against 106-113.
//
// NOTE [ Kept bf16 operands ]
// Under bf16 products the backward multiplies the same rounded q, k and v as the forward: rotated
// and rounded again from the float32 projection, a head's 256 rows of q, k and v read 3C apart
// (another page every row or so) and rotated a second time. Where a gradient is wanted and each
// head has its own kv head, rotary_attention hands the forward three (B, H, T, D) bfloat16 tensors
// and the forward writes its rounded operands there instead of a thread's buffers (one run a head,
// so a head's rows have one writer); the backward then reads them as they lie, with the same bits
// (q is kept unscaled and scaled again where a power-of-two scale is folded: exact), and the op
// keeps them instead of the float32 projection: 9.4 MB a layer in place of 18.9 for the series'
// step. In the bf16 step profile on the 2-core AMX Xeon the backward's attention took 42 ms a step
// against 46.8, the forward's 28.5 against 26-28.5 (it writes the kept rows).
//
// NOTE [ Kept probabilities ]
// The forward's bf16 probabilities (the rounded P it multiplied V by) may be kept too, in a fourth
// (B, H, T, T) bfloat16 tensor: each block writes its query rows' first `width` keys, zeros past a
// row's visible keys (without tiles the product reads them there; on tiles they are copied from the
// padded rows it reads). The backward then multiplies those where it would recompute them: no S =
// q K^T product and no exp pass, and dS = P (dP - Di) takes the kept P widened. That is autocast's
// arithmetic (the bf16 softmax output is what a PyTorch bf16 backward saves and multiplies) and the
// gradient of what the forward computed: its out is P_bf16 V, so Di = rowsum(dO * out) is
// rowsum(P_bf16 * dP), and dS's rows sum to zero over the P that was used, not over a float32 P that
// the forward never multiplied. rotary_attention keeps them where they are no larger than twice the
// kept q, k and v (T <= 6 D: 12.6 MB a layer for the series' model; longer contexts recompute, as
// FlashAttention does). BM_RotaryAttentionBackward on the 2-core AMD EPYC Zen 4 (AVX512-BF16), three
// repetitions: kept:2 8.6 ms a layer against 10.5 for kept:1; the forward 5.28 against 5.19 (keep:2
// against keep:1).
//
// NOTE [ Rotary attention in float32 ]
// Float32 products take the same road (attention_rows_dense<float>): q and k are rotated into dense
// float32 rows where the bf16 kernels round them, v, dout, P and dS are multiplied where they lie (no
// rounding to fold in), and dq, dk and dv are written into the packed projection's gradient. The
// softmax, the one-row blocks' loops and every product are attention_rows<float>'s on rope's rotated
// rows, and the back-rotation is rope's backward, so the values are the composition's bit for bit;
// what goes is rope's four passes a layer and the copies that assembled the packed gradient. In the
// float32 step profile on the 2-core AMD EPYC Zen 4 (alternated twice): rope 16.5 ms and copies
// about 10 ms a step went, attention took 5 ms more (its own rotations), the step 2,142-2,158 ms
// against 2,165-2,190.
#include <cblas.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include <mvgpt/backends/backend.h>
#include <mvgpt/backends/cpu/amx.h>
#include <mvgpt/backends/cpu/blas.h>
#include <mvgpt/backends/cpu/fused_common.h>
#include <mvgpt/backends/cpu/parallel.h>
#include <mvgpt/fused/attention.h>
#include <mvgpt/fused/rope.h>
#include <mvgpt/fused/rope_row_cpu.h>

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
// bfloat16 operands, float32 sums: the bf16 products on this thread (float32 ones are held to one
// thread by SingleThreadedBlas).
inline void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A, int64_t lda,
                 const bfloat16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  cpu::blas::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, /*parallel=*/false);
}

// Eight rows ahead of row r of X, fetched into the cache (cpu::prefetch_lines, for ownership where
// the row is about to be written): rows split out of a packed (B, T, 3C) projection are 3C apart, a
// new page every row or so, where the hardware prefetchers stop. In the bf16 step on the 2-core AMD
// EPYC Zen 4, attention's forward took 32-33 ms against 39-40 without (q and k rotated as they are
// read from the projection; see rotary_attention). Contiguous rows are fetched ahead too: on the
// 2-core AMX Xeon the hardware prefetchers left these passes waiting as well (NOTE [ Prefetching
// ahead ] in backends/cpu/vec_math.h).
inline void prefetch_row_ahead(const float* x, int64_t ld, int64_t cols, int64_t r, int64_t r1,
                               bool for_write = false) {
  if (r + 8 >= r1) return;
  cpu::prefetch_lines(x + (r + 8) * ld, 0, cols * int64_t(sizeof(float)), for_write);
}

// Rows [r0, r1) of X (leading dimension ld, cols wide) rounded to bfloat16 into out (dense, cols wide).
void round_rows(const float* x, int64_t ld, int64_t cols, int64_t r0, int64_t r1, bfloat16* out) {
  for (int64_t r = r0; r < r1; ++r) {
    prefetch_row_ahead(x, ld, cols, r, r1);
    vec::round_to_bf16(x + r * ld, cols, out + r * cols);
  }
}

// A rotary embedding the dense kernels apply to q and k as they read them, before rounding them
// under bf16 products (rotary_attention in attention.h): row t of q and of k (Tq == Tk) is rotated
// by row t of a rope_table, the angles of positions[t]. The arithmetic is rope's CPU kernel's
// (rotate_row, rope_row_cpu.h) on the same table.
struct Rotation {
  const float* cos;
  const float* sin;
  int64_t half;
  bool interleaved;

  // out (2 half) = x rotated to position t; out may be x.
  void rotate(const float* x, int64_t t, float* out) const {
    rotate_row(x, cos + t * half, sin + t * half, half, interleaved, out);
  }
  // out (2 half) = x rotated to position t, times scale, rounded (buf: 2 half floats of scratch).
  void rotate_rounded(const float* x, int64_t t, float scale, bfloat16* out, float* buf) const {
    rotate_round_row(x, cos + t * half, sin + t * half, half, interleaved, scale, out, buf);
  }
};

// Rows [r0, r1) of X as a product's operand, dense (cols wide) in out: rotated to their positions
// (row r at position first_position + r) when rot is given, and rounded to bfloat16 for a bfloat16 out.
// scale (a power of two, which commutes with the rounding: NOTE [ A power-of-two scale ]) multiplies
// the rows as they are rounded.
void operand_rows(const float* x, int64_t ld, int64_t cols, int64_t r0, int64_t r1, bfloat16* out, const Rotation* rot,
                  int64_t first_position, float scale = 1.0f) {
  if (!rot && scale == 1.0f) return round_rows(x, ld, cols, r0, r1, out);
  thread_local std::vector<float> buf;
  if (buf.size() < size_t(cols)) buf.resize(size_t(cols));
  float* row = buf.data();
  for (int64_t r = r0; r < r1; ++r) {
    prefetch_row_ahead(x, ld, cols, r, r1);
    if (rot) rot->rotate_rounded(x + r * ld, first_position + r, scale, out + r * cols, row);
    else vec::round_to_bf16(x + r * ld, cols, scale, out + r * cols);
  }
}
void operand_rows(const float* x, int64_t ld, int64_t cols, int64_t r0, int64_t r1, float* out, const Rotation* rot,
                  int64_t first_position) {
  for (int64_t r = r0; r < r1; ++r) {
    prefetch_row_ahead(x, ld, cols, r, r1);
    if (rot) rot->rotate(x + r * ld, first_position + r, out + r * cols);
    else std::copy(x + r * ld, x + r * ld + cols, out + r * cols);
  }
}

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

// A thread's scratch of at least n T, kept from call to call. The bf16 kernels write every element
// they read (but for the tile kernels' padding rows past a block's last, which reach only output
// rows that are dropped), and vectors made per task run cleared a few hundred KB a head (on the 2-core AMD EPYC
// Zen 4, memset was 4.5% of BM_AttentionBackward/bf16:1's time). A task body makes no nested
// parallel call, so a thread runs one body at a time and each slot has one user.
enum class Slot { s, q, p, k, v, dp, ds, dout, di, dq, dk, dv, k_tiles, v_tiles, kt_tiles, vt_tiles, p_tiles, qt, dot, dk_t, dv_t };
// Each starts on a 64-byte boundary: the AMX tiles read whole 64-byte rows, and a row that straddles
// two cache lines costs a tile load twice the lines (NOTE [ Large products on AMX tiles ] in
// backends/cpu/amx_gemm.cpp); a vector's own storage is only 16-byte aligned.
template <typename T, Slot slot>
T* thread_scratch(int64_t n) {
  static_assert(64 % sizeof(T) == 0);
  thread_local std::vector<T> buf;
  constexpr size_t pad = 64 / sizeof(T);
  if (buf.size() < size_t(n) + pad) buf.resize(size_t(n) + pad);
  const auto at = reinterpret_cast<uintptr_t>(buf.data());
  return buf.data() + ((64 - at % 64) % 64) / sizeof(T);
}

// Strided (B, H, T, D) rows with a unit stride on D. P: const T for an input, T for an output (a
// contiguous gradient, or the q, k or v block of a packed one: rotary_attention_packed).
template <typename P>
struct HeadRows {
  P* data;
  int64_t sb, sh, st;
  HeadRows(P* data, int64_t sb, int64_t sh, int64_t st) : data(data), sb(sb), sh(sh), st(st) {}
  explicit HeadRows(const Tensor& t)
      : data(t.data<std::remove_const_t<P>>()), sb(t.strides()[0]), sh(t.strides()[1]),
        // A single row may carry any stride; BLAS wants a leading dimension of at least D.
        st(t.size(2) == 1 ? std::max<int64_t>(t.size(3), 1) : t.strides()[2]) {
    if (t.size(2) > 1 && st < std::max<int64_t>(t.size(3), 1))
      throw std::logic_error("attention (cpu): rows of a (B, H, T, D) tensor overlap (stride " +
                             std::to_string(st) + " on T); the ops layer must pass a copy");
  }
  P* at(int64_t b, int64_t h, int64_t t = 0) const { return data + b * sb + h * sh + t * st; }
};
template <typename T>
using Heads = HeadRows<const T>;
template <typename T>
using HeadsOut = HeadRows<T>;

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

// Whether the bf16 kernels multiply on AMX tiles (NOTE [ Attention on AMX tiles ] in
// backends/cpu/amx.cpp): where the CPU has them and a head's rows are whole tiles along D.
bool on_tiles(const Dims4& d) { return cpu::amx::usable() && d.D % cpu::amx::kTileDepth == 0; }

// NOTE [ Tiles past a window ]
// A product over a block's `width` keys reads its packed B (V, or K for dQ) in whole tiles of 32
// keys, where A's columns past `width` are zeros. Rows of the tile past `width` are then packed as
// zeros too, not as the next keys: 0 times a key that overflowed to infinity (or is NaN) would be a
// NaN in rows that never see that key. So the tiles are packed for each head as its blocks' windows
// grow (and the last tile again where a window is shorter than the last one packed).

// NOTE [ A power-of-two scale ]
// On tiles the products take no alpha where they write in place, so a scale is applied elsewhere:
// as a pass over S, or, where it is a power of two (the model's 1/sqrt(64)), folded into q as it is
// rounded. Multiplying by 2^k is exact, commutes with rounding to bfloat16 and with each float32 sum
// (short of the subnormal range, which AMX flushes to zero either way), so S = (2^k q) K^T is the
// bits of 2^k (q K^T), and dK's product takes the scaled q as it is.
bool power_of_two(double x) {
  int e;
  return x > 0 && std::isfinite(x) && std::frexp(x, &e) == 0.5;
}

// dst[0, n) = src times a power of two (exact, so the rounding is src's), or a copy for 1.
void scaled_copy(const bfloat16* src, int64_t n, float scale, bfloat16* dst) {
  if (scale == 1.0f) {
    std::copy(src, src + n, dst);
    return;
  }
  int64_t i = 0;
#ifdef __AVX512F__
  for (; i + 16 <= n; i += 16) vec::store16_rounded(dst + i, vec::load16_widened(src + i) * scale);
#endif
  for (; i < n; ++i) dst[i] = bfloat16(float(src[i]) * scale);
}

// The backward's probabilities: p[j] = exp(p[j] - shift) for j < n, zeros up to width, written in
// float32 (kept for dS) and rounded to bfloat16 in one pass (the values of exp_shifted then
// round_to_bf16: each lane's exp and rounding are its own).
void exp_rows_rounded(float* p, int64_t n, int64_t width, float shift, bfloat16* pb) {
  int64_t j = 0;
#ifdef __AVX512F__
  for (; j + 16 <= n; j += 16) {
    const vec::f32x16 e = vec::exp16(vec::load16(p + j) - shift);
    vec::store16(p + j, e);
    vec::store16_rounded(pb + j, e);
  }
#endif
  vec::exp_shifted(p + j, n - j, shift, 1.0f, p + j);  // the rest (all of it without AVX-512)
  vec::round_to_bf16(p + j, n - j, pb + j);
  std::fill(p + n, p + width, 0.0f);
  std::fill(pb + n, pb + width, bfloat16());
}

// dS = P (dP - Di) rounded to bfloat16, in one pass with AVX-512 where the float32 values are not
// stored (the values of the loop then round_to_bf16); the lanes past the last sixteen (all of them
// without AVX-512) are made in dp first.
// P: the float32 probabilities, or the forward's kept bf16 ones, widened (NOTE [ Kept probabilities ]).
template <typename P>
void ds_rounded(const P* p, float* dp, float di, int64_t width, bfloat16* out) {
  int64_t j = 0;
#ifdef __AVX512F__
  for (; j + 16 <= width; j += 16) vec::store16_rounded(out + j, vec::as_float16(p + j) * (vec::load16(dp + j) - di));
#endif
  for (int64_t i = j; i < width; ++i) dp[i] = float(p[i]) * (dp[i] - di);
  vec::round_to_bf16(dp + j, width - j, out + j);
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

template <typename KV>
inline vec::f32x8 load8_kv(const KV* p) {
  if constexpr (std::is_same_v<KV, float>) return vec::load8(p);
  else return vec::load8_widened(p);
}

#ifdef __AVX512F__
template <typename KV>
inline vec::f32x16 load16_kv(const KV* p) {
  if constexpr (std::is_same_v<KV, float>) return vec::load16(p);
  else return vec::load16_widened(p);
}
#endif

// attend_row for float32 rows of D = 8 NV (the common head sizes), the same sums in the same order
// with the row in registers: the scores several keys at a time (independent sums, so the FMA
// latency overlaps) and out's sums held in registers across the keys (not stored and reloaded per
// key). BM_AttentionForward/Tq:1 (16 x 6 heads, 256 keys, float32) 87-91 us against 127-129 on the
// 2-core Zen 4.
// NOTE [ Decoding's attention in sixteen lanes ]
// With AVX-512 (and D a multiple of 16) a key row is read sixteen lanes at a time: lanes 0-7 of
// one sum hold chunks 0, 2, 4... (the sum A below) and lanes 8-15 chunks 1, 3, 5... (B), so it is
// the eight-lane loop's two sums in one register, one FMA where that loop takes two; eight keys'
// sums are then added up together (hsum8_of_eight), and out's sums take sixteen lanes too. The same
// products and sums in the same order: bit for bit the eight-lane loop (a hash of the outputs over
// head sizes 32-128 and 1-256 keys, float32 and bf16 caches, was the same before and after; the
// bf16-cache test compares the two caches bit for bit). In the model's decoding a token's keys and
// values come from memory after 29 MB of weights have streamed through the cache, so the score
// loop also fetches the key row sixteen ahead and the value row of the key it scores, for the pass
// after the softmax (the hardware prefetchers start late on a 32 KB run). BM_DecodeCache/1 (the series' RoPE model, bf16, sliding
// cache) on the 2-core AMD EPYC Zen 4, alternated eight times under other tenants' load: attention
// 0.07-0.08 ms a token against 0.11-0.12 (step_profile --decode), the token 0.70-0.91 ms (median
// 0.79) against 0.79-0.92 (0.815).
template <int NV, typename KV>
void attend_row_registers(const float* qr, const Heads<KV>& K, const Heads<KV>& V, int64_t b, int64_t hk, int64_t n,
                          float scale, float* s, float* o, float* lse) {
  using vec::f32x8;
  constexpr int64_t D = NV * vec::kVec;
  f32x8 q[NV];
  for (int i = 0; i < NV; ++i) q[i] = vec::load8(qr + i * vec::kVec);
  // q . k as vec::row_dot adds it: sums A over chunks 0, 2, 4..., B over 1, 3, 5..., a last odd chunk into A.
  auto dot = [&](const KV* kr) {
    f32x8 a = {}, c = {};
    for (int i = 0; i + 1 < NV; i += 2) {
      a += q[i] * load8_kv(kr + i * vec::kVec);
      c += q[i + 1] * load8_kv(kr + (i + 1) * vec::kVec);
    }
    if constexpr (NV % 2 == 1) a += q[NV - 1] * load8_kv(kr + (NV - 1) * vec::kVec);
    return vec::hsum8(a + c) + 0.0f;  // + the empty tail, as row_dot (a -0 sum becomes +0)
  };
  int64_t j = 0;
#ifdef __AVX512F__
  constexpr bool sixteen = NV % 2 == 0;  // NOTE [ Decoding's attention in sixteen lanes ]
  if constexpr (sixteen) {
    using vec::f32x16;
    constexpr int NW = NV / 2;
    f32x16 q16[NW];
    for (int i = 0; i < NW; ++i) q16[i] = vec::load16(qr + i * 2 * vec::kVec);
    auto prefetch_row = [](const KV* row) { cpu::prefetch_lines(row, 0, D * int64_t(sizeof(KV))); };
    for (; j + 8 <= n; j += 8) {
      f32x16 acc[8];
      for (int k = 0; k < 8; ++k) {
        const KV* kr = K.at(b, hk, j + k);
        prefetch_row(V.at(b, hk, j + k));
        if (j + k + 16 < n) prefetch_row(K.at(b, hk, j + k + 16));
        acc[k] = f32x16{};
        for (int i = 0; i < NW; ++i) acc[k] += q16[i] * load16_kv(kr + i * 2 * vec::kVec);
      }
      vec::store8(s + j, scale * (vec::hsum8_of_eight(acc) + 0.0f));
    }
  }
#endif
  for (; j + 4 <= n; j += 4) {
    const float s0 = dot(K.at(b, hk, j)), s1 = dot(K.at(b, hk, j + 1)), s2 = dot(K.at(b, hk, j + 2)),
                s3 = dot(K.at(b, hk, j + 3));
    s[j] = scale * s0, s[j + 1] = scale * s1, s[j + 2] = scale * s2, s[j + 3] = scale * s3;
  }
  for (; j < n; ++j) s[j] = scale * dot(K.at(b, hk, j));
  const float m = vec::row_max(s, n);
  if (n == 0 || m == -INFINITY) {
    for (int64_t c = 0; c < D; ++c) o[c] = 0;
    *lse = -INFINITY;
    return;
  }
  const float l = vec::exp_shifted(s, n, m, 1.0f, s);
  const float inv = 1.0f / l;
#ifdef __AVX512F__
  if constexpr (sixteen) {
    using vec::f32x16;
    constexpr int NW = NV / 2;
    f32x16 acc[NW] = {};
    for (j = 0; j < n; ++j) {
      const KV* vr = V.at(b, hk, j);
      const float p = s[j];
      for (int i = 0; i < NW; ++i) acc[i] = acc[i] + p * load16_kv(vr + i * 2 * vec::kVec);
    }
    for (int i = 0; i < NW; ++i) vec::store16(o + i * 2 * vec::kVec, acc[i] * inv);
    *lse = m + std::log(l);
    return;
  }
#endif
  f32x8 acc[NV] = {};
  for (j = 0; j < n; ++j) {
    const KV* vr = V.at(b, hk, j);
    const float p = s[j];
    for (int i = 0; i < NV; ++i) acc[i] = acc[i] + p * load8_kv(vr + i * vec::kVec);
  }
  for (int i = 0; i < NV; ++i) vec::store8(o + i * vec::kVec, acc[i] * inv);
  *lse = m + std::log(l);
}

// One query row by loops over rows of T: scores by dot products over D, then out = sum_j p_j v_j.
template <typename T>
void attend_row_loops(const T* qr, const Heads<T>& K, const Heads<T>& V, int64_t b, int64_t hk, int64_t n, int64_t D,
                      T scale, T* s, T* o, T* lse) {
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
    int64_t c = 0;
    if constexpr (std::is_same_v<T, float>)  // eight at a time
      for (; c + vec::kVec <= D; c += vec::kVec) vec::store8(o + c, vec::load8(o + c) + p * vec::load8(vr + c));
    for (; c < D; ++c) o[c] += p * T(vr[c]);
  }
  const T inv = T(1) / l;
  for (int64_t c = 0; c < D; ++c) o[c] *= inv;
  *lse = m + std::log(l);
}

// One query row, for single-row blocks (decode), where a GEMM call costs more than the work: the
// registers' loops for the common head sizes, the plain loops for the rest. KV: T, or bfloat16 with a
// float32 T (a bf16 KV cache: the values of T's loops over the widened cache).
template <typename T, typename KV>
void attend_row(const T* qr, const Heads<KV>& K, const Heads<KV>& V, int64_t b, int64_t hk, int64_t n, int64_t D,
                T scale, T* s, T* o, T* lse) {
  if constexpr (std::is_same_v<T, float>) {
    if (D == 32) return attend_row_registers<4>(qr, K, V, b, hk, n, scale, s, o, lse);
    if (D == 64) return attend_row_registers<8>(qr, K, V, b, hk, n, scale, s, o, lse);
    if (D == 128) return attend_row_registers<16>(qr, K, V, b, hk, n, scale, s, o, lse);
  }
  if constexpr (std::is_same_v<KV, T>) {
    return attend_row_loops(qr, K, V, b, hk, n, D, scale, s, o, lse);
  } else {
    // Other head sizes read a bf16 cache widened into float32 rows first: the loops are then the same
    // machine code for both caches. Compiled for each, the compiler was free to fuse a multiply and
    // an add into one FMA in one and not the other (it did for D 5 with -march=native on the 2-core
    // Intel Xeon with AMX, family 6 model 167), and the two caches' values differed in the last bit.
    thread_local std::vector<T> widened;
    widened.resize(size_t(2 * n * D));
    T* kw = widened.data();
    T* vw = kw + n * D;
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < D; ++c) kw[j * D + c] = T(K.at(b, hk, j)[c]), vw[j * D + c] = T(V.at(b, hk, j)[c]);
    return attend_row_loops(qr, Heads<T>(kw, 0, 0, D), Heads<T>(vw, 0, 0, D), 0, 0, n, D, scale, s, o, lse);
  }
}

template <typename T>
void attention_rows(const Tensor& q, const Tensor& k, const Tensor& v, double scale_d, bool causal, const Tensor& out,
                    const Tensor& lse) {
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
      gemm(false, true, rows, width, d.D, scale, Q.at(b, h, i0), Q.st, K.at(b, hk), K.st, T(0), s, width);
      softmax_rows(s, rows, width, width, d, causal, i0, l);
      // O (rows, D) = P V.
      gemm(false, false, rows, d.D, width, T(1), s, width, V.at(b, hk), V.st, T(0), o, d.D);
    }
  });
}

// With grouped kv heads: dK/dV of kv head hk = the sum of its query heads' parts, in head order.
// dk and dv: any rows of HeadsOut's layout.
template <typename T>
void sum_group_gradients(const Dims4& d, const std::vector<T>& dk_part, const std::vector<T>& dv_part,
                         const Tensor& dk, const Tensor& dv) {
  const HeadsOut<T> dK(dk), dV(dv);
  const int64_t per_head = d.Tk * d.D;
  parallel_for(d.B * d.Hkv, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t b = task / d.Hkv, hk = task % d.Hkv;
      for (int64_t t = 0; t < d.Tk; ++t) {
        T* dko = dK.at(b, hk, t);
        T* dvo = dV.at(b, hk, t);
        std::fill(dko, dko + d.D, T(0));
        std::fill(dvo, dvo + d.D, T(0));
        for (int64_t g = 0; g < d.group; ++g) {
          const int64_t h = hk * d.group + g;
          const T* kp = dk_part.data() + (b * d.H + h) * per_head + t * d.D;
          const T* vp = dv_part.data() + (b * d.H + h) * per_head + t * d.D;
          for (int64_t e = 0; e < d.D; ++e) dko[e] += kp[e];
          for (int64_t e = 0; e < d.D; ++e) dvo[e] += vp[e];
        }
      }
    }
  });
}

template <typename T>
void attention_rows_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse, double scale_d, bool causal, const Tensor& dq,
                             const Tensor& dk, const Tensor& dv) {
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
        gemm(false, true, rows, width, d.D, scale, Q.at(b, h, i0), Q.st, K.at(b, hk), K.st, T(0), P.data(), width);
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
        gemm(true, false, width, d.D, rows, T(1), P.data(), width, dO.at(b, h, i0), dO.st, T(1), dvh, d.D);
        // dP (rows, width) = dO V^T.
        gemm(false, true, rows, width, d.D, T(1), dO.at(b, h, i0), dO.st, V.at(b, hk), V.st, T(0), dP.data(), width);
        // dS = P * (dP - Di), in place in dP.
        for (int64_t r = 0; r < rows; ++r) {
          T* dpr = dP.data() + r * width;
          const T* pr = P.data() + r * width;
          const T di = Di[size_t(r)];
          for (int64_t j = 0; j < width; ++j) dpr[j] = pr[j] * (dpr[j] - di);
        }
        // dQ (rows, D) = scale dS K;  dK (width, D) += scale dS^T Q.
        gemm(false, false, rows, d.D, width, scale, dP.data(), width, K.at(b, hk), K.st, T(0), dqb, d.D);
        gemm(true, false, width, d.D, rows, scale, dP.data(), width, Q.at(b, h, i0), Q.st, T(1), dkh, d.D);
      }
    }
  });
  if (grouped) sum_group_gradients(d, dk_part, dv_part, dk, dv);
}

// Decoding from a bfloat16 KV cache: one float32 query row per head, k and v read in place (half
// the bytes of a float32 cache, which is what a decoded token's attention waits for).
void attention_row_kv_bf16(const Tensor& q, const Tensor& k, const Tensor& v, double scale_d, bool causal,
                           const Tensor& out, const Tensor& lse) {
  const Dims4 d = dims_of(q, k);
  if (d.Tq != 1)
    throw std::logic_error("attention (cpu): bfloat16 keys and values reach the kernel only for one query row, found " +
                           std::to_string(d.Tq) + " (the ops layer widens them)");
  const float scale = float(scale_d);
  const Heads<float> Q(q);
  const Heads<bfloat16> K(k), V(v);
  float* op = out.data<float>();
  float* lp = lse.data<float>();
  parallel_for(d.B * d.H, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> scratch(size_t(std::max<int64_t>(d.Tk, 1)));
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t h = task % d.H, b = task / d.H;
      attend_row(Q.at(b, h), K, V, b, h / d.group, visible_keys(d, causal, 0), d.D, scale, scratch.data(),
                 op + task * d.D, lp + task);
    }
  });
}

// bf16 products, forward: as attention_rows<float>, with each product's operands in bfloat16 and its
// sums in float32. Rounding is folded into the passes that exist anyway (NOTE [ bf16 attention ]).
// E = float: the float32 kernels of rotary_attention (NOTE [ Rotary attention in float32 ]), q and k
// rotated into dense float32 rows, v read in place; the values of rope then attention_rows<float>.
// keep (bf16, one kv head a head): the rounded operands written into these (B, H, T, D) tensors for
// the backward (NOTE [ Kept bf16 operands ]), and where there is a fourth (B, H, T, T), the bf16
// probabilities (NOTE [ Kept probabilities ]).
template <typename E>
void attention_rows_dense(const Tensor& q, const Tensor& k, const Tensor& v, double scale_d, bool causal,
                          const Tensor& out, const Tensor& lse, const Rotation* rot = nullptr,
                          const std::vector<Tensor>* keep = nullptr) {
  constexpr bool bf16 = std::is_same_v<E, bfloat16>;
  const Dims4 d = dims_of(q, k);
  const float scale = float(scale_d);
  const Heads<float> Q(q), K(k), V(v);
  const HeadsOut<float> Out(out);  // contiguous, or a view of (B, T, H, D) rows (rotary_attention_packed)
  SingleThreadedBlas single;  // float32 products (and the bf16 fallback's on CPUs without bf16 kernels)
  float* lp = lse.data<float>();
  const int64_t nblocks = (d.Tq + kQueryBlock - 1) / kQueryBlock;
  const int64_t blk_rows = std::min(d.Tq, kQueryBlock), width_max = std::max<int64_t>(d.Tk, 1);
  // Decoding (one query row) takes the float32 loops on q, k and v as they lie and never reads the
  // buffers: none are made (kb and vb, 64 KB of zeros per task at Tk 256, cost as much as the row's
  // attention). Rotated rows exist only in the buffers: with a rotation every block makes them.
  const bool products = blk_rows > 1 || rot;
  // On AMX tiles the products read K^T and V packed (a head's keys packed as they are rounded), P
  // with rows padded to whole tiles, and S comes unscaled (the softmax pass scales it) unless the
  // scale is folded into q (NOTE [ A power-of-two scale ]).
  const bool tiles = bf16 && products && on_tiles(d);
  const bool fold = tiles && power_of_two(scale_d);  // NOTE [ A power-of-two scale ]: q comes scaled
  const int64_t rows_pad = cpu::amx::round_up(blk_rows, cpu::amx::kTileRows);
  // Tasks are (batch, head, query block), in that order. Where there are heads enough to keep every
  // thread busy (four a thread), a run takes all of a head's blocks: the head's keys and values are
  // then rounded once, a block's new rows at a time, not again for every block (on the 2-core AMD
  // EPYC Zen 4, BM_AttentionForward/Tq:256/Tk:256/bf16:1 see docs/performance.md).
  // Kept operands are written by one run a head (a head's rows by one thread).
  // Every row is written only where a rotation runs the products for every block (no one-row loops)
  // and the last block sees all the keys (Tq == Tk).
  if (keep && (!bf16 || !products || !rot || d.Tq != d.Tk || d.group != 1))
    throw std::logic_error("attention (cpu): kept operands are for rotary bf16 products with a kv head a head");
  bfloat16* kept_q = keep ? (*keep)[0].data<bfloat16>() : nullptr;
  bfloat16* kept_k = keep ? (*keep)[1].data<bfloat16>() : nullptr;
  bfloat16* kept_v = keep ? (*keep)[2].data<bfloat16>() : nullptr;
  // The probabilities too, where a fourth tensor (B, H, T, T) is given (NOTE [ Kept probabilities ]):
  // a block's rows [0, width) of each of its query rows are written, the rest never read.
  bfloat16* kept_p = keep && keep->size() > 3 ? (*keep)[3].data<bfloat16>() : nullptr;
  const int64_t per_run =
      keep || d.B * d.H >= 4 * int64_t(tbb::this_task_arena::max_concurrency()) ? nblocks : 1;
  parallel_for(d.B * d.H * nblocks / per_run, 1, [&](int64_t r0, int64_t r1) {
    float* scratch = thread_scratch<float, Slot::s>(blk_rows * width_max);
    E* qb = products ? thread_scratch<E, Slot::q>(rows_pad * d.D) : nullptr;
    E* kb = products ? thread_scratch<E, Slot::k>(width_max * d.D) : nullptr;
    const int64_t pb_cols = tiles ? cpu::amx::round_up(width_max, cpu::amx::kTileDepth) : width_max;
    bfloat16* pb = bf16 && products ? thread_scratch<bfloat16, Slot::p>(rows_pad * pb_cols) : nullptr;
    bfloat16* vb = bf16 && products ? thread_scratch<bfloat16, Slot::v>(width_max * d.D) : nullptr;
    bfloat16* k_tiles = tiles ? thread_scratch<bfloat16, Slot::kt_tiles>(cpu::amx::vnni_elems(d.D, width_max)) : nullptr;
    bfloat16* v_tiles = tiles ? thread_scratch<bfloat16, Slot::v_tiles>(cpu::amx::vnni_elems(width_max, d.D)) : nullptr;
    // kb (and vb) hold the first `rounded` rows of kv head (rounded_b, rounded_hk): a head's blocks
    // only add keys, and the next head of a group reads the same ones.
    int64_t rounded_b = -1, rounded_hk = -1, rounded = 0;
    int64_t vt_b = -1, vt_h = -1, vt_rows = 0;  // v_tiles hold the first vt_rows keys for head (vt_b, vt_h)
    for (int64_t task = r0 * per_run; task < r1 * per_run; ++task) {
      const int64_t blk = task % nblocks, h = (task / nblocks) % d.H, b = task / (nblocks * d.H);
      const int64_t hk = h / d.group;
      const int64_t i0 = blk * kQueryBlock, rows = std::min(kQueryBlock, d.Tq - i0);
      float* o = Out.at(b, h, i0);
      const int64_t ldo = Out.st;
      float* l = lp + (b * d.H + h) * d.Tq + i0;
      if (rows == 1 && !rot) {  // decoding: float32 loops (a one-row product costs more in dispatch than the work)
        attend_row(Q.at(b, h, i0), K, V, b, hk, visible_keys(d, causal, i0), d.D, scale, scratch, o, l);
        continue;
      }
      const int64_t width = visible_keys(d, causal, i0 + rows - 1);
      if (width == 0) {
        for (int64_t r = 0; r < rows; ++r) std::fill(o + r * ldo, o + r * ldo + d.D, 0.0f);
        std::fill(l, l + rows, -INFINITY);
        continue;
      }
      float* s = scratch;
      // The block's q (qs), the head's k and v (ks, vs) as the products read them: this thread's
      // buffers, or rows of the kept tensors.
      const E* qs = qb;
      E* ks = kb;
      bfloat16* vs = vb;
      if constexpr (bf16) {
        if (keep) {
          bfloat16* kq = kept_q + ((b * d.H + h) * d.Tq + i0) * d.D;
          ks = kept_k + (b * d.Hkv + hk) * d.Tk * d.D, vs = kept_v + (b * d.Hkv + hk) * d.Tk * d.D;
          operand_rows(Q.at(b, h, i0), Q.st, d.D, 0, rows, kq, rot, i0);
          // The tiles read whole tiles of rows, and fold wants q scaled: then a copy in the buffer.
          if (tiles && (fold || rows % cpu::amx::kTileRows != 0)) scaled_copy(kq, rows * d.D, fold ? scale : 1.0f, qb);
          else qs = kq;
        } else {
          operand_rows(Q.at(b, h, i0), Q.st, d.D, 0, rows, qb, rot, i0, fold ? scale : 1.0f);
        }
      } else {
        operand_rows(Q.at(b, h, i0), Q.st, d.D, 0, rows, qb, rot, i0);
      }
      if (b != rounded_b || hk != rounded_hk) rounded_b = b, rounded_hk = hk, rounded = 0;
      if (width > rounded) {
        operand_rows(K.at(b, hk), K.st, d.D, rounded, width, ks, rot, 0);
        if constexpr (bf16) {
          round_rows(V.at(b, hk), V.st, d.D, rounded, width, vs);
          if (tiles) cpu::amx::pack_vnni_transposed_cols(ks, d.D, d.D, rounded, width, k_tiles);
        }
        rounded = width;
      }
      // V's tiles hold exactly this block's keys (NOTE [ Tiles past a window ]).
      if (tiles) {
        if (b != vt_b || h != vt_h) vt_b = b, vt_h = h, vt_rows = 0;
        if (vt_rows != width) cpu::amx::pack_vnni_rows(vs, d.D, std::min(vt_rows, width), width, d.D, width_max, v_tiles);
        vt_rows = width;
      }
      if constexpr (!bf16) {
        if (rows == 1) {  // the float32 loops on the rotated rows, as attention_rows<float> takes one row
          const Heads<float> rotated_keys(ks, 0, 0, d.D);
          attend_row(qs, rotated_keys, V, b, hk, width, d.D, scale, s, o, l);
          continue;
        }
        // S (rows, width) = scale Q_blk K^T, its softmax in place, O (rows, D) = P V.
        gemm(false, true, rows, width, d.D, scale, qs, d.D, ks, d.D, 0, s, width);
        softmax_rows(s, rows, width, width, d, causal, i0, l);
        gemm(false, false, rows, d.D, width, 1.0f, s, width, V.at(b, hk), V.st, 0, o, ldo);
        continue;
      }
      // S (rows, width) = scale Q_blk K^T (on tiles unscaled unless folded into q, then scaled below
      // as each row is read).
      if constexpr (bf16) {
        if (tiles) cpu::amx::gemm(rows, width, d.D, 1.0f, qs, d.D, k_tiles, d.D, 0.0f, s, width);
        else gemm(false, true, rows, width, d.D, scale, qs, d.D, ks, d.D, 0, s, width);
      }
      // P = softmax(S) in bfloat16, its normalization and rounding one pass; its rows pld apart,
      // zeros past the visible keys (on tiles up to a whole tile: the product reads them). Kept
      // probabilities are written where they are kept (without tiles: the product reads them there)
      // or copied there (on tiles, whose padded rows may not fit a row of the kept tensor).
      bfloat16* kept_rows = kept_p ? kept_p + ((b * d.H + h) * d.Tq + i0) * d.Tk : nullptr;
      bfloat16* p_rows = kept_rows && !tiles ? kept_rows : pb;
      const int64_t pld = tiles ? cpu::amx::round_up(width, cpu::amx::kTileDepth) : kept_rows ? d.Tk : width;
      const int64_t p_end = tiles ? pld : width;  // a row's zeros end here
      for (int64_t r = 0; r < rows; ++r) {
        float* sr = s + r * width;
        bfloat16* pr = p_rows + r * pld;
        const int64_t n = visible_keys(d, causal, i0 + r);
        if (tiles && !fold)
          for (int64_t j = 0; j < n; ++j) sr[j] *= scale;
        const float m = vec::row_max(sr, n);
        if (n == 0 || m == -INFINITY) {
          std::fill(pr, pr + p_end, bfloat16());
          l[r] = -INFINITY;
          continue;
        }
        const float sum = vec::exp_shifted(sr, n, m, 1.0f, sr);
        vec::round_to_bf16(sr, n, 1.0f / sum, pr);
        std::fill(pr + n, pr + p_end, bfloat16());
        l[r] = m + std::log(sum);
      }
      if (kept_rows && tiles)
        for (int64_t r = 0; r < rows; ++r) std::copy(pb + r * pld, pb + r * pld + width, kept_rows + r * d.Tk);
      // O (rows, D) = P V.
      if (tiles) cpu::amx::gemm(rows, d.D, width, 1.0f, pb, pld, v_tiles, width_max, 0.0f, o, ldo);
      else gemm(false, false, rows, d.D, width, 1.0f, p_rows, pld, vs, d.D, 0, o, ldo);
    }
  });
}

// bf16 products, backward: as attention_rows_backward<float>. A task rounds its head's q, k, v and
// dout once; the probabilities and dS are rounded in the passes that compute them, dS once for both
// of its products. probabilities: the forward's kept bf16 P, multiplied where P would be recomputed
// (NOTE [ Kept probabilities ]).
// With rot, q and k are rotated as they are read (and rounded) and dq and dk rotated back by inv (the
// opposite angles) where they are made: dq a block at a time, dk once a head's blocks have summed it.
// dq, dk and dv may be strided (HeadsOut: the blocks of a packed qkv gradient). The products then
// write in this thread's scratch, as they would a contiguous gradient (summed in place, the rounding
// of dk's products differed), and the rows reach their places in the back-rotation's pass (or a
// copy): dq a block at a time, a head's dk and dv once its blocks are summed.
// E = float: the float32 kernels of rotary_attention, q and k rotated into dense float32 rows, v,
// dout, P and dS multiplied where they are; the values of attention_rows_backward<float> then rope's.
template <typename E>
void attention_rows_backward_dense(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& out, const Tensor& lse, double scale_d, bool causal, const Tensor& dq,
                                   const Tensor& dk, const Tensor& dv, const Rotation* rot = nullptr,
                                   const Rotation* inv = nullptr, const Tensor* probabilities = nullptr) {
  constexpr bool bf16 = std::is_same_v<E, bfloat16>;
  const Dims4 d = dims_of(q, k);
  const float scale = float(scale_d);
  // q, k and v: float32 (rotated and rounded here), or the forward's kept bf16 operands (NOTE [ Kept
  // bf16 operands ]), read as they lie.
  const bool kept = q.dtype() == DType::bf16;
  if (kept && !bf16) throw std::logic_error("attention backward (cpu): bfloat16 q, k and v under float32 products");
  auto f32_heads = [&](const Tensor& t) { return kept ? Heads<float>(nullptr, 0, 0, 0) : Heads<float>(t); };
  auto kept_heads = [&](const Tensor& t) { return kept ? Heads<bfloat16>(t) : Heads<bfloat16>(nullptr, 0, 0, 0); };
  const Heads<float> Q = f32_heads(q), K = f32_heads(k), V = f32_heads(v), dO(dout), O(out);
  const Heads<bfloat16> KQ = kept_heads(q), KK = kept_heads(k), KV = kept_heads(v);
  const float* lp = lse.data<float>();
  // The forward's probabilities (B, H, Tq, Tk), where it kept them (NOTE [ Kept probabilities ]).
  const bfloat16* kept_p = probabilities ? probabilities->data<bfloat16>() : nullptr;
  if (kept_p && !bf16) throw std::logic_error("attention backward (cpu): kept probabilities under float32 products");
  const HeadsOut<float> dQ(dq), dK(dk), dV(dv);
  const bool kv_in_place = dk.is_contiguous() && dv.is_contiguous();  // a head's dk and dv summed where they go
  const bool dq_in_place = dq.is_contiguous();
  const bool grouped = d.group > 1;
  std::vector<float> dk_part(grouped ? size_t(d.B * d.H * d.Tk * d.D) : 0);
  std::vector<float> dv_part(grouped ? size_t(d.B * d.H * d.Tk * d.D) : 0);
  SingleThreadedBlas single;
  // On AMX tiles (NOTE [ Attention on AMX tiles ] in backends/cpu/amx.cpp) a head's keys and values
  // are packed once for its blocks, and the two products that sum over a block's query rows are
  // made transposed, dV^T += dO^T P and dK^T += scale Q^T dS, so that their B, P and dS, are packed
  // from the rows just written rather than transposed; dK^T and dV^T go back to rows once a head's
  // blocks are summed.
  const bool tiles = bf16 && on_tiles(d);
  const bool fold = tiles && power_of_two(scale_d);  // NOTE [ A power-of-two scale ]: q comes scaled
  using cpu::amx::round_up;
  parallel_for(d.B * d.H, 1, [&](int64_t t0, int64_t t1) {
    const int64_t blk_rows = std::min(d.Tq, kQueryBlock), width_max = std::max<int64_t>(d.Tk, 1);
    const size_t block_elems = size_t(blk_rows * width_max);
    const int64_t tq_pad = round_up(d.Tq, cpu::amx::kTileDepth);  // the transposed rows' length
    const int64_t ds_cols = tiles ? round_up(width_max, cpu::amx::kTileDepth) : width_max;
    float* P = thread_scratch<float, Slot::s>(int64_t(block_elems));
    float* dP = thread_scratch<float, Slot::dp>(int64_t(block_elems));
    float* Dh = thread_scratch<float, Slot::di>(d.Tq);  // rowsum(dO * O) of the head's rows
    E* qh = thread_scratch<E, Slot::q>(round_up(d.Tq, cpu::amx::kTileRows) * d.D);
    E* kh = thread_scratch<E, Slot::k>(d.Tk * d.D);
    // The bf16 products' other operands; float32 products read dout, v, P and dS where they are.
    bfloat16* pb = bf16 ? thread_scratch<bfloat16, Slot::p>(int64_t(block_elems)) : nullptr;
    bfloat16* dsb = bf16 ? thread_scratch<bfloat16, Slot::ds>(round_up(blk_rows, cpu::amx::kTileRows) * ds_cols) : nullptr;
    bfloat16* doh = bf16 ? thread_scratch<bfloat16, Slot::dout>(round_up(d.Tq, cpu::amx::kTileRows) * d.D) : nullptr;
    // Tiles: K^T, V^T and K packed, q and dout transposed (D, tq_pad), P and dS packed each block,
    // dK^T and dV^T (D, Tk) summed.
    using cpu::amx::vnni_elems;
    bfloat16* kt_tiles = tiles ? thread_scratch<bfloat16, Slot::kt_tiles>(vnni_elems(d.D, width_max)) : nullptr;
    bfloat16* vt_tiles = tiles ? thread_scratch<bfloat16, Slot::vt_tiles>(vnni_elems(d.D, width_max)) : nullptr;
    bfloat16* k_tiles = tiles ? thread_scratch<bfloat16, Slot::k_tiles>(vnni_elems(width_max, d.D)) : nullptr;
    bfloat16* p_tiles = tiles ? thread_scratch<bfloat16, Slot::p_tiles>(vnni_elems(blk_rows, width_max)) : nullptr;
    bfloat16* qt = tiles ? thread_scratch<bfloat16, Slot::qt>(d.D * tq_pad) : nullptr;
    bfloat16* dot = tiles ? thread_scratch<bfloat16, Slot::dot>(d.D * tq_pad) : nullptr;
    float* dkt = tiles ? thread_scratch<float, Slot::dk_t>(d.D * width_max) : nullptr;
    float* dvt = tiles ? thread_scratch<float, Slot::dv_t>(d.D * width_max) : nullptr;
    bfloat16* vh = bf16 ? thread_scratch<bfloat16, Slot::v>(d.Tk * d.D) : nullptr;
    float* dk_scratch = grouped || kv_in_place ? nullptr : thread_scratch<float, Slot::dk>(d.Tk * d.D);
    float* dv_scratch = grouped || kv_in_place ? nullptr : thread_scratch<float, Slot::dv>(d.Tk * d.D);
    float* dq_scratch = dq_in_place ? nullptr : thread_scratch<float, Slot::dq>(blk_rows * d.D);
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t h = task % d.H, b = task / d.H, hk = h / d.group;
      float* dkh = grouped ? dk_part.data() + task * d.Tk * d.D : kv_in_place ? dK.at(b, hk) : dk_scratch;
      float* dvh = grouped ? dv_part.data() + task * d.Tk * d.D : kv_in_place ? dV.at(b, hk) : dv_scratch;
      float* dk_sum = tiles ? dkt : dkh;  // where the blocks sum dK (transposed on tiles)
      float* dv_sum = tiles ? dvt : dvh;
      std::fill(dk_sum, dk_sum + d.Tk * d.D, 0.0f);
      std::fill(dv_sum, dv_sum + d.Tk * d.D, 0.0f);
      // The head's q and k as the products read them.
      const E* qh_in = qh;
      const E* kh_in = kh;
      if (kept) {
        if constexpr (bf16) {  // copied only where q is scaled, or its rows are not whole tiles
          if (fold || (tiles && d.Tq % cpu::amx::kTileRows != 0))
            scaled_copy(KQ.at(b, h), d.Tq * d.D, fold ? scale : 1.0f, qh);
          else qh_in = KQ.at(b, h);
          kh_in = KK.at(b, hk);
        }
      } else {
        if constexpr (bf16) operand_rows(Q.at(b, h), Q.st, d.D, 0, d.Tq, qh, rot, 0, fold ? scale : 1.0f);
        else operand_rows(Q.at(b, h), Q.st, d.D, 0, d.Tq, qh, rot, 0);
        operand_rows(K.at(b, hk), K.st, d.D, 0, d.Tk, kh, rot, 0);
      }
      // dout's and v's rows as the products read them: (pointer, leading dimension).
      const E* dos;
      const E* vs;
      int64_t dold, vld;
      for (int64_t r = 0; r < d.Tq; ++r) {  // rowsum(dO * O), its rows fetched ahead
        prefetch_row_ahead(dO.at(b, h), dO.st, d.D, r, d.Tq);
        prefetch_row_ahead(O.at(b, h), O.st, d.D, r, d.Tq);
        Dh[r] = vec::row_dot(dO.at(b, h, r), O.at(b, h, r), d.D);
      }
      if constexpr (bf16) {
        round_rows(dO.at(b, h), dO.st, d.D, 0, d.Tq, doh);
        if (kept) vs = KV.at(b, hk);
        else round_rows(V.at(b, hk), V.st, d.D, 0, d.Tk, vh), vs = vh;
        dos = doh, dold = vld = d.D;
        if (tiles) {
          cpu::amx::pack_vnni_transposed(kh_in, d.D, d.D, d.Tk, kt_tiles);
          cpu::amx::pack_vnni_transposed(vs, d.D, d.D, d.Tk, vt_tiles);
          cpu::amx::transpose(qh_in, d.D, d.Tq, d.D, qt, tq_pad);
          cpu::amx::transpose(doh, d.D, d.Tq, d.D, dot, tq_pad);
        }
      } else {
        dos = dO.at(b, h), dold = dO.st, vs = V.at(b, hk), vld = V.st;
      }
      int64_t k_rows = 0;  // k_tiles hold the head's first k_rows keys
      for (int64_t i0 = 0; i0 < d.Tq; i0 += kQueryBlock) {
        const int64_t rows = std::min(kQueryBlock, d.Tq - i0);
        const int64_t width = visible_keys(d, causal, i0 + rows - 1);
        float* dqb = dQ.at(b, h, i0);
        if (width == 0) {
          for (int64_t r = 0; r < rows; ++r) std::fill(dqb + r * dQ.st, dqb + r * dQ.st + d.D, 0.0f);
          continue;
        }
        const float* lb = lp + (b * d.H + h) * d.Tq + i0;
        const E* qblk = qh_in + i0 * d.D;
        const E* doblk = dos + i0 * dold;
        // The block's bf16 probabilities: rows pld apart, the kept ones or those made below.
        const bfloat16* kept_rows = kept_p ? kept_p + ((b * d.H + h) * d.Tq + i0) * d.Tk : nullptr;
        const bfloat16* p_rows = kept_rows ? kept_rows : pb;
        const int64_t pld = kept_rows ? d.Tk : width;
        // Unless kept: P (rows, width) = exp(scale Q K^T - lse), zero where masked; kept in float32
        // for dS (on tiles S comes unscaled, and is scaled here, unless the scale is folded into q).
        if (!kept_rows) {
          if constexpr (bf16) {
            if (tiles) cpu::amx::gemm(rows, width, d.D, 1.0f, qblk, d.D, kt_tiles, d.D, 0.0f, P, width);
            else gemm(false, true, rows, width, d.D, scale, qblk, d.D, kh_in, d.D, 0, P, width);
          } else {
            gemm(false, true, rows, width, d.D, scale, qblk, d.D, kh_in, d.D, 0, P, width);
          }
          for (int64_t r = 0; r < rows; ++r) {
            float* pr = P + r * width;
            const int64_t n = visible_keys(d, causal, i0 + r);
            if (tiles && !fold)
              for (int64_t j = 0; j < n; ++j) pr[j] *= scale;
            if (lb[r] == -INFINITY) {
              std::fill(pr, pr + width, 0.0f);
              if constexpr (bf16) std::fill(pb + r * width, pb + (r + 1) * width, bfloat16());
            } else if constexpr (bf16) {
              exp_rows_rounded(pr, n, width, lb[r], pb + r * width);
            } else {
              vec::exp_shifted(pr, n, lb[r], 1.0f, pr);
              std::fill(pr + n, pr + width, 0.0f);
            }
          }
        }
        const float* Di = Dh + i0;
        const E* pe;
        if constexpr (bf16) pe = p_rows;
        else pe = P;
        // dV (width, D) += P^T dO (on tiles dV^T (D, width) += dO^T P).
        if (tiles) {
          cpu::amx::pack_vnni(p_rows, pld, rows, width, p_tiles);
          cpu::amx::gemm(d.D, width, rows, 1.0f, dot + i0, tq_pad, p_tiles, rows, 1.0f, dvt, d.Tk);
        } else {
          gemm(true, false, width, d.D, rows, 1.0f, pe, pld, doblk, dold, 1.0f, dvh, d.D);
        }
        // dP (rows, width) = dO V^T.
        if constexpr (bf16) {
          if (tiles) cpu::amx::gemm(rows, width, d.D, 1.0f, doblk, dold, vt_tiles, d.D, 0.0f, dP, width);
          else gemm(false, true, rows, width, d.D, 1.0f, doblk, dold, vs, vld, 0, dP, width);
        } else {
          gemm(false, true, rows, width, d.D, 1.0f, doblk, dold, vs, vld, 0, dP, width);
        }
        // dS = P * (dP - Di), rounded for bf16 products (rows dsld apart, on tiles zeros up to a
        // whole tile: dQ's product reads them).
        const int64_t dsld = tiles ? round_up(width, cpu::amx::kTileDepth) : width;
        for (int64_t r = 0; r < rows; ++r) {
          float* dpr = dP + r * width;
          const float* pr = P + r * width;
          const float di = Di[r];
          if constexpr (bf16) {
            if (kept_rows) ds_rounded(kept_rows + r * pld, dpr, di, width, dsb + r * dsld);
            else ds_rounded(pr, dpr, di, width, dsb + r * dsld);
            std::fill(dsb + r * dsld + width, dsb + (r + 1) * dsld, bfloat16());
          } else {
            for (int64_t j = 0; j < width; ++j) dpr[j] = pr[j] * (dpr[j] - di);
          }
        }
        const E* dse;
        if constexpr (bf16) dse = dsb;
        else dse = dP;
        // dQ (rows, D) = scale dS K;  dK (width, D) += scale dS^T Q.
        // A strided dq (a packed gradient's block) is made in scratch, as a contiguous one is, and
        // reaches its rows in the rotation's pass (or a copy).
        float* dqm = dq_in_place ? dqb : dq_scratch;
        if (tiles) {  // dK^T (D, width) += scale Q^T dS
          // K's tiles hold exactly this block's keys (NOTE [ Tiles past a window ]).
          if constexpr (bf16)
            if (k_rows != width) cpu::amx::pack_vnni_rows(kh_in, d.D, std::min(k_rows, width), width, d.D, d.Tk, k_tiles);
          k_rows = width;
          cpu::amx::gemm(rows, d.D, width, scale, dsb, dsld, k_tiles, d.Tk, 0.0f, dqm, d.D);
          cpu::amx::pack_vnni(dsb, dsld, rows, width, p_tiles);
          cpu::amx::gemm(d.D, width, rows, fold ? 1.0f : scale, qt + i0, tq_pad, p_tiles, rows, 1.0f, dkt, d.Tk);
        } else {
          gemm(false, false, rows, d.D, width, scale, dse, width, kh_in, d.D, 0, dqm, d.D);
          gemm(true, false, width, d.D, rows, scale, dse, width, qblk, d.D, 1.0f, dkh, d.D);
        }
        if (inv || !dq_in_place)
          for (int64_t r = 0; r < rows; ++r) {
            prefetch_row_ahead(dqb, dQ.st, d.D, r, rows, /*for_write=*/true);
            if (inv) inv->rotate(dqm + r * d.D, i0 + r, dqb + r * dQ.st);
            else std::copy(dqm + r * d.D, dqm + (r + 1) * d.D, dqb + r * dQ.st);
          }
      }
      if (tiles) {  // the head's sums back to rows
        cpu::amx::transpose(dkt, d.Tk, d.D, d.Tk, dkh, d.D);
        cpu::amx::transpose(dvt, d.Tk, d.D, d.Tk, dvh, d.D);
      }
      if (grouped) continue;
      if (kv_in_place) {
        if (inv)
          for (int64_t t = 0; t < d.Tk; ++t) inv->rotate(dkh + t * d.D, t, dkh + t * d.D);
        continue;
      }
      for (int64_t t = 0; t < d.Tk; ++t) {  // the head's rows into their strided places
        prefetch_row_ahead(dK.at(b, hk), dK.st, d.D, t, d.Tk, /*for_write=*/true);
        prefetch_row_ahead(dV.at(b, hk), dV.st, d.D, t, d.Tk, /*for_write=*/true);
        if (inv) inv->rotate(dkh + t * d.D, t, dK.at(b, hk, t));
        else std::copy(dkh + t * d.D, dkh + (t + 1) * d.D, dK.at(b, hk, t));
        std::copy(dvh + t * d.D, dvh + (t + 1) * d.D, dV.at(b, hk, t));
      }
    }
  });
  if (grouped) sum_group_gradients(d, dk_part, dv_part, dk, dv);
  if (inv && grouped) {  // each kv head's dk is whole only now
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(d.D, 1));
    parallel_for(d.B * d.Hkv * d.Tk, grain, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        float* row = dK.at(r / (d.Hkv * d.Tk), (r / d.Tk) % d.Hkv, r % d.Tk);
        inv->rotate(row, r % d.Tk, row);
      }
    });
  }
}

void check_attention_layout(const char* op, std::initializer_list<const Tensor*> views,
                            std::initializer_list<const Tensor*> outputs) {
  for (const Tensor* t : views) {
    vec::require_float(*t, op, "every input");
    vec::require_unit_last_stride(*t, op, "every input");
  }
  for (const Tensor* t : outputs) vec::require_contiguous(*t, op, "every output");
}

// An output that may be a view: (B, H, T, D) rows with a unit stride on D that do not overlap (the
// blocks of a packed gradient, or the token-major rows of rotary_attention_packed's result).
void check_output_rows(const char* op, std::initializer_list<const Tensor*> outputs, const char* what) {
  for (const Tensor* t : outputs) {
    vec::require_unit_last_stride(*t, op, what);
    if (t->size(2) > 1 && t->strides()[2] < t->size(3))
      throw std::logic_error(std::string(op) + ": rows of " + what + " overlap");
  }
}

// q, k, v (and dout, out) may be views with a unit stride on D (e.g. heads split out of a packed
// qkv); outputs are contiguous.
void forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal, bool bf16_products,
             const Tensor& out, const Tensor& lse) {
  const bool kv_bf16 = k.dtype() == DType::bf16 && q.dtype() == DType::f32;  // a bf16 KV cache, decoding (attention.h)
  if (kv_bf16) {
    check_attention_layout("attention (cpu)", {&q}, {&out, &lse});
    for (const Tensor* t : {&k, &v}) vec::require_unit_last_stride(*t, "attention (cpu)", "k and v");
  } else {
    check_attention_layout("attention (cpu)", {&q, &k, &v}, {&out, &lse});
  }
  if (q.size(3) == 0) {  // no channels: every visible score is 0, so lse = log(#visible)
    const Dims4 d = dims_of(q, k);
    for (int64_t r = 0; r < lse.numel(); ++r)
      write_element(lse, r, std::log(double(visible_keys(d, causal, r % d.Tq))));
    return;
  }
  if (lse.numel() == 0) return;
  if (kv_bf16) attention_row_kv_bf16(q, k, v, scale, causal, out, lse);
  else if (q.dtype() == DType::f64) attention_rows<double>(q, k, v, scale, causal, out, lse);
  else if (bf16_products) attention_rows_dense<bfloat16>(q, k, v, scale, causal, out, lse);
  else attention_rows<float>(q, k, v, scale, causal, out, lse);
}

void backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
              const Tensor& lse, double scale, bool causal, bool bf16_products, const Tensor& dq, const Tensor& dk,
              const Tensor& dv) {
  check_attention_layout("attention_backward (cpu)", {&dout, &q, &k, &v, &out}, {&lse, &dq, &dk, &dv});
  if (q.size(3) == 0) return;  // dq, dk, dv are empty
  if (q.dtype() == DType::f64) attention_rows_backward<double>(dout, q, k, v, out, lse, scale, causal, dq, dk, dv);
  else if (bf16_products) attention_rows_backward_dense<bfloat16>(dout, q, k, v, out, lse, scale, causal, dq, dk, dv);
  else attention_rows_backward<float>(dout, q, k, v, out, lse, scale, causal, dq, dk, dv);
}

// rotary_attention's kernels: the dense kernels with q and k rotated as they are rounded (bf16
// products) or copied (float32).
Rotation rotation_of(const RopeTable& table, RopeLayout layout) {
  return {table.cos.data(), table.sin.data(), table.half, layout == RopeLayout::interleaved};
}

// The forward's kept probabilities: contiguous bfloat16 (B, H, Tq, Tk), a kv head a head.
void check_probabilities(const Tensor& p, const Tensor& q, const Tensor& k, const char* op) {
  if (p.dtype() != DType::bf16 || !p.is_contiguous() || !(p.shape() == Shape{q.size(0), q.size(1), q.size(2), k.size(2)}) ||
      q.size(1) != k.size(1))
    throw std::logic_error(std::string(op) + ": kept probabilities must be contiguous bfloat16 (B, H, Tq, Tk), a kv head a head");
}

void check_rotary(const Tensor& q, const Tensor& k, const RopeTable& table, const char* op) {
  if ((q.dtype() != DType::f32 && q.dtype() != DType::bf16) || q.size(2) != k.size(2) || q.size(3) != 2 * table.half ||
      int64_t(table.cos.size()) != q.size(2) * table.half || int64_t(table.sin.size()) != q.size(2) * table.half)
    throw std::logic_error(std::string(op) + ": float32 (or kept bfloat16) q and k of one length T and a (T, D/2) rope table expected");
}

void forward_rotary(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal, bool bf16_products,
                    const RopeTable& table, RopeLayout layout, const Tensor& out, const Tensor& lse,
                    const std::vector<Tensor>* keep) {
  // out: contiguous, or (B, H, T, D) rows of a (B, T, H, D) tensor (a unit stride on D, rows that
  // do not overlap): rotary_attention_packed's, whose transpose back is then free.
  check_attention_layout("rotary attention (cpu)", {&q, &k, &v}, {&lse});
  check_output_rows("rotary attention (cpu)", {&out}, "out");
  check_rotary(q, k, table, "rotary attention (cpu)");
  if (keep) {
    if (!bf16_products || (keep->size() != 3 && keep->size() != 4))
      throw std::logic_error("rotary attention (cpu): kept operands are q, k and v (and the probabilities) under bf16 products");
    const Tensor* like[] = {&q, &k, &v};
    for (size_t i = 0; i < 3; ++i)
      if ((*keep)[i].dtype() != DType::bf16 || !(*keep)[i].is_contiguous() || !((*keep)[i].shape() == like[i]->shape()))
        throw std::logic_error("rotary attention (cpu): kept operands must be contiguous bfloat16 shaped as q, k, v");
    if (keep->size() == 4) check_probabilities((*keep)[3], q, k, "rotary attention (cpu)");
  }
  if (lse.numel() == 0) return;
  const Rotation rot = rotation_of(table, layout);
  if (bf16_products) attention_rows_dense<bfloat16>(q, k, v, scale, causal, out, lse, &rot, keep);
  else attention_rows_dense<float>(q, k, v, scale, causal, out, lse, &rot);
}

// dq, dk and dv: contiguous, or the blocks of a packed gradient (a unit stride on D, rows apart).
void backward_rotary(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                     const Tensor& lse, double scale, bool causal, bool bf16_products, const RopeTable& table,
                     const RopeTable& inverse, RopeLayout layout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                     const Tensor* probabilities) {
  if (probabilities) {
    if (!bf16_products) throw std::logic_error("rotary attention backward (cpu): kept probabilities under float32 products");
    check_probabilities(*probabilities, q, k, "rotary attention backward (cpu)");
  }
  // q, k and v: float32, or the forward's kept bf16 operands (contiguous).
  if (q.dtype() == DType::bf16) {
    for (const Tensor* t : {&q, &k, &v})
      if (t->dtype() != DType::bf16 || !t->is_contiguous() || !bf16_products)
        throw std::logic_error("rotary attention backward (cpu): kept operands are contiguous bfloat16, under bf16 products");
    check_attention_layout("rotary attention backward (cpu)", {&dout, &out}, {&lse});
  } else {
    check_attention_layout("rotary attention backward (cpu)", {&dout, &q, &k, &v, &out}, {&lse});
  }
  check_output_rows("rotary attention backward (cpu)", {&dq, &dk, &dv}, "dq, dk or dv");
  check_rotary(q, k, table, "rotary attention backward (cpu)");
  check_rotary(q, k, inverse, "rotary attention backward (cpu)");
  const Rotation rot = rotation_of(table, layout), inv = rotation_of(inverse, layout);
  if (bf16_products)
    attention_rows_backward_dense<bfloat16>(dout, q, k, v, out, lse, scale, causal, dq, dk, dv, &rot, &inv,
                                            probabilities);
  else
    attention_rows_backward_dense<float>(dout, q, k, v, out, lse, scale, causal, dq, dk, dv, &rot, &inv);
}

}  // namespace

AttentionKernels attention_cpu_kernels() {
  // The CPU backend first: it fixes a mis-detected OpenBLAS core and holds OpenBLAS to one thread
  // (NOTE [ One thread pool ]) before these kernels' first GEMM.
  backend_for(Device::cpu());
  return {forward, backward, forward_rotary, backward_rotary};
}

}  // namespace mvgpt::fused
