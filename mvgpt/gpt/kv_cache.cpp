#include <mvgpt/gpt/kv_cache.h>

#include <stdexcept>
#include <string>

#include <mvgpt/autograd/precision.h>

namespace mvgpt::gpt {

DType cache_dtype(DType weights, Device device) {
  const bool bf16 = autograd::product_precision() == autograd::Precision::bf16 && weights == DType::f32;
  return bf16 && device.is_cpu() ? DType::bf16 : weights;
}

KVCache::KVCache(const GPTConfig& config, int64_t batch, int64_t capacity, DType dtype, Device device) {
  config.validate();
  if (capacity <= 0) capacity = 2 * config.block_size;
  layers_.reserve(size_t(config.n_layer));
  for (int64_t i = 0; i < config.n_layer; ++i)
    layers_.emplace_back(batch, config.kv_heads(), capacity, config.head_dim(), dtype, device);
}

void KVCache::slide(int64_t keep) {
  if (keep < 0) throw std::invalid_argument("KVCache::slide: keep must not be negative, found " + std::to_string(keep));
  for (auto& l : layers_) l.keep_last(keep);
}

void KVCache::reset() {
  for (auto& l : layers_) l.clear();
  position = 0;
}

}  // namespace mvgpt::gpt
