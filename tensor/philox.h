#pragma once
// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): a counter-based
// generator. Element i of a random tensor depends only on (seed, offset + i), never on which thread or
// device computed it, so the same seed gives the same tensor everywhere. Header-only, host and device.
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define MVGPT_HOST_DEVICE __host__ __device__
#else
#define MVGPT_HOST_DEVICE
#endif

namespace mvgpt::philox {

struct U32x4 {
  uint32_t v[4];
};

MVGPT_HOST_DEVICE inline uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t p = uint64_t(a) * uint64_t(b);
  *hi = uint32_t(p >> 32);
  return uint32_t(p);
}

// Ten rounds of Philox over the 128-bit counter with a 64-bit key.
MVGPT_HOST_DEVICE inline U32x4 philox4x32(U32x4 ctr, uint64_t key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    uint32_t lo0 = mulhilo(kM0, ctr.v[0], &hi0);
    uint32_t lo1 = mulhilo(kM1, ctr.v[2], &hi1);
    ctr = U32x4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return ctr;
}

// Four random words for counter `index` (a 64-bit position in the stream) under `seed`.
MVGPT_HOST_DEVICE inline U32x4 random_words(uint64_t seed, uint64_t index) {
  return philox4x32(U32x4{{uint32_t(index), uint32_t(index >> 32), 0u, 0u}}, seed);
}

// Uniform in [0, 1) with 24 random bits.
MVGPT_HOST_DEVICE inline float to_unit_float(uint32_t w) { return float(w >> 8) * (1.0f / 16777216.0f); }
// Uniform in [0, 1) with 53 random bits.
MVGPT_HOST_DEVICE inline double to_unit_double(uint32_t hi, uint32_t lo) {
  return double((uint64_t(hi) << 21) ^ (lo >> 11)) * (1.0 / 9007199254740992.0);
}

// Element i of a uniform [0, 1) stream.
MVGPT_HOST_DEVICE inline double uniform(uint64_t seed, uint64_t i) {
  U32x4 w = random_words(seed, i);
  return to_unit_double(w.v[0], w.v[1]);
}

// Element i of a standard normal stream (Box-Muller on one counter's words).
MVGPT_HOST_DEVICE inline double normal(uint64_t seed, uint64_t i) {
  U32x4 w = random_words(seed, i);
  double u1 = to_unit_double(w.v[0], w.v[1]);
  double u2 = to_unit_double(w.v[2], w.v[3]);
  // ::sqrt, ::log, ::cos: the C functions (host and device); unqualified, the ops mvgpt::log ... hide them
  double r = ::sqrt(-2.0 * ::log(1.0 - u1));  // 1 - u1 is in (0, 1]: no log(0)
  return r * ::cos(6.283185307179586 * u2);
}

}  // namespace mvgpt::philox
