// GEMM and GEMV over OpenBLAS and oneDNN, split across the TBB pool.
//
// NOTE [ One thread pool ]
// The framework owns one pool, oneTBB's; OpenBLAS is held to one thread for the whole process and
// large products are cut into row (or column) blocks, one single-threaded BLAS call per TBB task.
// Why: OpenBLAS's pthread build keeps its own workers, which spin (sched_yield) for a long while
// after each call. On this 2-core machine they then steal a core from the TBB loops that follow
// (layer norm, GELU, attention...), and the TBB workers spinning between ops steal it back from
// the next GEMM: two pools fighting over two cores. Measured on the series' model (batch 16 x 256,
// one training step, 2 threads): OpenBLAS's pool for big GEMMs, switched off around TBB-parallel
// batched GEMMs (the previous policy): 0.4-0.8 s of system time per step, most of it sched_yield;
// one TBB pool: see bench/README or the commit message for the figures. Decoding gains more: a
// 1-row product is a GEMV here, split across both cores, where OpenBLAS's sgemm packed the whole
// weight matrix on one thread.
// Splitting: a product is cut along the larger of M and N, so that the operand every task packs
// again (all of B when cutting M) is the smaller one; a few blocks per thread let TBB balance the
// load when another process takes a core. Each output element is still computed by one BLAS call
// over the whole K, so results do not depend on the thread count.
#include <mvgpt/backends/cpu/blas.h>

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <tbb/task_arena.h>

#include <mvgpt/backends/cpu/amx_gemm.h>
#include <mvgpt/backends/cpu/bf16_gemm.h>
#include <mvgpt/backends/cpu/fused_common.h>  // hsum16, store_scaled
#include <mvgpt/backends/cpu/onednn_matmul.h>
#include <mvgpt/backends/cpu/parallel.h>
#include <mvgpt/util/profile.h>

namespace mvgpt::cpu::blas {
namespace {

// Below this many multiply-adds a product runs as one call: a task costs a few microseconds.
constexpr int64_t kMinParallelGemm = int64_t(1) << 21;
// A GEMV reads its matrix once; below this many elements one core streams it fast enough.
constexpr int64_t kMinParallelGemv = int64_t(1) << 16;
// Blocks per thread: more than one lets TBB rebalance when a core is busy elsewhere.
constexpr int64_t kBlocksPerThread = 2;
// bf16 GEMMs take one: each oneDNN call reorders its shared operand into the kernel's layout again,
// and with one block per thread the series' bf16 step ran its products at 390-392 GFLOP/s against
// 376-382 (step_profile --precision bf16, alternated, 2-core AMD EPYC Zen 4); float32 gained within
// the noise (181-185 against 183-191 GFLOP/s) and keeps its two.
constexpr int64_t kBf16BlocksPerThread = 1;
// NOTE [ Cutting a bf16 product ]
// OpenBLAS packs both operands of every call, so a product is cut along the larger of M and N (the
// operand each block packs again whole is the smaller one). A bf16 product whose B is stored (K, N)
// is cut along N instead once N is 1,024 wide (and M at most 8 N), for what oneDNN 2.6 then does
// with the blocks, measured on the 2-core AMD EPYC Zen 4 (AVX512-BF16): cut along M, the MLP's
// input gradient's blocks (2048 x 1536, K 384) go to its brgemm kernels, which read A in place and
// copy all of B into their layout for each block; cut along N (4096 x 768) they go to its gemm:jit
// kernels, since brgemm takes only dense blocks (NOTE [ Dense blocks for oneDNN ]; the op profile
// names each product's kernel). BM_Bf16Gemm M 4096 K 384 N 1536 ran at 429-439 GFLOP/s cut along N
// against 383-397 along M (alternated twice); in the bf16 step that product took 68-71 ms against
// 70-76 (alternated three times). Cut along N, M 4096 K 1536 N 384 (192-column blocks) lost, 401-418
// against 415-437, and products whose B is a transposed weight (the forward's) gained nothing; both
// keep the cut along M. Where blocks are made dense (by default with AMX) the rule is off: there
// every such block goes to brgemm. A product written in bfloat16 (gemm_rounded) with A not
// transposed is cut along M whatever N is, wherever every block gets at least kAlign rows (else along
// N; with A transposed, along the longer side): its blocks (A's rows, all of B, C's rows) are then
// dense where the operands are, and go to brgemm, which rounds in its output pass. On the same Zen
// 4 (step profile, alternated seven times) the MLP's second layer's input gradient (M 4096 K 384 N
// 1536) took 69-70 ms a step against 75 on gemm:jit cut along N, and the classifier's logits
// (1,024-row chunks, N 10,000, B a transposed weight, cut along N as the longer side) 77 against
// 79-81. Only the model's shapes were measured: a product of few rows and a wide N copies all of B
// for each block. Each output is still one call's sum over the whole K, so a cut can differ from
// the other only in the order oneDNN adds the exact products (a 6-step bf16 training run wrote the
// same weights with either).
constexpr int64_t kBf16CutNFrom = 1024;
// NOTE [ float32 products through oneDNN ]
// Where oneDNN has its float32 brgemm kernels (CPUs with AVX-512), a float32 product's blocks go to
// them rather than to OpenBLAS, one block a thread as for bf16 (each call copies its share of B
// into the kernel's layout). Measured on the 2-core AMD EPYC Zen 4 (OpenBLAS 0.3.21's Cooperlake
// kernels), BM_SgemmModel at the series' shapes, alternated twice: the products of a layer took
// 211 ms against 224 (qkv 17.1 against 18.5, its backward's 17.0 against 18.0, the MLP's 22.4-23.8
// against 24.1-25.5, the weight gradients 18.8-24.5 against 19.4-25.1); the classifier's three
// (10,000 wide) 157-164 either way. In the float32 step profile the products took 1,782-1,805 ms
// against 1,848-1,977, the step 2,037-2,061 against 2,103-2,244. Bit for bit the sums differ from
// OpenBLAS's (another order of the same float32 additions, as between any two BLAS builds).
// Not where B is stored (K, N) more than kOneDnnWidestPlainB columns wide: with N 3,072, one
// thread's 1,536 x 3,072 x 3,072 ran at 76 GFLOP/s through oneDNN against 97-103 through OpenBLAS
// (1,024 x 2,048 x 2,048 and 512 x 4,096 x 4,096 ran level, transposed B at 3,072 faster). The
// attention's own block products stay with OpenBLAS (attention_cpu.cpp): through oneDNN its step
// rows did not change.
// Without AVX-512 (AVX2: AMD Zen 3) oneDNN has no float32 brgemm, and its gemm:jit multiplies the
// products whose A is not transposed, cut along M (the forward's and the input gradients'), against
// OpenBLAS 0.3.21's Zen (Haswell) kernels. Measured on the 2-core AMD EPYC Zen 3 (family 25 model
// 1), float32 step profile alternated eight times: those products 1,300 ms a step against 1,374
// (each 3-11% faster, the rest level), the step's median 2,690 against 2,775. The weight gradients
// (A transposed, cut along M) stay with OpenBLAS: through gemm:jit they were 17-41% slower
// (BM_SgemmModel), as was the classifier's forward cut along N (1.38x).
constexpr int64_t kOneDnnWidestPlainB = 2048;

// Block edges on multiples of this many rows (OpenBLAS's register tiles are 4-16 wide).
constexpr int64_t kAlign = 32;

inline CBLAS_TRANSPOSE tr(bool t) { return t ? CblasTrans : CblasNoTrans; }

inline void call_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                      const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, tr(ta), tr(tb), int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C,
              int(ldc));
}
inline void call_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
                      int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, tr(ta), tr(tb), int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C,
              int(ldc));
}
// y (n, stride incy) *= beta, with beta = 0 writing zeros (BLAS may keep a NaN of y otherwise).
template <typename T>
void scale(T* y, int64_t n, int64_t incy, T beta) {
  for (int64_t i = 0; i < n; ++i) y[i * incy] = beta == T(0) ? T(0) : y[i * incy] * beta;
}

// Whether this CPU's float32 products go to oneDNN (NOTE [ float32 products through oneDNN ]): its
// answer for a typical shape.
bool onednn_float32() {
  static const bool yes = onednn::takes(DType::f32, onednn::implementation(onednn::kTypicalFloat32));
  return yes;
}
bool float32_via_onednn(bool tb, int64_t N) { return (tb || N <= kOneDnnWidestPlainB) && onednn_float32(); }

// One float32 block: oneDNN where the product goes there (via_onednn) and oneDNN takes the block,
// OpenBLAS otherwise, the bias (if any) then written into C first and the product added to it.
inline void call_gemm(bool via_onednn, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                      int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  if (via_onednn &&
      onednn::multiply({ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, bias != nullptr, DType::f32}, A, B, C, bias))
    return;
  call_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, onednn::bias_first(M, N, bias, beta, C, ldc), C, ldc);
}

// NOTE [ float32 GEMV over rows ]
// Decoding in float32 multiplies one row of activations by each weight matrix stored (out, in): a
// dot product of x with every row, 58 MB of weights a token for the series' model, more than the
// last-level cache holds, so the product is as fast as the rows stream from memory. OpenBLAS's
// sgemv (0.3.21, the Cooperlake kernels) streamed them at 19-20 GB/s on the 2-core AMD EPYC Zen 4,
// where reading one row at a time, a single sequential stream the prefetchers follow, ran at 32-38
// GB/s (the model's 25 matrices, two threads, a standalone loop; software prefetching made it
// slower). The sum: four sixteen-lane sums over the row's 64-wide steps, the rest of its 16-wide
// chunks into the first, (A + B) + (C + D), lane i added to lane i + 8 and hsum8 (hsum16), then the tail in
// order: for a given build the same on every CPU (sixteen lanes are two eight-lane halves where
// there is no AVX-512) and whatever block of rows a task takes; the sums' multiply-adds are fused
// where the build targets FMA (-march=native), as the rest of the CPU kernels are. alpha = 0 gives
// beta y without reading X, as BLAS does (0 times an infinity in X would be NaN).
// acc += p[0:16] * q[0:16], lane by lane (no 64-byte vector passed by value: without AVX-512 its ABI
// would differ between translation units).
inline void add_products16(f32x16& acc, const float* p, const float* q) {
  f32x16 u, v;
  std::memcpy(&u, p, sizeof u);
  std::memcpy(&v, q, sizeof v);
  acc += u * v;
}
float dot_row(const float* row, const float* x, int64_t n) {
  f32x16 a{}, b{}, c{}, d{};
  int64_t k = 0;
  for (; k + 64 <= n; k += 64) {
    add_products16(a, row + k, x + k);
    add_products16(b, row + k + 16, x + k + 16);
    add_products16(c, row + k + 32, x + k + 32);
    add_products16(d, row + k + 48, x + k + 48);
  }
  for (; k + 16 <= n; k += 16) add_products16(a, row + k, x + k);
  const f32x16 s = (a + b) + (c + d);
  float sum = fused::hsum16(s);
  for (; k < n; ++k) sum += row[k] * x[k];
  return sum;
}

// y (rows of op(X)) = alpha op(X) x + beta y, X stored row-major (rows, cols) with leading dim ld.
inline void call_gemv(bool t, int64_t rows, int64_t cols, float alpha, const float* X, int64_t ld, const float* x,
                      int64_t incx, float beta, float* y, int64_t incy) {
  if (t || incx != 1)
    return cblas_sgemv(CblasRowMajor, tr(t), int(rows), int(cols), alpha, X, int(ld), x, int(incx), beta, y,
                       int(incy));
  if (alpha == 0.0f) return scale(y, rows, incy, beta);
  for (int64_t i = 0; i < rows; ++i)  // NOTE [ float32 GEMV over rows ]
    fused::store_scaled(y + i * incy, dot_row(X + i * ld, x, cols), alpha, beta);
}
inline void call_gemv(bool t, int64_t rows, int64_t cols, double alpha, const double* X, int64_t ld, const double* x,
                      int64_t incx, double beta, double* y, int64_t incy) {
  cblas_dgemv(CblasRowMajor, tr(t), int(rows), int(cols), alpha, X, int(ld), x, int(incx), beta, y, int(incy));
}

int64_t threads() { return std::max(1, tbb::this_task_arena::max_concurrency()); }

// The length of for_blocks' blocks (the last may be shorter): n itself where it makes one.
inline int64_t block_step(int64_t n, int64_t blocks) {
  blocks = std::clamp<int64_t>(blocks, 1, std::max<int64_t>(1, n / kAlign));
  return blocks == 1 ? n : (n / blocks + kAlign - 1) / kAlign * kAlign;
}

// Runs body(begin, end) over [0, n) cut into `blocks` pieces with edges on multiples of kAlign.
template <typename F>
void for_blocks(int64_t n, int64_t blocks, F&& body) {
  const int64_t step = block_step(n, blocks);
  if (step >= n) return body(int64_t(0), n);
  const int64_t count = (n + step - 1) / step;
  parallel_for(count, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) body(b * step, std::min(n, (b + 1) * step));
  });
}

// bfloat16 operands, float32 sums: our GEMV (NOTE [ bf16 GEMV ] in bf16_gemm.cpp).
inline void call_gemv(bool t, int64_t rows, int64_t cols, float alpha, const bfloat16* X, int64_t ld,
                      const bfloat16* x, int64_t incx, float beta, float* y, int64_t incy) {
  if (t) bf16::gemv_cols(rows, cols, alpha, X, ld, x, incx, beta, y, incy);
  else bf16::gemv_rows(rows, cols, alpha, X, ld, x, incx, beta, y, incy);
}

// bfloat16 operands, float32 accumulation: one oneDNN call on this thread (bf16_gemm.h).
// bias (N floats, one per column of C, or null): added in the product's output pass.
inline void call_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A, int64_t lda,
                      const bfloat16* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  bf16::gemm_one_thread(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

// NOTE [ Dense blocks for oneDNN ]
// oneDNN 2.6 runs a matmul with its brgemm kernels (its float32 brgemm, and the AMX tiles' fastest
// road) only where A, B and C are each dense: rows exactly as long as they are, transposed or not.
// A block of a larger matrix is not (its leading dimension is the whole matrix's), and oneDNN hands
// it to gemm:jit instead. Cut over the pool, that is every product cut along N (C's columns), the
// classifier's blocks and every weight gradient (A = dY transposed, cut along M: columns of dY). So
// where dense_blocks() says so, each block of a product whose A is not transposed is made dense
// before oneDNN sees it: B's block copied into the thread's buffer, C's computed into the thread's
// buffer and then written into C (with beta C added there). The cut is along M where every task
// gets rows (cut_m_for_dense_blocks), which copies nothing but a strided B. Each output is still one
// call's sum over the whole K, so the values do not depend on the cut.
// Weight gradients keep their blocks as they lie. On the 2-core Intel Xeon with AMX (family 6
// model 167) gemm:jit multiplies them with AMX too, faster than brgemm after the copy (brgemm
// transposes A again itself): bf16 1,077-1,426 GFLOP/s against 853-973, and float32 through
// OpenBLAS 250-297 against 236-286 (step profile, MVGPT_DENSE_BLOCKS=0 and 1); every other product
// there is faster made dense (bf16 1,264-1,326 against 764-960).

// x, stored (rows, cols) with row stride ld, dense: itself where it is, else copied into buf.
template <typename E>
const E* dense_rows(const E* x, int64_t rows, int64_t cols, int64_t ld, std::vector<E>& buf) {
  if (ld == cols) return x;
  buf.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) std::memcpy(buf.data() + r * cols, x + r * ld, size_t(cols) * sizeof(E));
  return buf.data();
}

// One block (m, n) of a product whose A is not transposed, with its operands and result made dense
// (NOTE [ Dense blocks for oneDNN ]); run(a, lda, b, ldb, beta, c, ldc) multiplies them.
template <typename TA, typename Run>
void dense_block(bool tb, int64_t m, int64_t n, int64_t K, const TA* a, int64_t lda, const TA* b, int64_t ldb,
                 float beta, float* c, int64_t ldc, Run&& run) {
  // Each pool thread's own (the block runs whole on the thread that took it).
  thread_local std::vector<TA> a_buf, b_buf;
  thread_local std::vector<float> c_buf;
  const int64_t bcols = tb ? K : n;
  a = dense_rows(a, m, K, lda, a_buf);
  b = dense_rows(b, tb ? n : K, bcols, ldb, b_buf);
  if (ldc == n) return run(a, K, b, bcols, beta, c, ldc);
  c_buf.resize(size_t(m * n));
  run(a, K, b, bcols, 0.0f, c_buf.data(), n);
  for (int64_t i = 0; i < m; ++i) {
    const float* from = c_buf.data() + i * n;
    float* to = c + i * ldc;
    if (beta == 0.0f) std::memcpy(to, from, size_t(n) * sizeof(float));
    else
      for (int64_t j = 0; j < n; ++j) to[j] = from[j] + beta * to[j];
  }
}

// Whether a product made of dense blocks (A not transposed) is cut along M: there A's and C's
// blocks are rows, dense as they lie, so nothing but a strided B is copied; along N only where M has
// too few rows for every task.
bool cut_m_for_dense_blocks(int64_t M, int64_t blocks) { return blocks <= 1 || M >= blocks * kAlign; }

// Whether a product is cut along M (else along N): along the longer side, a bf16 product that is
// not made dense along N from kBf16CutNFrom columns (NOTE [ Cutting a bf16 product ]), one made
// dense as cut_m_for_dense_blocks says for its dense_blocks blocks.
bool cut_along_m(bool bf16_operands, bool ta, bool tb, int64_t M, int64_t N, bool dense, int64_t dense_blocks) {
  if (dense) return cut_m_for_dense_blocks(M, dense_blocks);
  if (bf16_operands && !ta && !tb && N >= kBf16CutNFrom && M <= 8 * N) return false;
  return M >= N;
}

// TA: the operands' type; T: the accumulation and result type. bias: only with bfloat16 operands,
// or float32 ones that go to oneDNN, and M, N > 1 (gemm_bias sees to it).
template <typename TA, typename T>
void gemm_impl(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const TA* A, int64_t lda, const TA* B,
               int64_t ldb, T beta, T* C, int64_t ldc, bool parallel, const float* bias = nullptr) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // an empty sum: C = beta C
    for (int64_t i = 0; i < M; ++i) scale(C + i * ldc, N, int64_t(1), beta);
    return;
  }
  const int64_t gemv_tasks = parallel ? threads() * kBlocksPerThread : 1;
  constexpr bool bf16_operands = std::is_same_v<TA, bfloat16>;
  // The op profile names the kernel of a product that is its own span (a parallel one: the fused
  // units' products run inside their unit's span, parallel = false).
  if constexpr (bf16_operands)
    if (parallel && (M == 1 || N == 1)) profile::note_kernel([] { return std::string("bf16 GEMV"); });
  if (M == 1) {
    // C (1, N) = alpha a (1, K) op(B) (K, N): a GEMV over op(B)'s columns, cut along N.
    const int64_t inca = ta ? lda : 1;  // op(A) row 0 is A's column 0 when transposed
    if (beta == T(0) && !bf16_operands) scale(C, N, int64_t(1), T(0));  // the bf16 GEMV never reads C then
    const int64_t blocks = N * K >= kMinParallelGemv ? gemv_tasks : 1;
    for_blocks(N, blocks, [&](int64_t n0, int64_t n1) {
      // tb: B stored (N, K), op(B)^T = B; otherwise B stored (K, N) and op(B)^T = B^T.
      if (tb) call_gemv(false, n1 - n0, K, alpha, B + n0 * ldb, ldb, A, inca, beta, C + n0, 1);
      else call_gemv(true, K, n1 - n0, alpha, B + n0, ldb, A, inca, beta, C + n0, 1);
    });
    return;
  }
  if (N == 1) {
    // C (M, 1) = alpha op(A) (M, K) b (K, 1): a GEMV over op(A)'s rows, cut along M.
    const int64_t incb = tb ? 1 : ldb;
    if (beta == T(0) && !bf16_operands) scale(C, M, ldc, T(0));
    const int64_t blocks = M * K >= kMinParallelGemv ? gemv_tasks : 1;
    for_blocks(M, blocks, [&](int64_t m0, int64_t m1) {
      if (ta) call_gemv(true, K, m1 - m0, alpha, A + m0, lda, B, incb, beta, C + m0 * ldc, ldc);
      else call_gemv(false, m1 - m0, K, alpha, A + m0 * lda, lda, B, incb, beta, C + m0 * ldc, ldc);
    });
    return;
  }
  if (alpha == T(0) && !bias) {  // C = beta C, A and B unread (as BLAS does; oneDNN would make 0 x inf a NaN)
    for (int64_t i = 0; i < M; ++i) scale(C + i * ldc, N, int64_t(1), beta);
    return;
  }
  if constexpr (bf16_operands)
    if (parallel && bf16::native_kernels() && amx::takes_large(M, N, K)) {  // NOTE [ Large products on AMX tiles ]
      profile::note_kernel([] { return std::string("mvgpt AMX tiles"); });
      return amx::large_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
    }
  constexpr bool float32 = std::is_same_v<TA, float>;
  const bool large = parallel && M * N * K >= kMinParallelGemm;  // worth cutting over the pool
  // Products that oneDNN may multiply: bfloat16 ones where it has kernels, float32 ones where it has
  // brgemm kernels that take them, or else gemm:jit (NOTE [ float32 products through oneDNN ]).
  bool onednn_product = false, jit = false;
  if constexpr (bf16_operands) onednn_product = bf16::native_kernels();
  if constexpr (float32) {
    onednn_product = float32_via_onednn(tb, N);
    jit = onednn_product && !onednn::float32_brgemm();
  }
  // NOTE [ Dense blocks for oneDNN ] (gemm:jit takes blocks as they lie: nothing to copy for it)
  const bool dense = onednn_product && !ta && !jit && dense_blocks();
  // NOTE [ Cutting a bf16 product ]
  const bool cut_m =
      cut_along_m(bf16_operands, ta, tb, M, N, dense, large ? threads() * kBf16BlocksPerThread : 1);
  // float32 goes to oneDNN where its kernels take the blocks: brgemm's (AVX-512) dense ones, made so
  // or rows of a plain A cut along M (elsewhere oneDNN would hand them to gemm:jit, and OpenBLAS is
  // the faster); on a CPU without brgemm, gemm:jit's only for the measured case: a large product's
  // rows of a plain A, cut along M.
  const bool via_onednn =
      float32 && onednn_product && (jit ? large && cut_m && !ta : dense || !large || (cut_m && !ta));
  const int64_t per_thread = bf16_operands || via_onednn ? kBf16BlocksPerThread : kBlocksPerThread;
  const int64_t blocks = large ? threads() * per_thread : 1;
  // One block: C[:, n0:n0 + n] from a's rows and b's columns.
  auto multiply = [&](int64_t m, int64_t n, int64_t n0, const TA* a, int64_t la, const TA* b, int64_t lb, T bt, T* c,
                      int64_t lc) {
    const float* block_bias = bias ? bias + n0 : nullptr;
    if constexpr (bf16_operands) call_gemm(ta, tb, m, n, K, alpha, a, la, b, lb, bt, c, lc, block_bias);
    else if constexpr (float32) call_gemm(via_onednn, ta, tb, m, n, K, alpha, a, la, b, lb, bt, c, lc, block_bias);
    else call_gemm(ta, tb, m, n, K, alpha, a, la, b, lb, bt, c, lc);
  };
  auto block = [&](int64_t m, int64_t n, int64_t n0, const TA* a, const TA* b, T* c) {
    if constexpr (bf16_operands || float32)
      if (dense)
        return dense_block(tb, m, n, K, a, lda, b, ldb, beta, c, ldc,
                           [&](const TA* da, int64_t la, const TA* db, int64_t lb, float bt, float* dc, int64_t lc) {
                             multiply(m, n, n0, da, la, db, lb, bt, dc, lc);
                           });
    multiply(m, n, n0, a, lda, b, ldb, beta, c, ldc);
  };
  if constexpr (bf16_operands || float32) {
    if (parallel) profile::note_kernel([&] {  // the first block's
      const int64_t m = cut_m ? block_step(M, blocks) : M, n = cut_m ? N : block_step(N, blocks);
      // The leading dimensions oneDNN sees: the block's own where it is made dense.
      // A C block made dense is computed with beta 0 and beta C added after.
      const int64_t la = dense ? K : lda, lb = dense ? (tb ? K : n) : ldb, lc = dense ? n : ldc;
      const float bt = dense && ldc != n ? 0.0f : float(beta);
      if constexpr (bf16_operands) return bf16::implementation(ta, tb, m, n, K, la, lb, lc, alpha, bt, bias != nullptr);
      if (!via_onednn) return std::string("OpenBLAS");
      const std::string impl =
          onednn::implementation({ta, tb, m, n, K, la, lb, lc, alpha, bt, bias != nullptr, DType::f32});
      return onednn::takes(DType::f32, impl, ta) ? impl : std::string("OpenBLAS");
    });
  }
  if (cut_m) {
    for_blocks(M, blocks, [&](int64_t m0, int64_t m1) {
      block(m1 - m0, N, 0, ta ? A + m0 : A + m0 * lda, B, C + m0 * ldc);
    });
  } else {
    for_blocks(N, blocks, [&](int64_t n0, int64_t n1) {
      block(M, n1 - n0, n0, A, tb ? B + n0 * ldb : B + n0, C + n0);
    });
  }
}

}  // namespace

void use_one_blas_thread() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

namespace {
// -1: as the CPU and MVGPT_DENSE_BLOCKS say; 0 or 1: set_dense_blocks's.
std::atomic<int> g_dense_blocks{-1};
}  // namespace

bool dense_blocks() {
  const int set = g_dense_blocks.load(std::memory_order_relaxed);
  if (set >= 0) return set == 1;
  static const bool by_default = [] {
    const char* e = std::getenv("MVGPT_DENSE_BLOCKS");
    const std::string v = e ? e : "";
    if (v == "1") return true;
    if (v == "0") return false;
    if (!v.empty())
      throw std::runtime_error("MVGPT_DENSE_BLOCKS=" + v +
                               " is not 0 or 1: leave it unset for this CPU's default (1 with AMX)");
    return bf16::cpu_support().amx_bf16;
  }();
  return by_default;
}
void set_dense_blocks(bool on) { g_dense_blocks.store(on ? 1 : 0); }

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc, bool parallel) {
  gemm_impl(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, parallel);
}
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
          const double* B, int64_t ldb, double beta, double* C, int64_t ldc, bool parallel) {
  gemm_impl(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, parallel);
}
// NOTE [ The bf16 fallback ]
// Where oneDNN has no bf16 kernel (CPUs without AVX-512, such as Zen 3), a bf16 product is the
// float32 product of the operands widened exactly: the same sum of exact products. Widening inside
// each block's call, as gemm_one_thread does for a stray shape, widens the shared operand once per
// block, one element at a time: a bf16 training step (step_profile, 2-core Zen 3, back to back)
// took 3.96 s against fp32's 3.33. So both operands are widened once, eight at a time, into the
// calling thread's buffers (the pool's tasks only read them), and the product runs exactly as a
// float32 one: 3.55 s. One-row and one-column products still take the GEMV, which widens in registers.
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A, int64_t lda,
          const bfloat16* B, int64_t ldb, float beta, float* C, int64_t ldc, bool parallel) {
  if (M > 1 && N > 1 && K > 0 && !bf16::native_kernels()) {
    if (parallel) profile::note_kernel([] { return std::string("float32 fallback"); });
    // The calling thread's buffers, kept between products; the pool's tasks reach them through
    // pointers (a thread_local named in a task would be the task's thread's own). Isolated: while
    // this thread waits for the pool it runs only this product's tasks, never another product
    // that would reuse the buffers.
    thread_local std::vector<float> kept_a, kept_b;
    const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    kept_a.resize(size_t(ar * ac));
    kept_b.resize(size_t(br * bc));
    float *wa = kept_a.data(), *wb = kept_b.data();
    return tbb::this_task_arena::isolate([&] {
      const int64_t rows = ar + br;  // A's rows, then B's, widened over the pool when large
      auto widen_rows = [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          if (r < ar) bf16::widen(A + r * lda, 1, ac, lda, wa + r * ac);
          else bf16::widen(B + (r - ar) * ldb, 1, bc, ldb, wb + (r - ar) * bc);
        }
      };
      if (parallel && ar * ac + br * bc >= kMinParallelGemv) parallel_for(rows, 16, widen_rows);
      else widen_rows(0, rows);
      gemm_impl(ta, tb, M, N, K, alpha, wa, ac, wb, bc, beta, C, ldc, parallel);
    });
  }
  gemm_impl(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, parallel);
}

namespace {
// C = op(A) op(B) + bias: in the product's output pass where oneDNN multiplies (fused), elsewhere
// (GEMVs, empty sums, OpenBLAS, the bf16 fallback) the bias written into every row of C and the
// product added to it.
template <typename TA>
void gemm_bias_impl(bool fused, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const TA* A, int64_t lda,
                    const TA* B, int64_t ldb, const float* bias, float* C, int64_t ldc, bool parallel) {
  if (M > 1 && N > 1 && K > 0 && fused)
    return gemm_impl(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc, parallel, bias);
  auto rows = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) std::copy(bias, bias + N, C + r * ldc);
  };
  if (parallel && M * N >= kMinParallelGemv) parallel_for(M, std::max<int64_t>(1, kMinParallelGemv / std::max<int64_t>(N, 1)), rows);
  else rows(0, M);
  gemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, C, ldc, parallel);
}
}  // namespace

void gemm_bias(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t lda, const bfloat16* B,
               int64_t ldb, const float* bias, float* C, int64_t ldc, bool parallel) {
  gemm_bias_impl(bf16::native_kernels(), ta, tb, M, N, K, A, lda, B, ldb, bias, C, ldc, parallel);
}
void gemm_bias(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
               int64_t ldb, const float* bias, float* C, int64_t ldc, bool parallel) {
  gemm_bias_impl(float32_via_onednn(tb, N), ta, tb, M, N, K, A, lda, B, ldb, bias, C, ldc, parallel);
}

// NOTE [ bf16 results ]
// A product whose result only feeds bfloat16 consumers (the MLP's pre-activation, which the GELU
// reads and rounds, and its gradient) is written in bfloat16 by the product itself (mvgpt's AMX
// kernel on a CPU with AMX, NOTE [ Large products on AMX tiles ], rounding as round_to_bf16 does;
// elsewhere oneDNN, as below): half the bytes to
// write and to read back, and on the 2-core AMX Xeon a product's output is what it waits for when
// memory is cold (BM_Bf16GemmCold, 4096 x 384 x 1536: 2.1 ms with its 25 MB float32 output in the
// cache, 3.8-3.9 ms without). Cut over the pool along M where A's rows allow it (NOTE [ Cutting a
// bf16 product ]), each block one oneDNN call, its operands where they lie; one-row and one-column
// products, empty sums and CPUs without bf16 kernels compute the float32 product and round it: the
// same values up to the order of the sums, except that oneDNN's rounding (VCVTNEPS2BF16) makes a
// denormal result 0 where ours keeps it, so only a caller that names a bf16 result gets this road
// (ops::matmul and ops::linear's default narrows a float32 product).
void gemm_rounded(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t lda, const bfloat16* B,
                  int64_t ldb, const float* bias, bfloat16* C, int64_t ldc, bool parallel) {
  if (M <= 0 || N <= 0) return;
  if (M > 1 && N > 1 && K > 0 && bf16::native_kernels()) {
    if (parallel && amx::takes_large(M, N, K)) {  // NOTE [ Large products on AMX tiles ]
      profile::note_kernel([] { return std::string("mvgpt AMX tiles, bf16 result"); });
      return amx::large_gemm_rounded(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, bias);
    }
    const bool large = parallel && M * N * K >= kMinParallelGemm;
    const int64_t blocks = large ? threads() * kBf16BlocksPerThread : 1;
    // A bf16 result is cut as dense blocks are wherever A is not transposed (NOTE [ Cutting a bf16
    // product ]): along M where every block gets rows.
    const bool cut_m = cut_along_m(true, ta, tb, M, N, /*dense=*/!ta, blocks);
    if (parallel) profile::note_kernel([&] {
      const int64_t m = cut_m ? block_step(M, blocks) : M, n = cut_m ? N : block_step(N, blocks);
      return bf16::implementation_rounded(ta, tb, m, n, K, lda, ldb, ldc, bias != nullptr) + ", bf16 result";
    });
    if (cut_m)
      for_blocks(M, blocks, [&](int64_t m0, int64_t m1) {
        bf16::gemm_one_thread_rounded(ta, tb, m1 - m0, N, K, ta ? A + m0 : A + m0 * lda, lda, B, ldb, C + m0 * ldc,
                                      ldc, bias);
      });
    else
      for_blocks(N, blocks, [&](int64_t n0, int64_t n1) {
        bf16::gemm_one_thread_rounded(ta, tb, M, n1 - n0, K, A, lda, tb ? B + n0 * ldb : B + n0, ldb, C + n0, ldc,
                                      bias ? bias + n0 : nullptr);
      });
    return;
  }
  std::vector<float> product(size_t(M * N));
  if (bias) gemm_bias(ta, tb, M, N, K, A, lda, B, ldb, bias, product.data(), N, parallel);
  else gemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, product.data(), N, parallel);
  auto rows = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) fused::round_to_bf16(product.data() + r * N, N, C + r * ldc);
  };
  if (parallel && M * N >= kMinParallelGemv) parallel_for(M, std::max<int64_t>(1, kMinParallelGemv / N), rows);
  else rows(0, M);
}

}  // namespace mvgpt::cpu::blas
