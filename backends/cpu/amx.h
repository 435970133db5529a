#pragma once
// Products of small bf16 blocks on AMX tiles, written here for the attention kernels, whose blocks
// (64 query rows against at most a window of keys, head size 64) cost oneDNN more in dispatch and
// packing than in arithmetic (NOTE [ Attention on AMX tiles ] in amx.cpp).
//
// An AMX product reads A as rows (16 rows of 32 bf16 a tile) and B in its "VNNI" layout: pairs of
// consecutive k interleaved, (k, n) and (k + 1, n) side by side. Callers pack each B once and
// multiply it by several A blocks (an attention head's keys serve all its query blocks).
#include <cstdint>

#include <mvgpt/tensor/dtype.h>

namespace mvgpt::cpu::amx {

// Whether the products below run here: built for AMX (-march on an AMX CPU), the CPU has AMX-BF16
// and Linux granted the tile state, and MVGPT_AMX_TILES is not 0. Where false, callers take their
// other road (oneDNN or OpenBLAS).
bool usable();
// Tests: route around AMX on a CPU that has it (process-wide), so both roads run on one machine.
void set_enabled(bool on);

constexpr int64_t kTileRows = 16;   // rows of A, C and of a packed B tile (k pairs)
constexpr int64_t kTileDepth = 32;  // bf16 along k in one tile row
constexpr int64_t kTileCols = 16;   // float32 columns of C, columns of B
constexpr int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Elements of B (K, N) in the VNNI layout: K padded to 32, N to 16, with zeros. Tile (kt, nt), 16 k
// pairs by 16 columns by 2, lies at (nt * round_up(K, 32) / 32 + kt) * 512: a column block's tiles
// are contiguous along k. A layout made for a capacity of K rows holds any product over its first
// rows (k_capacity below), so a window's values can be packed as its keys arrive.
constexpr int64_t vnni_elems(int64_t K, int64_t N) { return round_up(K, kTileDepth) * round_up(N, kTileCols); }
// Packs the rows [k0, k1) of B (K = k1 rows of N, stored row-major with leading dimension ld) into a
// layout for k_capacity rows: the whole tiles they touch, rows of those tiles past k1 as zeros (rows
// before k0 in the first tile are read again, so B must hold them).
void pack_vnni_rows(const bfloat16* B, int64_t ld, int64_t k0, int64_t k1, int64_t N, int64_t k_capacity,
                    bfloat16* out);
inline void pack_vnni(const bfloat16* B, int64_t ld, int64_t K, int64_t N, bfloat16* out) {
  pack_vnni_rows(B, ld, 0, K, N, K, out);
}
// Packs the columns [n0, n1) of B (K, N = n1) given as its transpose, stored row-major (rows of K,
// leading dimension ld): a pair is two neighbours of a row, so each tile is a 16 x 16 transpose of
// 32-bit pairs. Columns of the last tile past n1 are zeros; columns before n0 in the first are read
// again.
void pack_vnni_transposed_cols(const bfloat16* Bt, int64_t ld, int64_t K, int64_t n0, int64_t n1, bfloat16* out);
inline void pack_vnni_transposed(const bfloat16* Bt, int64_t ld, int64_t K, int64_t N, bfloat16* out) {
  pack_vnni_transposed_cols(Bt, ld, K, 0, N, out);
}

// out (cols, rows), row-major with leading dimension ldo, = X^T, X (rows, cols) bf16 with leading
// dimension ld. Rows [rows, round_up(rows, 32)) of out's columns are written as zeros, so out can be
// read as a product's A with K = rows.
void transpose(const bfloat16* X, int64_t ld, int64_t rows, int64_t cols, bfloat16* out, int64_t ldo);

// The same for 32 columns: out (32, rows) = X^T, rows [rows, round_up(rows, 32)) of out's columns
// zeros; each 32 x 32 block in one pass of 64-byte rows. transpose takes its whole groups of 32
// columns so (a weight gradient's panels, NOTE [ Large products on AMX tiles ] in amx_gemm.cpp;
// the attention's blocks).
void transpose32(const bfloat16* X, int64_t ld, int64_t rows, bfloat16* out, int64_t ldo);

// out (cols, rows), leading dimension ldo, = X^T for float32 X (rows, cols), leading dimension ld
// (sums made transposed, dK^T and dV^T, put back as rows).
void transpose(const float* X, int64_t ld, int64_t rows, int64_t cols, float* out, int64_t ldo);

// C (M, N) = alpha A B + beta C on this thread, float32 sums of exact products (AMX's order); beta =
// 0 does not read C. A is bf16, row-major with leading dimension lda; the tiles read whole tiles, so
// rows up to round_up(M, 16) and columns up to round_up(K, 32) must be readable. A's columns past K
// meet Bp's rows past K: where Bp was packed with exactly K rows those are zeros and A's need only be
// finite; where it holds more (k_capacity > K, a window's keys beyond this product's), A's must be
// zeros and those rows finite (0 times infinity is NaN). Bp is B packed by pack_vnni* in a layout for k_capacity >= K rows. Requires usable().
void gemm(int64_t M, int64_t N, int64_t K, float alpha, const bfloat16* A, int64_t lda, const bfloat16* Bp,
          int64_t k_capacity, float beta, float* C, int64_t ldc);

}  // namespace mvgpt::cpu::amx
