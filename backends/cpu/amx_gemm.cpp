// A training step's large bf16 products on AMX tiles (amx_gemm.h).
//
// NOTE [ Large products on AMX tiles ]
// oneDNN 2.6 (Debian's, which mvgpt links) multiplied the step's products at 1,030-1,430 GFLOP/s
// in the step profile on the 2-core Intel Xeon with AMX (family 6 model 167; 1,300-2,000 hot in
// BM_Bf16Gemm), 3072^3 at 1,250-1,480, where PyTorch 2.15's bundled oneDNN reaches 2,100-2,660. Measured there with standalone loops, one core: 16
// cycles a TDPBF16PS with its tiles loaded (3,400 GFLOP/s), 5.8-6.8 ns a TDP with its four loads
// from L1, 7-8 ns with B streamed from L2; storing each 32 x 32 block of C (every 12 TDPs of four at
// K = 384) takes it to 12-15 ns. And every operand 64-byte aligned: a tile row that straddles two
// cache lines halved the rate (a whole product 1,000-1,100 GFLOP/s on two cores against 2,100-2,500).
// So this is the plainest kernel that keeps to that:
// - B is packed once per product (amx.h's VNNI layout, columns padded to 32 with zeros) into an
//   aligned buffer, over the pool;
// - the rows are cut over the pool in whole 32-row panels; a thread walks B in column blocks of at
//   most kBlockBytes (kept in L2) and, for each, its panels: 32 rows of A read where they lie when
//   aligned (a contiguous activation: rows of 384 or 1,536 bf16), else copied into an aligned
//   buffer, transposed where A is (a weight gradient's dY^T); a panel stays in L1 or L2 while the
//   block's columns go by;
// - a 32 x 32 block of C sums in four tiles over the whole K (two A tiles, two B tiles: four loads
//   for four TDPs, the most reuse eight tiles allow), starting from the bias where there is one;
//   the tiles are stored into C itself where it takes the sums as they are (float32, alpha 1,
//   beta 0), else through one of two 4 KB staging buffers (a block's sums go out while the next
//   block multiplies) with alpha, beta C or the rounding to bf16.
// K up to 2,048 is one chunk; deeper (weight gradients over 4,096 tokens, the classifier's input
// gradient over 10,000 classes) it is cut into chunks of 512 (256 for a weight gradient: NOTE [ A
// weight gradient's chunks ]) whose float32 partial sums are stored and loaded again exactly, so
// each C[i][j] is one sum over k in order, whatever the cut.
// TDPBF16PS treats denormal inputs as zero and flushes denormal sums, as oneDNN's AMX kernels do.
#include <mvgpt/backends/cpu/amx_gemm.h>

#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>

#include <mvgpt/backends/cpu/amx.h>
#include <mvgpt/backends/cpu/amx_tiles.h>
#include <mvgpt/backends/cpu/fused_common.h>
#include <mvgpt/backends/cpu/parallel.h>

namespace mvgpt::cpu::amx {
namespace {

std::atomic<bool> g_large_enabled{true};

// MVGPT_AMX_GEMM=0 sends the large products to oneDNN (to compare the two roads); 1 or unset takes
// them where the CPU has AMX tiles; anything else is refused.
bool env_says_off() {
  return tiles::env_switch_off("MVGPT_AMX_GEMM", "for mvgpt's AMX kernel where the CPU has AMX tiles");
}

#ifdef MVGPT_AMX
using tiles::lanes16;
using tiles::lanes32;

constexpr int64_t kPanelRows = 2 * kTileRows;     // rows of A and C in a block
constexpr int64_t kPairCols = 2 * kTileCols;      // columns of B and C in a block
constexpr int64_t kTileElems = kTileRows * kTileDepth;  // bf16 in a tile (1 KB)
// A column block of packed B, kept in L2. 1,280 KB holds all of B (at most 1,152 KB) for the step's
// products whose K or N is 1,152 or 1,536 against 384, where 768 KB cut them in two blocks and read
// their A from memory twice: in the bf16 step profile on the 2-core AMX Xeon (five alternations) the products took
// 231-251 ms a step against 231-257 (medians 234 and 244), BM_Bf16GemmCold/evict:256 (float32
// result) 2.7-2.8 ms against 3.3; hot products level, 3072^3 3-7% slower.
constexpr int64_t kBlockBytes = int64_t(1280) << 10;

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

// B (K, N), or B stored (N, K) where tb, into the VNNI layout for K rows and round_up(N, 32) columns:
// each column tile's k tiles contiguous, so a chunk of K is a run of each.
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

// A thread's buffers, one set whatever the product's result type: as the calling thread of a
// product (B packed, the bias padded) and as a task of one (a panel copied, partial sums).
struct CallerBuffers {
  AlignedBuffer<bfloat16> packed_b;
  AlignedBuffer<float> bias;
};
CallerBuffers& caller_buffers() {
  thread_local CallerBuffers b;
  return b;
}
struct TaskBuffers {
  AlignedBuffer<bfloat16> panel;
  AlignedBuffer<float> partial;
};
TaskBuffers& task_buffers() {
  thread_local TaskBuffers b;
  return b;
}

// Rows [m0, m0 + 32) and columns [k0, k0 + depth) of op(A) (M rows) into panel: row-major, width
// bf16 a row, rows past M and columns past depth (to a whole k tile) as zeros. op(A) is A stored (M, K), or
// where ta A stored (K, M) and transposed (a weight gradient's dY^T: 32 of its columns a panel).
void pack_panel(bool ta, const bfloat16* A, int64_t lda, int64_t M, int64_t m0, int64_t k0, int64_t depth,
                bfloat16* panel, int64_t width) {
  const int64_t used = round_up(depth, kTileDepth), rows = std::min(kPanelRows, M - m0);
  if (ta) {
    transpose(A + k0 * lda + m0, lda, depth, rows, panel, width);
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      const bfloat16* row = A + (m0 + r) * lda + k0;
      for (int64_t k = 0; k < used; k += kTileDepth)
        _mm512_store_si512(panel + r * width + k, _mm512_maskz_loadu_epi16(lanes32(depth - k), row + k));
    }
  }
  for (int64_t r = rows; r < kPanelRows; ++r)
    for (int64_t k = 0; k < used; k += kTileDepth) _mm512_store_si512(panel + r * width + k, _mm512_setzero_si512());
}

// Panels [p0, p1) of A^T (A stored (K, M): a weight gradient's dY^T) at columns [k0, k0 + depth),
// as pack_panel(true, ...) makes each, 32 width bf16 apart in panels. NOTE [ A group's panels cut
// together ]: 32 rows of A at a time across all the panels, each row's lines read together.
void pack_panels_transposed(const bfloat16* A, int64_t lda, int64_t M, int64_t p0, int64_t p1, int64_t k0,
                            int64_t depth, bfloat16* panels, int64_t width) {
  const int64_t pitch = kPanelRows * width;
  int64_t whole = p1;  // panels [p0, whole) have all their 32 columns in A
  while (whole > p0 && whole * kPanelRows > M) --whole;
  for (int64_t r0 = 0; r0 < depth; r0 += kPanelRows)
    for (int64_t p = p0; p < whole; ++p)
      transpose32(A + (k0 + r0) * lda + p * kPanelRows, lda, std::min(kPanelRows, depth - r0),
                  panels + (p - p0) * pitch + r0, width);
  for (int64_t p = whole; p < p1; ++p) pack_panel(true, A, lda, M, p * kPanelRows, k0, depth, panels + (p - p0) * pitch, width);
}

// NOTE [ B read past the cache ]
// A block reads its panel of A once a pair of B's column tiles, and each pair once a panel: the panel
// should stay in L1 while B goes by. Deeper chunks crowd L1 (48 KB; a panel and a pair of 12 k tiles
// are 24 KB each), and B's lines pushed the panel's out. So where a chunk is more than 8 k tiles deep
// B's tiles are read with TILELOADDT1, the hint that their lines are not wanted again soon, and the
// panel keeps L1: BM_AmxTileLoop (the tile loop alone, NOTE [ The tile loop alone ] in
// bench/bench_amx_tiles.cpp) 6.3 ns a TDPBF16PS at 16 k tiles against 7.4, 6.8 at 24 against 10.9,
// level at 8 (9-11 were not measured). In the bf16 step profile on the 2-core AMX Xeon (family 6
// model 167), alternated five times: the step 366-390 ms (median 387) against 386-402 (396); the
// classifier's logits 18.6 ms against 20.3 and its input gradient 17.4 against 19.3, the MLP's first
// layer 13.8 against 15.9 and its second layer's input gradient 14.1 against 15.9, the 1,536-deep
// products 0.6-0.8 ms less each, the GELUs 1.8 ms more (both passes, which read what those products
// wrote). Read so in the weight gradients' chunks of 8 k tiles too, B cost them 0.4 ms each.
constexpr int64_t kStreamedBFrom = 9;  // k tiles in a chunk from which B is read past the cache

// A 32 x 32 block: the four tiles start from zero, or from `from` (row-major, ld_from floats a row:
// partial sums, or with ld_from 0 the bias, one row read for all), and sum 32 rows of A (`width`
// bf16 apart, 64-byte aligned) times two column tiles of packed B over kts k tiles, B read past the
// cache where b_past_cache (NOTE [ B read past the cache ]).
// meanwhile() runs once the block's tile instructions are issued, before its sums are stored (to
// `to`, ld_to floats a row): the previous block's way out to C, which the core runs while the tiles
// multiply.
template <typename Meanwhile>
inline void multiply_block(int64_t kts, const bfloat16* panel, int64_t width, const bfloat16* b0, const bfloat16* b1,
                           bool b_past_cache, const float* from, int64_t ld_from, float* to, int64_t ld_to,
                           Meanwhile&& meanwhile) {
  if (from) {
    const int64_t s = ld_from * int64_t(sizeof(float));
    _tile_loadd(0, from, s);
    _tile_loadd(1, from + kTileCols, s);
    _tile_loadd(2, from + kTileRows * ld_from, s);
    _tile_loadd(3, from + kTileRows * ld_from + kTileCols, s);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  const int64_t as = width * int64_t(sizeof(bfloat16));
  const bfloat16* a1 = panel + kTileRows * width;
  for (int64_t kt = 0; kt < kts; ++kt) {
    _tile_loadd(4, panel + kt * kTileDepth, as);
    if (b_past_cache) _tile_stream_loadd(6, b0 + kt * kTileElems, 64);
    else _tile_loadd(6, b0 + kt * kTileElems, 64);
    _tile_dpbf16ps(0, 4, 6);
    if (b_past_cache) _tile_stream_loadd(7, b1 + kt * kTileElems, 64);
    else _tile_loadd(7, b1 + kt * kTileElems, 64);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(5, a1 + kt * kTileDepth, as);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  meanwhile();
  const int64_t s = ld_to * int64_t(sizeof(float));
  _tile_stored(0, to, s);
  _tile_stored(1, to + kTileCols, s);
  _tile_stored(2, to + kTileRows * ld_to, s);
  _tile_stored(3, to + kTileRows * ld_to + kTileCols, s);
}

// A 64-byte line of C past the caches (no read of the line first) where it lies on a line, else an
// ordinary store: the streamed results (FloatOut's, NOTE [ float32 results streamed to memory ];
// RoundedOut's bf16 rows). Each task ends with an sfence, before the pool says it is done.
inline void store_line(void* c, __m512i v) {
  if (reinterpret_cast<uintptr_t>(c) % 64 == 0) _mm512_stream_si512(static_cast<__m512i*>(c), v);
  else _mm512_storeu_si512(c, v);
}

// Where the tiles store a whole block of sums into C as they are: C and its leading dimension, or
// no C where the sums need a pass of their own on the way.
struct Direct {
  float* C = nullptr;
  int64_t ldc = 0;
};

// NOTE [ float32 results streamed to memory ]
// Where a block's tiles are stored into C itself, each line of C is first read into the cache
// (the store owns it), and a product of few k tiles per block waits for those reads when C's lines
// are not in the cache. A float32 result goes past the caches instead (non-temporal stores of each
// staged row, no read) where that was measured to pay: a weight gradient (A transposed), which
// nothing reads until the optimizer, after the whole backward; and a product over K <= 384 into
// at most 384 columns (the attention's output projection and its input gradient, 4,096 x 384 x 384
// in the series' step), whose 6 MB result came from memory there. On the 2-core AMX Xeon (family 6
// model 167), step_profile --precision bf16 alternated four times: the step 329-346 ms (median 334)
// against 338-350 (343); those two products 3.5-3.9 ms a step against 6.5-6.6 each, the weight
// gradients 0.7-0.9 ms less each, the residual add that reads the projection 0.4 more. Streaming
// every float32 result lost: the q/k/v projection (4,096 x 384 x 1,152, its result read by the
// attention at once) took 2.4 ms more and the attention 5.5 more. BM_Bf16GemmCold/evict:256 (N 384):
// 0.70 ms against 1.23-1.28; in cache (evict:0) 0.51 against 0.40-0.43, the price where C is hot.
constexpr int64_t kStreamedDepth = 384, kStreamedWidth = 384;

// Writes a block's sums (rows x cols of stage) into C at (m0, n0): C = alpha sums + beta C.
struct FloatOut {
  float alpha, beta;
  float* C;
  int64_t ldc;
  bool stream = false;  // NOTE [ float32 results streamed to memory ]
  // C itself where the tiles store a whole block into it as they are (alpha 1, beta 0): on the
  // 2-core AMX Xeon 2,700-3,100 GFLOP/s (BM_Bf16Gemm 4096 x 384 x 1536, hot) against 2,000-2,200
  // through the staging buffer and vector stores, 3,400 writing nothing: writing C is what is left.
  Direct direct() const { return alpha == 1.0f && beta == 0.0f && !stream ? Direct{C, ldc} : Direct{}; }
  void operator()(const float* stage, int64_t m0, int64_t n0, int64_t rows, int64_t cols) const {
    if (stream && alpha == 1.0f && beta == 0.0f && cols == kPairCols) {  // whole rows, past the caches
      for (int64_t r = 0; r < rows; ++r) {
        float* c = C + (m0 + r) * ldc + n0;
        store_line(c, _mm512_load_si512(stage + r * kPairCols));
        store_line(c + kTileCols, _mm512_load_si512(stage + r * kPairCols + kTileCols));
      }
      return;
    }
    const __m512 a = _mm512_set1_ps(alpha), b = _mm512_set1_ps(beta);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < kPairCols && h < cols; h += kTileCols) {
        const __mmask16 m = lanes16(cols - h);
        float* c = C + (m0 + r) * ldc + n0 + h;
        __m512 v = _mm512_load_ps(stage + r * kPairCols + h);
        if (alpha != 1.0f) v = _mm512_mul_ps(a, v);
        if (beta != 0.0f) v = _mm512_fmadd_ps(b, _mm512_maskz_loadu_ps(m, c), v);
        _mm512_mask_storeu_ps(c, m, v);
      }
  }
};
// Writes a block's sums into C rounded to bfloat16.
struct RoundedOut {
  bfloat16* C;
  int64_t ldc;
  Direct direct() const { return {}; }
  void operator()(const float* stage, int64_t m0, int64_t n0, int64_t rows, int64_t cols) const {
    // A row's 32 values are one 64-byte line: stored whole and, where aligned, streamed past the
    // caches without reading the line first. The step's bf16 results (12-20 MB) outgrow L2 anyway:
    // on the 2-core AMX Xeon they ran at 1,800-2,110 GFLOP/s in the step profile against 1,620-1,750
    // with ordinary stores (hot, BM_Bf16GemmCold/evict:0, 3% slower; cold 10-25% faster), the GELU
    // that reads them next level.
    if (cols == kPairCols) {
      for (int64_t r = 0; r < rows; ++r) {
        const __m256i lo = fused::rounded16(load16(stage + r * kPairCols));
        const __m256i hi = fused::rounded16(load16(stage + r * kPairCols + kTileCols));
        bfloat16* c = C + (m0 + r) * ldc + n0;
        const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        store_line(c, v);
      }
      return;
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < kPairCols && h < cols; h += kTileCols) {
        const int64_t n = std::min(kTileCols, cols - h);
        const f32x16 v = load16(stage + r * kPairCols + h);
        bfloat16* c = C + (m0 + r) * ldc + n0 + h;
        if (n == kTileCols) fused::store16_rounded(c, v);
        else fused::store16_rounded(c, v, n);
      }
  }
};

// A block of C^T's sums (a product run with its operands' roles swapped) written into C: transposed
// in L1, then as Out writes C's own blocks.
template <typename Out>
struct TransposedOut {
  const Out& out;
  Direct direct() const { return {}; }
  void operator()(const float* stage, int64_t m0, int64_t n0, int64_t rows, int64_t cols) const {
    alignas(64) float t[kPanelRows * kPairCols];
    transpose(stage, kPairCols, rows, cols, t, kPairCols);
    out(t, n0, m0, cols, rows);
  }
};

// The depth of K's chunks: K up to kWholeDepth is one chunk; deeper, chunks of kChunkDepth, the
// partial sums kept in float32 between them (stored and loaded exactly: the same sums in the same
// order as one chunk). Chunks of 384-512 ran the weight gradients (K = 4,096) at 1,700-1,840
// GFLOP/s (hot, 2-core AMX Xeon) against 1,450-1,650 at 1,024 and 1,100-1,400 at 2,048, where a
// panel of A no longer stays in L1; they now take 256 (NOTE [ A weight gradient's chunks ]), and 512
// serves the other deep products (the classifier's input gradient). Yet K = 1,536 (the MLP's second
// layer) ran faster whole, 2,300 against 2,070 in chunks of 512 (BM_Bf16Gemm 4096 x 1536 x 384): its
// partial sums would be a fifth of its work, where the weight gradients' are a fifteenth (a 384 x 384
// to 1,536 x 384 C over 4,096 tokens).
constexpr int64_t kWholeDepth = 2048, kChunkDepth = 512;
// The partial sums a thread keeps between K's chunks: a group of panels' rows of a column block, in L2
// (768 KB for a weight gradient: NOTE [ A weight gradient's chunks ]).
constexpr int64_t kPartialBytes = int64_t(512) << 10;
// NOTE [ A weight gradient's chunks ]
// A weight gradient (A transposed: dY^T over K = 4,096 tokens) takes chunks of 256 and groups of
// panels whose partial sums fill 768 KB instead. A block then multiplies a 16 KB panel of A by a 16 KB
// pair of B's column tiles, both in L1 (48 KB); at 512 the 32 KB panel and the 32 KB of B streaming
// past it do not fit, and the tiles wait on L2 (BM_AmxTileLoop, the tile loop alone on one thread of
// the 2-core AMX Xeon: 6.7 ns a TDPBF16PS at 8 k tiles a block against 7.4 at 16, storing C; NOTE
// [ The tile loop alone ] in bench/bench_amx_tiles.cpp). With B read past the cache at 16 k tiles
// (NOTE [ B read past the cache ]) chunks of 512 still lost in the step: the classifier's 1.0 ms,
// the MLP's second layer's 0.3. "A transposed" is as the product runs: one run as C^T (NOTE [ A
// weight gradient wider than tall ]) with both operands stored transposed takes 512.
// The larger group (16 panels of N = 384 against 10) reads each chunk of B from beyond L2 fewer
// times. In the bf16 step profile on that Xeon (family 6 model 167), alternated five times: the
// MLP's two weight gradients 22.6 and 22.0 ms a step against 24.8 and 24.1, the classifier's 19.7
// against 21.9, the q/k/v projection's 18.8 against 19.2. Groups of 512 KB at chunks of 256: the
// MLP's 0.8 ms slower each; 1,200 KB (partial sums, panels and B's chunk near L2's 2 MB): the
// classifier's 3 ms slower. Deeper products that are not weight gradients (the classifier's input
// gradient, K = 10,000) lost 1 ms at 256 and keep 512; 3072^3 was 15-45% slower at 256.
constexpr int64_t kTransposedChunkDepth = 256, kTransposedPartialBytes = int64_t(768) << 10;

template <typename Out>
void run_oriented(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t lda,
                  const bfloat16* B, int64_t ldb, const float* bias_n, const Out& out) {
  const int64_t deep_chunk = ta ? kTransposedChunkDepth : kChunkDepth;  // NOTE [ A weight gradient's chunks ]
  const int64_t chunk = K <= kWholeDepth ? K : deep_chunk, chunks = (K + chunk - 1) / chunk;
  const int64_t width = round_up(chunk, kTileDepth), chunk_tiles = width / kTileDepth;
  const bool b_past_cache = chunk_tiles >= kStreamedBFrom;  // NOTE [ B read past the cache ]
  const int64_t k_tiles = round_up(K, kTileDepth) / kTileDepth;  // of a packed column tile
  const int64_t pairs = round_up(N, kPairCols) / kPairCols, Np = pairs * kPairCols;
  const int64_t panels = round_up(M, kPanelRows) / kPanelRows;
  const bool in_place = !ta && reinterpret_cast<uintptr_t>(A) % 64 == 0 && lda * int64_t(sizeof(bfloat16)) % 64 == 0;
  // Column blocks of B whose chunk stays in L2 while a thread's panels go by.
  const int64_t block_pairs =
      std::clamp<int64_t>(kBlockBytes / (2 * chunk_tiles * kTileElems * int64_t(sizeof(bfloat16))), 1, pairs);
  const int64_t block_cols = block_pairs * kPairCols;
  // With K in chunks, panels go in groups whose partial sums (a column block's) stay in L2 between
  // the chunks; whole, a thread's panels are one group (each column block of B read once).
  const int64_t partial_bytes = ta ? kTransposedPartialBytes : kPartialBytes;
  const int64_t group = chunks > 1 ? std::max<int64_t>(1, partial_bytes / (kPanelRows * block_cols * 4)) : panels;
  // The calling thread's, kept between products; the pool's tasks reach them through the pointers.
  // Isolated: while this thread waits for the pool it runs only this product's tasks, never another
  // product that would reuse the buffers.
  const Direct to = out.direct();  // where whole blocks of the last chunk go straight into C
  CallerBuffers& buffers = caller_buffers();
  bfloat16* bp = buffers.packed_b.get(2 * pairs * k_tiles * kTileElems);
  float* bias = nullptr;  // bias_n padded with zeros to Np, so every block reads whole tiles of it
  if (bias_n) {
    bias = buffers.bias.get(Np);
    std::memcpy(bias, bias_n, size_t(N) * sizeof(float));
    std::fill(bias + N, bias + Np, 0.0f);
  }
  tbb::this_task_arena::isolate([&] {
    pack_b(tb, N, K, B, ldb, bp);
    const int64_t threads = std::max(1, tbb::this_task_arena::max_concurrency());
    // One contiguous run of panels a thread.
    parallel_for(panels, std::max<int64_t>(1, (panels + threads - 1) / threads), [&](int64_t p0, int64_t p1) {
      TaskBuffers& task = task_buffers();
      // A transposed A in chunks: a group's panels cut together (NOTE [ A group's panels cut together ]).
      const int64_t group_here = std::min(group, p1 - p0);  // panels of this task summed per column block
      const int64_t cut_together = ta && chunks > 1 ? group_here : 1;
      bfloat16* panel = task.panel.get(cut_together * kPanelRows * width);
      // (group panels' rows, block_cols): a column block's partial sums between chunks
      float* partial = chunks > 1 ? task.partial.get(group_here * kPanelRows * block_cols) : nullptr;
      // Two staging buffers: a block's sums go to C while the next block multiplies.
      alignas(64) float stage[2][kPanelRows * kPairCols];
      struct Pending {
        int64_t m0 = -1, n0 = 0;
      } pending[2];
      int which = 0;
      auto flush = [&](int b) {
        if (pending[b].m0 < 0) return;
        out(stage[b], pending[b].m0, pending[b].n0, std::min(kPanelRows, M - pending[b].m0),
            std::min(kPairCols, N - pending[b].n0));
        pending[b].m0 = -1;
      };
      tiles::configure_tiles();
      for (int64_t g0 = p0; g0 < p1; g0 += group) {
        const int64_t g1 = std::min(p1, g0 + group);
        for (int64_t q0 = 0; q0 < pairs; q0 += block_pairs) {
          const int64_t q1 = std::min(pairs, q0 + block_pairs);
          for (int64_t c = 0; c < chunks; ++c) {
            const int64_t k0 = c * chunk, depth = std::min(chunk, K - k0);
            const int64_t kts = round_up(depth, kTileDepth) / kTileDepth, kt0 = k0 / kTileDepth;
            const bool first = c == 0, last = c + 1 == chunks;
            if (cut_together > 1) pack_panels_transposed(A, lda, M, g0, g1, k0, depth, panel, width);
            for (int64_t p = g0; p < g1; ++p) {
              const int64_t m0 = p * kPanelRows;
              // A's own rows where the tiles can read them as they lie (NOTE [ Large products on
              // AMX tiles ]: aligned, whole rows and k tiles), else a copy.
              const bfloat16* a_rows = A + m0 * lda + k0;
              int64_t stride = lda;
              if (cut_together > 1) {
                a_rows = panel + (p - g0) * kPanelRows * width, stride = width;
              } else if (!in_place || m0 + kPanelRows > M || depth % kTileDepth != 0) {
                pack_panel(ta, A, lda, M, m0, k0, depth, panel, width);
                a_rows = panel, stride = width;
              }
              for (int64_t q = q0; q < q1; ++q) {
                const bfloat16* b0 = bp + (2 * q * k_tiles + kt0) * kTileElems;
                const bfloat16* b1 = b0 + k_tiles * kTileElems;
                const int64_t n0 = q * kPairCols;
                float* sums = partial ? partial + (p - g0) * kPanelRows * block_cols + (q - q0) * kPairCols : nullptr;
                // The first chunk starts from the bias (a row read 32 times: stride 0) or zero.
                const float* from = first ? (bias ? bias + n0 : nullptr) : sums;
                const int64_t ld_from = first ? 0 : block_cols;
                if (last && to.C && m0 + kPanelRows <= M && n0 + kPairCols <= N) {
                  multiply_block(kts, a_rows, stride, b0, b1, b_past_cache, from, ld_from, to.C + m0 * to.ldc + n0,
                                 to.ldc, [&] { flush(1 - which); });
                } else if (last) {
                  multiply_block(kts, a_rows, stride, b0, b1, b_past_cache, from, ld_from, stage[which], kPairCols,
                                 [&] { flush(1 - which); });
                  pending[which] = {m0, n0};
                  which = 1 - which;
                } else {
                  multiply_block(kts, a_rows, stride, b0, b1, b_past_cache, from, ld_from, sums, block_cols, [] {});
                }
              }
            }
          }
        }
      }
      flush(1 - which);
      _mm_sfence();  // the streamed stores (RoundedOut, FloatOut) before the pool says this task is done
      _tile_release();
    });
  });
}

// NOTE [ A group's panels cut together ]
// A weight gradient's A is dY^T: a panel is 32 of dY's columns, one 64-byte line of each of 4,096
// rows (a row 768 B to 20 KB long), and cut a panel at a time, each line was fetched alone, far from
// the last. With K in chunks the panels of a group (whose partial sums stay in L2) are cut together
// for each chunk instead: 32 rows of dY at a time across all of them, each row's lines (1 KB for a
// group of sixteen) read one after another, where the prefetchers follow. In
// BM_Bf16WeightGradientCold/evict:256 on the 2-core AMX Xeon (alternated twice): 384 x 4,096 x 1,536
// 4.2-4.8 ms against 5.1-5.5, the classifier's 10,000 x 4,096 x 384 21.4-24.1 against 23.9-25.9; in
// the bf16 step profile the MLP's second layer's gradient 25.7 ms a step against 29.3-29.6. Software
// prefetching a panel's rows ahead, tried first, changed nothing. The same panels, the same bits.

// NOTE [ A weight gradient wider than tall ]
// A weight gradient dW = dY^T X (A transposed) whose C is wider than tall (the MLP's first layer:
// 384 x 1,536 over 4,096 tokens) would cut its wide X into two column blocks of packed B and
// transpose dY's panels once for each. Run as C^T = X^T dY, the narrow operand is packed whole and
// the wide one transposed a panel at a time, as the 1,536 x 384 gradient of the MLP's second layer
// runs: BM_Bf16WeightGradient 384 x 4,096 x 1,536 at 1,690-1,730 GFLOP/s against 1,220-1,350
// unswapped (2-core AMX Xeon, hot; swapping the tall ones too took them from 1,720-1,840 to
// 1,210-1,280). Each element is the same sum of the same exact products in the same order of k, so
// the bits do not change (the tests compare both with the block kernel). Not with a bias: that is a
// row of C, a column of C^T.
template <typename Out>
void run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t lda, const bfloat16* B,
         int64_t ldb, const float* bias, const Out& out) {
  if (!takes_large(M, N, K)) throw std::logic_error("amx::large_gemm: a product these kernels do not take");
  // NOTE [ A weight gradient wider than tall ]
  if (ta && N > M && !bias) return run_oriented(!tb, !ta, N, M, K, B, ldb, A, lda, nullptr, TransposedOut<Out>{out});
  run_oriented(ta, tb, M, N, K, A, lda, B, ldb, bias, out);
}
#endif

}  // namespace

bool takes_large(int64_t M, int64_t N, int64_t K) {
  static const bool off = env_says_off();  // a bad value is refused wherever a bf16 product asks
  return M >= 32 && N >= 32 && K >= 1 && M * N * K >= kLargeMinWork && !off && usable() &&
         g_large_enabled.load(std::memory_order_relaxed);
}

void set_large_enabled(bool on) { g_large_enabled.store(on); }

void large_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A, int64_t lda,
                const bfloat16* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
#ifdef MVGPT_AMX
  if (bias && alpha != 1.0f) throw std::logic_error("amx::large_gemm: a bias with alpha other than 1");
  // NOTE [ float32 results streamed to memory ]
  const bool stream = ta || (K <= kStreamedDepth && N <= kStreamedWidth);
  run(ta, tb, M, N, K, A, lda, B, ldb, bias, FloatOut{alpha, beta, C, ldc, stream});
#else
  (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb, (void)beta, (void)C,
      (void)ldc, (void)bias;
  throw std::logic_error("amx::large_gemm: this build has no AMX kernels");
#endif
}

void large_gemm_rounded(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t lda, const bfloat16* B,
                        int64_t ldb, bfloat16* C, int64_t ldc, const float* bias) {
#ifdef MVGPT_AMX
  run(ta, tb, M, N, K, A, lda, B, ldb, bias, RoundedOut{C, ldc});
#else
  (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb, (void)C, (void)ldc, (void)bias;
  throw std::logic_error("amx::large_gemm_rounded: this build has no AMX kernels");
#endif
}

}  // namespace mvgpt::cpu::amx
