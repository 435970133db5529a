#pragma once
// What the AMX kernels (amx.cpp, amx_gemm.cpp) share: their switches in the environment, whether
// this build has them (MVGPT_AMX), the tile configuration they load, and lane masks for rows'
// partial ends.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace mvgpt::cpu::amx::tiles {

// A 0-or-1 switch from the environment: true for 0 (route around a kernel), false for 1 or unset;
// anything else is refused with one line naming the variable, its value and `unset_means`.
inline bool env_switch_off(const char* variable, const char* unset_means) {
  const char* e = std::getenv(variable);
  const std::string v = e ? e : "";
  if (v.empty() || v == "1") return false;
  if (v == "0") return true;
  throw std::runtime_error(std::string(variable) + "=" + v + " is not 0 or 1: leave it unset " + unset_means);
}

}  // namespace mvgpt::cpu::amx::tiles

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__)
#define MVGPT_AMX 1
// GCC 12 warns of its own intrinsics' undefined-vector idiom (_mm512_undefined_epi32) once they are
// inlined here (as "maybe" in optimized builds, for sure in the sanitizers' build): a false
// positive (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

namespace mvgpt::cpu::amx::tiles {

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Every tile 16 rows of 64 bytes. Loaded at each product: oneDNN's kernels, on the same thread,
// load their own.
inline void configure_tiles() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) c.colsb[t] = 64, c.rows[t] = 16;
  _tile_loadconfig(&c);
}

// Mask of the first n (0..16) 32-bit lanes, and of the first n (0..32) 16-bit ones.
inline __mmask16 lanes16(int64_t n) { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << std::max<int64_t>(n, 0)) - 1); }
inline __mmask32 lanes32(int64_t n) {
  return n >= 32 ? __mmask32(0xffffffffu) : __mmask32((1u << std::max<int64_t>(n, 0)) - 1);
}

}  // namespace mvgpt::cpu::amx::tiles
#endif
