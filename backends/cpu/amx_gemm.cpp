// A training step's large bf16 products on AMX tiles (amx_gemm.h).
//
// NOTE [ Large products on AMX tiles ]
// oneDNN 2.6 (Debian's, which mvgpt links) multiplied the step's products at 1,030-1,430 GFLOP/s
// on the 2-core Intel Xeon with AMX (family 6 model 167), 3072^3 at 1,250-1,480, where PyTorch
// 2.15's bundled oneDNN reaches 2,100-2,570. Measured there with standalone loops, one core: 16
// cycles a TDPBF16PS with its tiles loaded (3,400 GFLOP/s), 5.8-6.8 ns a TDP with its four loads
// from L1, 7-8 ns with B streamed from L2; storing each 32 x 32 block of C (every 12 TDPs of four at
// K = 384) takes it to 12-15 ns. And every operand 64-byte aligned: a tile row that straddles two
// cache lines halved the rate (a whole product 1,000-1,100 GFLOP/s on two cores against 2,100-2,500).
// So this is the plainest kernel that keeps to that:
// - B is packed once per product (amx.h's VNNI layout, columns padded to 32 with zeros) into an
//   aligned buffer, over the pool;
// - the rows are cut over the pool in whole 32-row panels; a thread walks B in column blocks of at
//   most kBlockBytes (kept in L2) and, for each, its panels: each panel of A copied once into an
//   aligned buffer, a tile's 16 rows of 32 contiguous (1 KB, in L1 while the block's columns go by);
// - a 32 x 32 block of C sums in four tiles over the whole K (two A tiles, two B tiles: four loads
//   for four TDPs, the most reuse eight tiles allow), then goes through a 4 KB staging buffer to C
//   with alpha, the bias, beta C or the rounding to bf16.
// K is not cut (at most kLargeMaxK), so each C[i][j] is one sum over k in order, whatever the cut.
// TDPBF16PS treats denormal inputs as zero and flushes denormal sums, as oneDNN's AMX kernels do.
#include <mvgpt/backends/cpu/amx_gemm.h>

#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>

#include <mvgpt/backends/cpu/amx.h>
#include <mvgpt/backends/cpu/amx_tiles.h>
#include <mvgpt/backends/cpu/fused_common.h>
#include <mvgpt/backends/cpu/parallel.h>

namespace mvgpt::cpu::amx {
namespace {

std::atomic<bool> g_large_enabled{true};

#ifdef MVGPT_AMX
using tiles::lanes16;
using tiles::lanes32;

constexpr int64_t kPanelRows = 2 * kTileRows;     // rows of A and C in a block
constexpr int64_t kPairCols = 2 * kTileCols;      // columns of B and C in a block
constexpr int64_t kTileElems = kTileRows * kTileDepth;  // bf16 in a tile (1 KB)
constexpr int64_t kBlockBytes = int64_t(768) << 10;   // a column block of packed B, kept in L2

// A buffer on a 64-byte boundary that only grows (a thread's or a product's, reused).
template <typename T>
class AlignedBuffer {
 public:
  T* get(int64_t n) {
    if (n > size_) {
      const size_t bytes = (size_t(n) * sizeof(T) + 63) / 64 * 64;
      T* p = static_cast<T*>(std::aligned_alloc(64, bytes));
      if (!p) throw std::bad_alloc();
      data_.reset(p);
      size_ = n;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  int64_t size_ = 0;
};

// B (K, N), or stored (N, K) where tb, into the VNNI layout for K rows and round_up(N, 32) columns.
void pack_b(bool tb, int64_t N, int64_t K, const bfloat16* B, int64_t ldb, bfloat16* out) {
  const int64_t kts = round_up(K, kTileDepth) / kTileDepth, nts = round_up(N, kPairCols) / kTileCols;
  const int64_t filled = round_up(N, kTileCols) / kTileCols;  // tiles holding some of B's columns
  parallel_for(nts, 4, [&](int64_t t0, int64_t t1) {
    const int64_t t1_b = std::min(t1, filled);
    if (t0 < t1_b) {
      const int64_t n0 = t0 * kTileCols, n1 = std::min(t1_b * kTileCols, N);
      if (tb) pack_vnni_transposed_cols(B, ldb, K, n0, n1, out);
      else pack_vnni_rows(B + n0, ldb, 0, K, n1 - n0, K, out + t0 * kts * kTileElems);
    }
    for (int64_t t = std::max(t0, filled); t < t1; ++t)  // the padding tile of an odd count
      std::memset(static_cast<void*>(out + t * kts * kTileElems), 0, size_t(kts * kTileElems) * sizeof(bfloat16));
  });
}

// Rows [m0, m0 + 32) of A (M rows, K columns) into the panel layout: for each k tile, the first 16
// rows' 32 values, then the next 16's; rows past M and columns past K as zeros.
void pack_panel(const bfloat16* A, int64_t lda, int64_t M, int64_t K, int64_t m0, bfloat16* panel) {
  const int64_t kts = round_up(K, kTileDepth) / kTileDepth;
  for (int64_t r = 0; r < kPanelRows; ++r) {
    bfloat16* to = panel + (r / kTileRows) * kTileElems + (r % kTileRows) * kTileDepth;
    if (m0 + r >= M) {
      for (int64_t kt = 0; kt < kts; ++kt) _mm512_store_si512(to + kt * 2 * kTileElems, _mm512_setzero_si512());
      continue;
    }
    const bfloat16* row = A + (m0 + r) * lda;
    for (int64_t kt = 0; kt < kts; ++kt)
      _mm512_store_si512(to + kt * 2 * kTileElems, _mm512_maskz_loadu_epi16(lanes32(K - kt * kTileDepth), row + kt * kTileDepth));
  }
}

// The 32 x 32 sums of a panel and two column tiles of packed B, into stage (row-major, 32 floats a row).
inline void multiply_block(int64_t kts, const bfloat16* panel, const bfloat16* b0, const bfloat16* b1, float* stage) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t kt = 0; kt < kts; ++kt) {
    const bfloat16* a = panel + kt * 2 * kTileElems;
    _tile_loadd(4, a, 64);
    _tile_loadd(6, b0 + kt * kTileElems, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, b1 + kt * kTileElems, 64);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(5, a + kTileElems, 64);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  constexpr int64_t row = kPairCols * int64_t(sizeof(float));
  _tile_stored(0, stage, row);
  _tile_stored(1, stage + kTileCols, row);
  _tile_stored(2, stage + kTileRows * kPairCols, row);
  _tile_stored(3, stage + kTileRows * kPairCols + kTileCols, row);
}

// Writes a block's sums (rows x cols of stage) into C at (m0, n0).
struct FloatOut {
  float alpha, beta;
  float* C;
  int64_t ldc;
  const float* bias;
  void operator()(const float* stage, int64_t m0, int64_t n0, int64_t rows, int64_t cols) const {
    const __m512 a = _mm512_set1_ps(alpha), b = _mm512_set1_ps(beta);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < kPairCols && h < cols; h += kTileCols) {
        const __mmask16 m = lanes16(cols - h);
        float* c = C + (m0 + r) * ldc + n0 + h;
        __m512 v = _mm512_load_ps(stage + r * kPairCols + h);
        if (alpha != 1.0f) v = _mm512_mul_ps(a, v);
        if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + n0 + h));
        if (beta != 0.0f) v = _mm512_fmadd_ps(b, _mm512_maskz_loadu_ps(m, c), v);
        _mm512_mask_storeu_ps(c, m, v);
      }
  }
};
struct RoundedOut {
  bfloat16* C;
  int64_t ldc;
  const float* bias;
  void operator()(const float* stage, int64_t m0, int64_t n0, int64_t rows, int64_t cols) const {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < kPairCols && h < cols; h += kTileCols) {
        const int64_t n = std::min(kTileCols, cols - h);
        f32x16 v = load16(stage + r * kPairCols + h);
        if (bias) v += fused::load16_partial(bias + n0 + h, n);
        bfloat16* c = C + (m0 + r) * ldc + n0 + h;
        if (n == kTileCols) fused::store16_rounded(c, v);
        else fused::store16_rounded(c, v, n);
      }
  }
};

template <typename Out>
void run(bool tb, int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t lda, const bfloat16* B, int64_t ldb,
         const Out& out) {
  if (!takes_large(false, M, N, K)) throw std::logic_error("amx::large_gemm: a product these kernels do not take");
  const int64_t kts = round_up(K, kTileDepth) / kTileDepth, pairs = round_up(N, kPairCols) / kPairCols;
  const int64_t column_tile = kts * kTileElems;  // one packed column tile along the whole K
  // The calling thread's, kept between products; the pool's tasks read it through the pointer.
  // Isolated: while this thread waits for the pool it runs only this product's tasks, never another
  // product that would reuse the buffer.
  thread_local AlignedBuffer<bfloat16> packed;
  bfloat16* bp = packed.get(2 * pairs * column_tile);
  tbb::this_task_arena::isolate([&] {
    pack_b(tb, N, K, B, ldb, bp);
    const int64_t panels = round_up(M, kPanelRows) / kPanelRows;
    const int64_t threads = std::max(1, tbb::this_task_arena::max_concurrency());
    const int64_t block_pairs = std::clamp<int64_t>(kBlockBytes / (2 * column_tile * int64_t(sizeof(bfloat16))), 1, pairs);
    // One contiguous run of panels a thread, so each walks B's column blocks once.
    parallel_for(panels, std::max<int64_t>(1, (panels + threads - 1) / threads), [&](int64_t p0, int64_t p1) {
      thread_local AlignedBuffer<bfloat16> panel_buffer;
      bfloat16* panel = panel_buffer.get(2 * column_tile);
      alignas(64) float stage[kPanelRows * kPairCols];
      tiles::configure_tiles();
      for (int64_t q0 = 0; q0 < pairs; q0 += block_pairs) {
        const int64_t q1 = std::min(pairs, q0 + block_pairs);
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t m0 = p * kPanelRows;
          pack_panel(A, lda, M, K, m0, panel);
          for (int64_t q = q0; q < q1; ++q) {
            const bfloat16* b0 = bp + 2 * q * column_tile;
            multiply_block(kts, panel, b0, b0 + column_tile, stage);
            const int64_t n0 = q * kPairCols;
            out(stage, m0, n0, std::min(kPanelRows, M - m0), std::min(kPairCols, N - n0));
          }
        }
      }
      _tile_release();
    });
  });
}
#endif

}  // namespace

bool takes_large(bool ta, int64_t M, int64_t N, int64_t K) {
  return !ta && M >= 32 && N >= 32 && K >= 1 && K <= kLargeMaxK && M * N * K >= kLargeMinWork && usable() &&
         g_large_enabled.load(std::memory_order_relaxed);
}

void set_large_enabled(bool on) { g_large_enabled.store(on); }

void large_gemm(bool tb, int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A, int64_t lda,
                const bfloat16* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
#ifdef MVGPT_AMX
  run(tb, M, N, K, A, lda, B, ldb, FloatOut{alpha, beta, C, ldc, bias});
#else
  (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb, (void)beta, (void)C,
      (void)ldc, (void)bias;
  throw std::logic_error("amx::large_gemm: this build has no AMX kernels");
#endif
}

void large_gemm_rounded(bool tb, int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t lda, const bfloat16* B,
                        int64_t ldb, bfloat16* C, int64_t ldc, const float* bias) {
#ifdef MVGPT_AMX
  run(tb, M, N, K, A, lda, B, ldb, RoundedOut{C, ldc, bias});
#else
  (void)tb, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb, (void)C, (void)ldc, (void)bias;
  throw std::logic_error("amx::large_gemm_rounded: this build has no AMX kernels");
#endif
}

}  // namespace mvgpt::cpu::amx
