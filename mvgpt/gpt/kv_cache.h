#pragma once
// The GPT's KV cache: one nn::KVCacheLayer per block, and the absolute position of the next token.
//
// NOTE [ Why the cache can slide with RoPE ]
// With rotary embeddings a cached key was rotated for its own absolute position, and its score with
// a later query depends only on the distance between the two, so the key stays valid as the window
// moves: past block_size, slide() drops the oldest token and `position` keeps counting. With a
// learned table the position is baked into every layer's keys and values, and positions past the
// table do not exist, so a learned-position model cannot use the cache past block_size.
#include <cstdint>
#include <vector>

#include <mvgpt/gpt/config.h>
#include <mvgpt/nn/kv_cache.h>

namespace mvgpt::gpt {

// The dtype of a decoding cache for weights of dtype `weights` on `device`: bfloat16 on the CPU under
// the bf16 precision policy (the keys and values autocast's products give; the CPU's attention reads
// them in place, half the bytes of float32: mvgpt/fused/attention.h), the weights' dtype otherwise.
DType cache_dtype(DType weights, Device device);

class KVCache {
 public:
  // capacity 0: twice the window, so sliding moves memory once every block_size tokens.
  KVCache(const GPTConfig& config, int64_t batch = 1, int64_t capacity = 0, DType dtype = DType::f32,
          Device device = Device::cpu());

  // Absolute position of the next token; keeps counting after slides.
  int64_t position = 0;

  // Tokens held (the same in every layer).
  int64_t length() const { return layers_.empty() ? 0 : layers_.front().length(); }
  int64_t capacity() const { return layers_.empty() ? 0 : layers_.front().capacity(); }
  nn::KVCacheLayer& layer(size_t i) { return layers_.at(i); }
  size_t num_layers() const { return layers_.size(); }
  // Drops all but the newest `keep` tokens in every layer (position is unchanged).
  void slide(int64_t keep);
  void reset();

 private:
  std::vector<nn::KVCacheLayer> layers_;
};

}  // namespace mvgpt::gpt
