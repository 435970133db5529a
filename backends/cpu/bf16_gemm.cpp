// bfloat16 products: oneDNN's matmul on the calling thread (onednn_matmul.h), our GEMV for one row
// or column, and the float32 fallback where oneDNN has no kernel.
//
// NOTE [ bf16 GEMV ]
// Decoding multiplies one row of activations by each weight matrix: a matrix-vector product that
// does two flops per element it reads, so its time is the time to stream the matrix from memory,
// and bf16 weights should halve it. Neither road to a bf16 GEMM gets that: oneDNN's matmul has no
// GEMV, and a 1-row call costs as much in dispatch as the product (on a 2-core AMX Xeon, bf16
// weights decoded at 1.39 ms a token against float32's 1.42); where oneDNN has no kernel, the
// fallback widens the whole matrix into a float32 copy at every call, reading it twice over (on a
// 2-core Zen 3, 7.5 ms a token against float32's 3.9). So one row (or column) is multiplied here:
// each bf16 element is widened in registers (a bf16 is the top half of a float32: a shift or a
// mask, no shuffle), and the product of two bf16 values is exact in float32 (8 x 8 significant
// bits, short of overflow and underflow), so every output is a float32 sum of exact products, as
// oneDNN's kernels give, in a fixed order that depends only on the length of the sum (dot_row and
// gemv_cols say which; with AVX512-BF16, dot_row_dpbf16). blas::gemm cuts the outputs over the pool
// as it does for float32.
#include <mvgpt/backends/cpu/bf16_gemm.h>

#include <cblas.h>
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef __AVX512BF16__
#include <immintrin.h>
#endif

#include <mvgpt/backends/cpu/fused_common.h>  // hsum8, hsum16
#include <mvgpt/backends/cpu/onednn_matmul.h>
#include <mvgpt/backends/cpu/vec_math.h>

namespace mvgpt::cpu::bf16 {
namespace {

// Linux: ask for the AMX tile data state (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)),
// without which the first tile instruction kills the process.
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

bool os_saves_avx512_state() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE
  uint32_t lo, hi;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 0xe6) == 0xe6;  // SSE, AVX, opmask, ZMM upper halves and ZMM16-31
}

CpuSupport detect() {
  CpuSupport s;
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return s;
  const unsigned max_leaf7 = a;
  const bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24);
  if (max_leaf7 >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d))
    s.avx512_bf16 = (a & (1u << 5)) && os_saves_avx512_state();
  if (amx_bf16 && amx_tile) s.amx_bf16 = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return s;
}

std::atomic<bool> g_force_fallback{false};

// A product as oneDNN takes it: bfloat16 operands, float32 C.
constexpr onednn::Product bf16_product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                                       int64_t ldc, float alpha, float beta, bool bias) {
  return {ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, bias, DType::bf16};
}
// The shape kernel_name and native_kernels ask oneDNN about.
constexpr onednn::Product kTypical = bf16_product(false, true, 256, 384, 384, 384, 384, 384, 1.0f, 0.0f, false);

// X stored as rows x cols with leading dimension ld, widened into a dense float32 buffer.
const float* widen_into(const bfloat16* x, int64_t rows, int64_t cols, int64_t ld, std::vector<float>& buf) {
  buf.resize(size_t(rows * cols));
  widen(x, rows, cols, ld, buf.data());
  return buf.data();
}

void gemm_float32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A, int64_t lda,
                  const bfloat16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  thread_local std::vector<float> abuf, bbuf;
  const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
  const float* a = widen_into(A, ar, ac, lda, abuf);
  const float* b = widen_into(B, br, bc, ldb, bbuf);
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(K),
              alpha, a, int(std::max<int64_t>(ac, 1)), b, int(std::max<int64_t>(bc, 1)), beta, C, int(ldc));
}

// NOTE [ bf16 GEMV ]: sixteen bf16 values widened to float32 in registers without a shuffle. Read
// as eight 32-bit words (little-endian), each word holds two bf16 values: the low one shifted up is
// the even element, the high one with the low half cleared is the odd one. So X is multiplied in
// chunks of 16 columns as (evens, odds): gemv_rows stores x that way once per call (split_vector),
// gemv_cols keeps its sums that way and puts them back in order at the end.
static_assert(std::endian::native == std::endian::little, "widen16 reads two bf16 values per 32-bit word");
constexpr int64_t kChunk = 2 * kVec;
using u32x8 = uint32_t __attribute__((vector_size(32)));
using u32x8_unaligned = uint32_t __attribute__((vector_size(32), aligned(2), may_alias));
using u16x8_unaligned = uint16_t __attribute__((vector_size(16), aligned(2), may_alias));
inline void widen16(const bfloat16* p, f32x8& even, f32x8& odd) {
  const u32x8 w = *reinterpret_cast<const u32x8_unaligned*>(p);
  even = (f32x8)(w << 16);
  odd = (f32x8)(w & 0xffff0000u);
}
// x (n, stride inc) as float32 in this thread's buffer: each whole chunk of 16 as its 8 even
// elements then its 8 odd ones, the tail (n % 16) in order after them.
[[maybe_unused]] const float* split_vector(const bfloat16* x, int64_t n, int64_t inc) {
  thread_local std::vector<float> buf;
  buf.resize(size_t(n));
  const int64_t whole = n / kChunk * kChunk;
  for (int64_t c = 0; c < whole; c += kChunk)
    for (int64_t l = 0; l < kVec; ++l) {
      buf[size_t(c + l)] = float(x[(c + 2 * l) * inc]);
      buf[size_t(c + kVec + l)] = float(x[(c + 2 * l + 1) * inc]);
    }
  for (int64_t i = whole; i < n; ++i) buf[size_t(i)] = float(x[i * inc]);
  return buf.data();
}

using fused::store_scaled;

// One row of X: x . row. Rows go one at a time because the matrix is then read as one sequential
// stream, which the prefetchers follow best (interleaving 4 rows ran at half the speed from memory
// on Zen 3); two chunks per step give four independent sums, enough to cover the FMA latency. The
// order: sums A (even, odd) over chunks 0, 2, 4... and B over chunks 1, 3, 5..., a last odd chunk
// into A, then (A.even + A.odd) + (B.even + B.odd), its lanes added pairwise, then the tail in order.
[[maybe_unused]] float dot_row(const bfloat16* row, int64_t cols, const float* xs) {
  f32x8 ae = splat(0.0f), ao = ae, be = ae, bo = ae;
  int64_t k = 0;
  for (; k + 2 * kChunk <= cols; k += 2 * kChunk) {
    f32x8 e, o;
    widen16(row + k, e, o);
    ae += e * load8(xs + k);
    ao += o * load8(xs + k + kVec);
    widen16(row + k + kChunk, e, o);
    be += e * load8(xs + k + kChunk);
    bo += o * load8(xs + k + kChunk + kVec);
  }
  if (k + kChunk <= cols) {
    f32x8 e, o;
    widen16(row + k, e, o);
    ae += e * load8(xs + k);
    ao += o * load8(xs + k + kVec);
    k += kChunk;
  }
  float sum = fused::hsum8((ae + ao) + (be + bo));
  for (; k < cols; ++k) sum += float(row[k]) * xs[k];
  return sum;
}

#ifdef __AVX512BF16__
// NOTE [ bf16 GEMV with AVX512-BF16 ]
// Where the compiler targets AVX512-BF16 (Zen 4, Cooper Lake and later Xeons), one vdpbf16ps
// multiplies 32 bf16 pairs of a row and x and adds them into 16 float32 sums: the same exact
// products as widening in registers, two instructions per 32 elements fewer, and x stays in bf16.
// Decoding the series' model streams its 29 MB of bf16 weights 1.35x faster (a standalone loop
// over the model's matrices on the 2-core AMD EPYC Zen 4: 0.37 against 0.51 ms a token). Each lane
// adds its odd product, then its even one, rounding each sum to nearest; the instruction treats a
// subnormal input or sum as zero (bf16 subnormals are below 1.2e-38). The order: sums A over the
// 64-wide steps' first halves (then a last 32-wide step, then the masked tail) and B over their
// second halves, then A + B, lane i added to lane i + 8, then those eight pairwise.
// NOTE [ bf16 GEMV fetching ahead ]
// A decoded token streams its 29 MB of weights through 25 GEMVs, each cut over the pool: short
// streams, each waiting for the hardware prefetchers to notice it again. On the 2-core AMX Xeon
// (family 6 model 167) the products ran at 40-45 GB/s against 57 for one 28 MiB read
// (BM_ReadBandwidth); asking for the row about 2 KB ahead (three rows of 384) took sliding-cache
// decoding from 0.78-0.82 to 0.73-0.75 ms a token (step_profile --precision bf16 --decode --steps
// 400, alternated three times). Not measured on AMD, whose prefetchers kept up better with fp32.
float dot_row_dpbf16(const bfloat16* row, int64_t cols, const bfloat16* x) {
  auto load = [](const bfloat16* p) { return (__m512bh)_mm512_loadu_si512(p); };
  __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 64 <= cols; k += 64) {
    a = _mm512_dpbf16_ps(a, load(row + k), load(x + k));
    b = _mm512_dpbf16_ps(b, load(row + k + 32), load(x + k + 32));
  }
  if (k + 32 <= cols) {
    a = _mm512_dpbf16_ps(a, load(row + k), load(x + k));
    k += 32;
  }
  if (k < cols) {  // the last 1-31: masked loads read nothing past the row, and zeros add nothing
    const __mmask32 m = __mmask32((uint64_t(1) << (cols - k)) - 1);
    a = _mm512_dpbf16_ps(a, (__m512bh)_mm512_maskz_loadu_epi16(m, row + k), (__m512bh)_mm512_maskz_loadu_epi16(m, x + k));
  }
  // Lanes i and i + 8 first, then the eight as hsum8 adds them (hsum16; GCC 12 warns, wrongly,
  // inside _mm512_reduce_add_ps, whose order is another).
  return fused::hsum16(f32x16(_mm512_add_ps(a, b)));
}
#endif

}  // namespace

void gemv_rows(int64_t rows, int64_t cols, float alpha, const bfloat16* X, int64_t ld, const bfloat16* x,
               int64_t incx, float beta, float* y, int64_t incy) {
  if (rows <= 0) return;
#ifdef __AVX512BF16__
  thread_local std::vector<bfloat16> packed;  // x with a unit stride
  if (incx != 1) {
    packed.resize(size_t(cols));
    for (int64_t k = 0; k < cols; ++k) packed[size_t(k)] = x[k * incx];
    x = packed.data();
  }
  // NOTE [ bf16 GEMV fetching ahead ]: the row about 2 KB on (at least the next).
  const int64_t row_bytes = std::max<int64_t>(ld, 1) * int64_t(sizeof(bfloat16));
  const int64_t ahead = std::max<int64_t>(1, (int64_t(kPrefetchAhead) + row_bytes - 1) / row_bytes);
  for (int64_t i = 0; i < rows; ++i) {
    if (i + ahead < rows) prefetch_lines(X + (i + ahead) * ld, 0, cols * int64_t(sizeof(bfloat16)));
    store_scaled(y + i * incy, dot_row_dpbf16(X + i * ld, cols, x), alpha, beta);
  }
#else
  const float* xs = split_vector(x, cols, incx);
  for (int64_t i = 0; i < rows; ++i) store_scaled(y + i * incy, dot_row(X + i * ld, cols, xs), alpha, beta);
#endif
}

void gemv_cols(int64_t rows, int64_t cols, float alpha, const bfloat16* X, int64_t ld, const bfloat16* x,
               int64_t incx, float beta, float* y, int64_t incy) {
  if (cols <= 0) return;
  thread_local std::vector<float> xbuf;
  xbuf.resize(size_t(rows));
  for (int64_t i = 0; i < rows; ++i) xbuf[size_t(i)] = float(x[i * incx]);
  // y[j] = the sum over i of x[i] X[i, j], i in order: X's rows are added one at a time into
  // float32 sums kept as the chunks of 16 are widened (evens, then odds), so a block of columns
  // gives the same values as all of them.
  thread_local std::vector<float> sums;
  sums.assign(size_t(cols), 0.0f);
  float* s = sums.data();
  const int64_t whole = cols / kChunk * kChunk;
  for (int64_t i = 0; i < rows; ++i) {
    const bfloat16* row = X + i * ld;
    const float xi = xbuf[size_t(i)];
    const f32x8 xv = splat(xi);
    for (int64_t j = 0; j < whole; j += kChunk) {
      f32x8 e, o;
      widen16(row + j, e, o);
      store8(s + j, load8(s + j) + e * xv);
      store8(s + j + kVec, load8(s + j + kVec) + o * xv);
    }
    for (int64_t j = whole; j < cols; ++j) s[j] += float(row[j]) * xi;
  }
  for (int64_t c = 0; c < whole; c += kChunk)
    for (int64_t l = 0; l < kVec; ++l) {
      store_scaled(y + (c + 2 * l) * incy, s[c + l], alpha, beta);
      store_scaled(y + (c + 2 * l + 1) * incy, s[c + kVec + l], alpha, beta);
    }
  for (int64_t j = whole; j < cols; ++j) store_scaled(y + j * incy, s[j], alpha, beta);
}

std::string CpuSupport::describe() const {
  if (amx_bf16) return "AMX-BF16";
  if (avx512_bf16) return "AVX512-BF16";
  return "no bf16 instructions";
}

const CpuSupport& cpu_support() {
  static const CpuSupport s = detect();
  return s;
}

std::string kernel_name() {
  if (g_force_fallback.load()) return "float32 fallback (forced)";
  const std::string impl = onednn::implementation(kTypical);
  return onednn::takes(DType::bf16, impl) ? impl : "float32 fallback (oneDNN: " + impl + ")";
}

std::string implementation(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc,
                           float alpha, float beta, bool bias) {
  if (g_force_fallback.load()) return "float32 fallback";
  const std::string impl = onednn::implementation(bf16_product(ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, bias));
  return onednn::takes(DType::bf16, impl) ? impl : "float32 fallback";
}

void use_fallback(bool on) { g_force_fallback.store(on); }

bool native_kernels() {
  static const bool available = onednn::takes(DType::bf16, onednn::implementation(kTypical));
  return available && !g_force_fallback.load(std::memory_order_relaxed);
}

void widen(const bfloat16* X, int64_t rows, int64_t cols, int64_t ld, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const bfloat16* x = X + r * ld;
    float* o = out + r * cols;
    int64_t c = 0;
    for (; c + kVec <= cols; c += kVec)  // eight at a time, in order: zero-extend, shift into the top half
      store8(o + c, (f32x8)(__builtin_convertvector(*reinterpret_cast<const u16x8_unaligned*>(x + c), u32x8) << 16));
    for (; c < cols; ++c) o[c] = float(x[c]);
  }
}

void gemm_one_thread_rounded(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t lda,
                             const bfloat16* B, int64_t ldb, bfloat16* C, int64_t ldc, const float* bias) {
  if (M <= 0 || N <= 0 || K <= 0)
    throw std::logic_error("bf16::gemm_one_thread_rounded: an empty product reached the kernel");
  if (!g_force_fallback.load(std::memory_order_relaxed)) {
    onednn::Product p = bf16_product(ta, tb, M, N, K, lda, ldb, ldc, 1.0f, 0.0f, bias != nullptr);
    p.result = DType::bf16;
    if (onednn::multiply(p, A, B, C, bias)) return;
  }
  std::vector<float> product(size_t(M * N));  // rare (oneDNN declined): not kept between calls
  gemm_one_thread(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, product.data(), N, bias);
  for (int64_t i = 0; i < M; ++i) fused::round_to_bf16(product.data() + i * N, N, C + i * ldc);
}

std::string implementation_rounded(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                                   int64_t ldc, bool bias) {
  if (g_force_fallback.load()) return "float32 fallback";
  onednn::Product p = bf16_product(ta, tb, M, N, K, lda, ldb, ldc, 1.0f, 0.0f, bias);
  p.result = DType::bf16;
  const std::string impl = onednn::implementation(p);
  return onednn::takes(DType::bf16, impl) ? impl : "float32 fallback";
}

void gemm_one_thread(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A, int64_t lda,
                     const bfloat16* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  if (M <= 0 || N <= 0 || K <= 0) throw std::logic_error("bf16::gemm_one_thread: an empty product reached the kernel");
  // Where oneDNN does not multiply, the bias goes into C first and the product adds to it.
  auto float32 = [&] {
    gemm_float32(ta, tb, M, N, K, alpha, A, lda, B, ldb, onednn::bias_first(M, N, bias, beta, C, ldc), C, ldc);
  };
  if (g_force_fallback.load(std::memory_order_relaxed)) return float32();
  if (!onednn::multiply(bf16_product(ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, bias != nullptr), A, B, C, bias))
    float32();
}

}  // namespace mvgpt::cpu::bf16
