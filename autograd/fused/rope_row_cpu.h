#pragma once
// The CPU's rotation of one row by rope's table (fused/rope.h): shared by rope's kernel
// (rope_cpu.cpp) and the attention kernels that rotate q and k as they read them
// (attention_cpu.cpp), so that both give the same bits. Internal to the fused units.
#include <cstdint>
#include <type_traits>

#include <mvgpt/backends/cpu/fused_common.h>

namespace mvgpt::fused {

// out (2 half) = x rotated by the angles whose cos and sin are c and s (half each): pairs (i, i +
// half), or (2i, 2i + 1) when interleaved. out may be x. Each output is a * c - b * s or a * s + b * c,
// the products rounded before the sum, in any lane width.
template <typename T>
inline void rotate_row(const T* x, const T* c, const T* s, int64_t half, bool interleaved, T* out) {
  namespace vec = cpu::fused;
  if (!interleaved) {
    int64_t i = 0;
    if constexpr (std::is_same_v<T, float>) {
      // Eight pairs at a time, every load before the stores (out may be x, which stops the vectorizer).
      for (; i + vec::kVec <= half; i += vec::kVec) {
        const vec::f32x8 a = vec::load8(x + i), b = vec::load8(x + i + half);
        const vec::f32x8 cv = vec::load8(c + i), sv = vec::load8(s + i);
        vec::store8(out + i, a * cv - b * sv);
        vec::store8(out + i + half, a * sv + b * cv);
      }
    }
    for (; i < half; ++i) {
      const T a = x[i], b = x[i + half];
      out[i] = a * c[i] - b * s[i];
      out[i + half] = a * s[i] + b * c[i];
    }
  } else {
    for (int64_t i = 0; i < half; ++i) {
      const T a = x[2 * i], b = x[2 * i + 1];
      out[2 * i] = a * c[i] - b * s[i];
      out[2 * i + 1] = a * s[i] + b * c[i];
    }
  }
}

// out (2 half, bfloat16) = x rotated as rotate_row rotates it, times scale, rounded to bfloat16: the values of rotate_row then round_to_bf16(.., scale, ..), in one pass where
// the pairs are half apart and half is whole vectors (the attention's heads of 64); elsewhere through
// buf (2 half floats). In BM_RotaryAttentionForward/keep:1 on the 2-core AMX Xeon: see
// docs/performance.md.
inline void rotate_round_row(const float* x, const float* c, const float* s, int64_t half, bool interleaved,
                             float scale, bfloat16* out, float* buf) {
  namespace vec = cpu::fused;
#ifdef __AVX512F__
  if (!interleaved && half % 16 == 0) {
    for (int64_t i = 0; i < half; i += 16) {
      const vec::f32x16 a = vec::load16(x + i), b = vec::load16(x + i + half);
      const vec::f32x16 cv = vec::load16(c + i), sv = vec::load16(s + i);
      vec::store16_rounded(out + i, (a * cv - b * sv) * scale);
      vec::store16_rounded(out + i + half, (a * sv + b * cv) * scale);
    }
    return;
  }
#endif
  rotate_row(x, c, s, half, interleaved, buf);
  vec::round_to_bf16(buf, 2 * half, scale, out);
}

}  // namespace mvgpt::fused
