#pragma once
// KVCacheLayer: the keys and values one attention layer has seen, for token-by-token generation.
//
// NOTE [ Sliding without copying per token ]
// Keys live in a preallocated buffer (B, Hkv, capacity, D); the filled part is the window
// [start, start + length) along axis 2. drop_front(n) only moves `start`; append() writes after
// the window and, only when the buffer's tail is full, first moves the window down to 0. With
// capacity = 2 * window and keep_last(window) before each token, the window moves once every
// `window` tokens and copies `window` rows, so each token costs O(1) amortised instead of the
// O(window) of shifting on every token. Writes are in place and bump the buffer's version, so a
// graph that saved an older view of the cache refuses to run backward (autograd/saved_tensor.h).
// The cache is for inference: what it stores is detached and gets no gradient.
#include <cstdint>

#include <mvgpt/tensor/tensor.h>

namespace mvgpt::nn {

class KVCacheLayer {
 public:
  KVCacheLayer(int64_t batch, int64_t n_kv_head, int64_t capacity, int64_t head_dim, DType dtype = DType::f32,
               Device device = Device::cpu());

  int64_t batch() const { return k_.size(0); }
  int64_t n_kv_head() const { return k_.size(1); }
  int64_t capacity() const { return k_.size(2); }
  int64_t head_dim() const { return k_.size(3); }
  DType dtype() const { return k_.dtype(); }
  Device device() const { return k_.device(); }
  int64_t length() const { return length_; }

  // k, v (B, Hkv, T, D): appended after the cached ones. Throws when length + T > capacity.
  void append(const Tensor& k, const Tensor& v);
  // (B, Hkv, length, D) views of the filled part (valid until the next append or slide).
  Tensor keys() const;
  Tensor values() const;
  // Forgets the oldest n entries (O(1)).
  void drop_front(int64_t n);
  // Keeps only the newest n entries (no-op when length <= n).
  void keep_last(int64_t n);
  void clear();
  // How many times append() moved the window down (for tests and measurements).
  int64_t compactions() const { return compactions_; }

 private:
  void compact();
  Tensor k_, v_;  // (B, Hkv, capacity, D)
  int64_t start_ = 0, length_ = 0, compactions_ = 0;
};

}  // namespace mvgpt::nn
