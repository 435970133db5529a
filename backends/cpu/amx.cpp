// Small bf16 products on AMX tiles (amx.h).
//
// NOTE [ Attention on AMX tiles ]
// The attention kernels multiply per query block: 64 rows against up to 256 keys, head size 64,
// five products a block in the backward, about 16,000 calls a training step. Through oneDNN each
// call packs its B again and goes through the primitive's dispatch: on the 2-core AMX Xeon (family
// 6 model 167), perf over BM_RotaryAttentionBackward/packed:1/bf16:1 put 45% of the time in oneDNN's
// JIT kernels and another 10% in libdnnl itself, the arithmetic (2.5 GFLOP a layer) running at about
// 520 GFLOP/s. Here the operands a head reuses are packed once (keys and values for every block)
// and each block's product is a few tile instructions with no dispatch.
// The kernel keeps a 32 x 32 block of C in four tiles (0-3), two A tiles (4, 5) and two B tiles (6, 7):
// four loads for four TDPBF16PS, the most reuse eight tiles allow. Measured in a loop on that Xeon,
// one thread: 24 cycles a TDPBF16PS (16 is the instruction's rate) with A and B in L1, 45-60 with
// them in L2, whatever the software prefetching; hence packing once per head, where a head's packed
// keys (32 KB at 256 x 64) stay near.
// TDPBF16PS multiplies bf16 pairs exactly and sums in float32, treating denormal inputs as zero and
// flushing denormal results, as oneDNN's AMX and AVX512-BF16 kernels do.
#include <mvgpt/backends/cpu/amx.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <stdexcept>

#include <mvgpt/backends/cpu/amx_tiles.h>
#include <mvgpt/backends/cpu/bf16_gemm.h>

namespace mvgpt::cpu::amx {
namespace {

std::atomic<bool> g_enabled{true};

// MVGPT_AMX_TILES=0 routes around the tile kernels (to compare the two roads, or where a CPU's
// tiles misbehave); 1 or unset uses them where the CPU has them; anything else is refused.
bool env_says_off() { return tiles::env_switch_off("MVGPT_AMX_TILES", "to use AMX tiles where the CPU has them"); }

#ifdef MVGPT_AMX
using tiles::configure_tiles;
using tiles::lanes16;
using tiles::lanes32;

// The 16 x 16 transpose of 32-bit elements, r[i] the rows.
inline void transpose16x16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // s[4b + c], in 128-bit lane L: column 4L + c of rows 4b .. 4b + 3.
  __m512i s[16];
  for (int b = 0; b < 16; b += 4) {
    s[b] = _mm512_unpacklo_epi64(t[b], t[b + 2]);
    s[b + 1] = _mm512_unpackhi_epi64(t[b], t[b + 2]);
    s[b + 2] = _mm512_unpacklo_epi64(t[b + 1], t[b + 3]);
    s[b + 3] = _mm512_unpackhi_epi64(t[b + 1], t[b + 3]);
  }
  // Row 4L + c of the result gathers lane L of s[c], s[4 + c], s[8 + c], s[12 + c].
  for (int c = 0; c < 4; ++c) {
    const __m512i y0 = _mm512_shuffle_i32x4(s[c], s[4 + c], 0x44), y1 = _mm512_shuffle_i32x4(s[c], s[4 + c], 0xee);
    const __m512i y2 = _mm512_shuffle_i32x4(s[8 + c], s[12 + c], 0x44);
    const __m512i y3 = _mm512_shuffle_i32x4(s[8 + c], s[12 + c], 0xee);
    r[c] = _mm512_shuffle_i32x4(y0, y2, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(y0, y2, 0xdd);
    r[8 + c] = _mm512_shuffle_i32x4(y1, y3, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(y1, y3, 0xdd);
  }
}

// One VNNI tile row from two rows of B (k and k + 1), n valid columns; null rows read as zeros.
inline __m512i interleave(const bfloat16* r0, const bfloat16* r1, int64_t n) {
  const __mmask16 m = lanes16(n);
  const __m512i lo = r0 ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r0)) : _mm512_setzero_si512();
  const __m512i hi = r1 ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, r1)) : _mm512_setzero_si512();
  return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
}
#endif

}  // namespace

bool usable() {
  static const bool off = env_says_off();  // a bad value is refused on every build
#ifdef MVGPT_AMX
  static const bool granted = bf16::cpu_support().amx_bf16 && !off;
  return granted && g_enabled.load(std::memory_order_relaxed);
#else
  (void)off;
  return false;
#endif
}

void set_enabled(bool on) { g_enabled.store(on); }

void pack_vnni_rows(const bfloat16* B, int64_t ld, int64_t k0, int64_t k1, int64_t N, int64_t k_capacity,
                    bfloat16* out) {
  const int64_t kts = round_up(k_capacity, kTileDepth) / kTileDepth, nts = round_up(N, kTileCols) / kTileCols;
  const int64_t kt1 = round_up(k1, kTileDepth) / kTileDepth;
  for (int64_t nt = 0; nt < nts; ++nt)
    for (int64_t kt = k0 / kTileDepth; kt < kt1; ++kt) {
      bfloat16* tile = out + (nt * kts + kt) * kTileRows * kTileDepth;
      const int64_t c0 = nt * kTileCols, n = std::min(kTileCols, N - c0);
      for (int64_t p = 0; p < kTileRows; ++p) {
        const int64_t k = kt * kTileDepth + 2 * p;
        const bfloat16* r0 = k < k1 ? B + k * ld + c0 : nullptr;
        const bfloat16* r1 = k + 1 < k1 ? B + (k + 1) * ld + c0 : nullptr;
#ifdef MVGPT_AMX
        _mm512_storeu_si512(tile + p * kTileDepth, interleave(r0, r1, n));
#else
        for (int64_t c = 0; c < kTileCols; ++c) {
          tile[p * kTileDepth + 2 * c] = r0 && c < n ? r0[c] : bfloat16();
          tile[p * kTileDepth + 2 * c + 1] = r1 && c < n ? r1[c] : bfloat16();
        }
#endif
      }
    }
}

void pack_vnni_transposed_cols(const bfloat16* Bt, int64_t ld, int64_t K, int64_t n0, int64_t n1, bfloat16* out) {
  const int64_t kts = round_up(K, kTileDepth) / kTileDepth;
  for (int64_t nt = n0 / kTileCols; nt < round_up(n1, kTileCols) / kTileCols; ++nt)
    for (int64_t kt = 0; kt < kts; ++kt) {
      bfloat16* tile = out + (nt * kts + kt) * kTileRows * kTileDepth;
      const int64_t c0 = nt * kTileCols, n = std::min(kTileCols, n1 - c0);
      const int64_t kk0 = kt * kTileDepth, k = std::min(kTileDepth, K - kk0);
#ifdef MVGPT_AMX
      // Row c of Bt holds column c's k pairs: 16 of them are one 64-byte row; transposed, a tile.
      __m512i r[16];
      for (int64_t c = 0; c < kTileCols; ++c)
        r[c] = c < n ? _mm512_maskz_loadu_epi16(lanes32(k), Bt + (c0 + c) * ld + kk0) : _mm512_setzero_si512();
      transpose16x16(r);
      for (int64_t p = 0; p < kTileRows; ++p) _mm512_storeu_si512(tile + p * kTileDepth, r[p]);
#else
      for (int64_t p = 0; p < kTileRows; ++p)
        for (int64_t c = 0; c < kTileCols; ++c)
          for (int64_t h = 0; h < 2; ++h) {
            const int64_t kk = 2 * p + h;
            tile[p * kTileDepth + 2 * c + h] = c < n && kk < k ? Bt[(c0 + c) * ld + kk0 + kk] : bfloat16();
          }
#endif
    }
}

void transpose(const bfloat16* X, int64_t ld, int64_t rows, int64_t cols, bfloat16* out, int64_t ldo) {
  int64_t whole = 0;  // columns taken 32 at a time, each group's 64-byte rows in one pass
#ifdef MVGPT_AMX
  for (; whole + 2 * kTileCols <= cols; whole += 2 * kTileCols) transpose32(X + whole, ld, rows, out + whole * ldo, ldo);
#endif
  // The rest in blocks of 32 rows by 16 columns: two rows make 16 pairs (a VNNI row), and the
  // 16 x 16 transpose of the pairs is 16 rows of out, each 32 consecutive rows of X.
  for (int64_t r0 = 0; r0 < round_up(rows, 2 * kTileRows); r0 += 2 * kTileRows)
    for (int64_t c0 = whole; c0 < cols; c0 += kTileCols) {
      const int64_t n = std::min(kTileCols, cols - c0);
#ifdef MVGPT_AMX
      __m512i r[16];
      for (int64_t p = 0; p < kTileRows; ++p) {
        const int64_t k = r0 + 2 * p;
        r[p] = interleave(k < rows ? X + k * ld + c0 : nullptr, k + 1 < rows ? X + (k + 1) * ld + c0 : nullptr, n);
      }
      transpose16x16(r);
      for (int64_t c = 0; c < n; ++c) _mm512_storeu_si512(out + (c0 + c) * ldo + r0, r[c]);
#else
      for (int64_t c = 0; c < n; ++c)
        for (int64_t k = 0; k < 2 * kTileRows; ++k)
          out[(c0 + c) * ldo + r0 + k] = r0 + k < rows ? X[(r0 + k) * ld + c0 + c] : bfloat16();
#endif
    }
}

void transpose32(const bfloat16* X, int64_t ld, int64_t rows, bfloat16* out, int64_t ldo) {
#ifndef MVGPT_AMX
  transpose(X, ld, rows, 2 * kTileCols, out, ldo);
#else
  for (int64_t r0 = 0; r0 < round_up(rows, 2 * kTileRows); r0 += 2 * kTileRows) {
    // Rows r0 + 2p and r0 + 2p + 1 interleaved sixteen bits at a time: in each 128-bit lane L,
    // unpacklo pairs columns 8L..8L+3 and unpackhi columns 8L+4..8L+7, four pairs each. The 16 x 16
    // transpose of the pairs then gives each of those columns its 16 pairs: 32 rows of X.
    __m512i lo[16], hi[16];
    for (int64_t p = 0; p < kTileRows; ++p) {
      const int64_t k = r0 + 2 * p;
      const __m512i a = k < rows ? _mm512_loadu_si512(X + k * ld) : _mm512_setzero_si512();
      const __m512i b = k + 1 < rows ? _mm512_loadu_si512(X + (k + 1) * ld) : _mm512_setzero_si512();
      lo[p] = _mm512_unpacklo_epi16(a, b);
      hi[p] = _mm512_unpackhi_epi16(a, b);
    }
    transpose16x16(lo);
    transpose16x16(hi);
    for (int64_t e = 0; e < kTileRows; ++e) {
      const int64_t c = 8 * (e / 4) + e % 4;
      _mm512_storeu_si512(out + c * ldo + r0, lo[e]);
      _mm512_storeu_si512(out + (c + 4) * ldo + r0, hi[e]);
    }
  }
#endif
}

void transpose(const float* X, int64_t ld, int64_t rows, int64_t cols, float* out, int64_t ldo) {
  for (int64_t r0 = 0; r0 < rows; r0 += kTileRows)
    for (int64_t c0 = 0; c0 < cols; c0 += kTileCols) {
      const int64_t nr = std::min(kTileRows, rows - r0), nc = std::min(kTileCols, cols - c0);
#ifdef MVGPT_AMX
      __m512i r[16];
      for (int64_t i = 0; i < kTileRows; ++i)
        r[i] = i < nr ? _mm512_castps_si512(_mm512_maskz_loadu_ps(lanes16(nc), X + (r0 + i) * ld + c0))
                      : _mm512_setzero_si512();
      transpose16x16(r);
      for (int64_t c = 0; c < nc; ++c) _mm512_mask_storeu_ps(out + (c0 + c) * ldo + r0, lanes16(nr), _mm512_castsi512_ps(r[c]));
#else
      for (int64_t c = 0; c < nc; ++c)
        for (int64_t i = 0; i < nr; ++i) out[(c0 + c) * ldo + r0 + i] = X[(r0 + i) * ld + c0 + c];
#endif
    }
}

#ifdef MVGPT_AMX
namespace {

// C's tile (i, j) of a block: in place, or through a 16 x 16 staging buffer where it is partial or
// scaled (then C = alpha acc + beta C on the valid part).
struct Out {
  float* C;
  int64_t ldc, M, N;
  float alpha, beta;
  bool direct;  // alpha 1, beta 0 or 1: full tiles load and store C itself
};

template <int MT, int NT>
void block(const bfloat16* A, int64_t lda, const bfloat16* B0, const bfloat16* B1, int64_t kts, const Out& o,
           int64_t m0, int64_t n0) {
  alignas(64) float stage[kTileRows * kTileCols];
  auto full = [&](int i, int j) {
    return o.direct && m0 + (i + 1) * kTileRows <= o.M && n0 + (j + 1) * kTileCols <= o.N;
  };
  auto at = [&](int i, int j) { return o.C + (m0 + i * kTileRows) * o.ldc + n0 + j * kTileCols; };
  const int64_t cs = o.ldc * int64_t(sizeof(float));
  const bool load = o.beta == 1.0f;
#define MVGPT_AMX_INIT(t, i, j)                                       \
  if (full(i, j) && load) _tile_loadd(t, at(i, j), cs);              \
  else _tile_zero(t);
  MVGPT_AMX_INIT(0, 0, 0)
  if constexpr (NT == 2) { MVGPT_AMX_INIT(1, 0, 1) }
  if constexpr (MT == 2) { MVGPT_AMX_INIT(2, 1, 0) }
  if constexpr (MT == 2 && NT == 2) { MVGPT_AMX_INIT(3, 1, 1) }
#undef MVGPT_AMX_INIT
  const int64_t as = lda * int64_t(sizeof(bfloat16));
  const bfloat16* a1 = A + kTileRows * lda;
  for (int64_t kt = 0; kt < kts; ++kt) {
    const int64_t ko = kt * kTileDepth, bo = kt * kTileRows * kTileDepth;
    _tile_loadd(4, A + ko, as);
    _tile_loadd(6, B0 + bo, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NT == 2) {
      _tile_loadd(7, B1 + bo, 64);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (MT == 2) {
      _tile_loadd(5, a1 + ko, as);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (NT == 2) _tile_dpbf16ps(3, 5, 7);
    }
  }
  auto finish = [&](int i, int j) {
    const int64_t rows = std::min(kTileRows, o.M - m0 - i * kTileRows);
    const int64_t cols = std::min(kTileCols, o.N - n0 - j * kTileCols);
    float* c = at(i, j);
    const __mmask16 m = lanes16(cols);
    const __m512 alpha = _mm512_set1_ps(o.alpha), beta = _mm512_set1_ps(o.beta);
    for (int64_t r = 0; r < rows; ++r) {
      __m512 v = _mm512_mul_ps(alpha, _mm512_load_ps(stage + r * kTileCols));
      if (o.beta != 0.0f) v = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(m, c + r * o.ldc), v);
      _mm512_mask_storeu_ps(c + r * o.ldc, m, v);
    }
  };
#define MVGPT_AMX_STORE(t, i, j)                                      \
  if (full(i, j)) _tile_stored(t, at(i, j), cs);                     \
  else {                                                              \
    _tile_stored(t, stage, kTileCols * int64_t(sizeof(float)));       \
    finish(i, j);                                                     \
  }
  MVGPT_AMX_STORE(0, 0, 0)
  if constexpr (NT == 2) { MVGPT_AMX_STORE(1, 0, 1) }
  if constexpr (MT == 2) { MVGPT_AMX_STORE(2, 1, 0) }
  if constexpr (MT == 2 && NT == 2) { MVGPT_AMX_STORE(3, 1, 1) }
#undef MVGPT_AMX_STORE
}

}  // namespace
#endif

void gemm(int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A, int64_t lda, const bfloat16* Bp,
          int64_t k_capacity, float beta, float* C, int64_t ldc) {
#ifdef MVGPT_AMX
  if (!usable()) throw std::logic_error("amx::gemm: AMX tiles are not usable on this CPU");
  if (M <= 0 || N <= 0) return;
  const int64_t kts = round_up(K, kTileDepth) / kTileDepth;
  if (kts == 0) {  // an empty sum
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  if (k_capacity < K) throw std::logic_error("amx::gemm: B was packed for fewer rows than the product sums over");
  const int64_t stride = round_up(k_capacity, kTileDepth) / kTileDepth * kTileRows * kTileDepth;  // a column tile
  configure_tiles();
  const Out o{C, ldc, M, N, alpha, beta, alpha == 1.0f && (beta == 0.0f || beta == 1.0f)};
  const int64_t mts = round_up(M, kTileRows) / kTileRows, nts = round_up(N, kTileCols) / kTileCols;
  // Column blocks outside, so a block's packed B stays in L1 while the rows of A go by.
  for (int64_t nt = 0; nt < nts; nt += 2) {
    const bfloat16* b0 = Bp + nt * stride;
    const bfloat16* b1 = b0 + stride;
    const bool two_n = nt + 1 < nts;
    for (int64_t mt = 0; mt < mts; mt += 2) {
      const bfloat16* a = A + mt * kTileRows * lda;
      const bool two_m = mt + 1 < mts;
      const int64_t m0 = mt * kTileRows, n0 = nt * kTileCols;
      if (two_m && two_n) block<2, 2>(a, lda, b0, b1, kts, o, m0, n0);
      else if (two_m) block<2, 1>(a, lda, b0, b1, kts, o, m0, n0);
      else if (two_n) block<1, 2>(a, lda, b0, b1, kts, o, m0, n0);
      else block<1, 1>(a, lda, b0, b1, kts, o, m0, n0);
    }
  }
  _tile_release();
#else
  (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)Bp, (void)k_capacity, (void)beta, (void)C, (void)ldc;
  throw std::logic_error("amx::gemm: this build has no AMX kernels");
#endif
}

}  // namespace mvgpt::cpu::amx
