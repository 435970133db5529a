#include <mvgpt/nn/kv_cache.h>

#include <algorithm>
#include <stdexcept>

#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/autograd/ops.h>

namespace mvgpt::nn {

KVCacheLayer::KVCacheLayer(int64_t batch, int64_t n_kv_head, int64_t capacity, int64_t head_dim, DType dtype,
                           Device device) {
  if (batch < 0 || n_kv_head <= 0 || capacity <= 0 || head_dim <= 0)
    throw std::invalid_argument("KVCacheLayer: invalid size (batch " + std::to_string(batch) + ", n_kv_head " +
                                std::to_string(n_kv_head) + ", capacity " + std::to_string(capacity) + ", head_dim " +
                                std::to_string(head_dim) + ")");
  k_ = mvgpt::zeros({batch, n_kv_head, capacity, head_dim}, dtype, device);
  v_ = mvgpt::zeros({batch, n_kv_head, capacity, head_dim}, dtype, device);
  k_.set_name("kv_cache.keys");
  v_.set_name("kv_cache.values");
}

void KVCacheLayer::append(const Tensor& k, const Tensor& v) {
  auto check = [&](const Tensor& t, const char* what) {
    if (t.dim() != 4 || t.size(0) != batch() || t.size(1) != n_kv_head() || t.size(3) != head_dim())
      throw std::invalid_argument(std::string("KVCacheLayer::append: expected ") + what + " (" +
                                  std::to_string(batch()) + ", " + std::to_string(n_kv_head()) + ", T, " +
                                  std::to_string(head_dim()) + "), found " + t.describe());
    if (t.device() != device())
      throw std::invalid_argument(std::string("KVCacheLayer::append: ") + what + " is on " + t.device().str() +
                                  ", the cache on " + device().str());
  };
  check(k, "keys");
  check(v, "values");
  if (!(k.shape() == v.shape()))
    throw std::invalid_argument("KVCacheLayer::append: keys " + k.describe() + " and values " + v.describe() +
                                " differ in shape");
  const int64_t t = k.size(2);
  if (length_ + t > capacity())
    throw std::invalid_argument("KVCacheLayer::append: " + std::to_string(t) + " new entries do not fit: " +
                                std::to_string(length_) + " of " + std::to_string(capacity()) +
                                " are used (slide the cache first)");
  if (start_ + length_ + t > capacity()) compact();
  NoGradGuard no_grad;
  mvgpt::copy_(mvgpt::narrow(k_, 2, start_ + length_, t), k);
  mvgpt::copy_(mvgpt::narrow(v_, 2, start_ + length_, t), v);
  length_ += t;
}

// Moves the window [start, start + length) down to 0.
void KVCacheLayer::compact() {
  if (start_ == 0) return;
  NoGradGuard no_grad;
  for (const Tensor& buf : {k_, v_}) {
    Tensor window = mvgpt::narrow(buf, 2, start_, length_);
    // Source and destination overlap when the window moves less than its length: go through a copy.
    if (start_ < length_) window = mvgpt::clone(window);
    mvgpt::copy_(mvgpt::narrow(buf, 2, 0, length_), window);
  }
  start_ = 0;
  ++compactions_;
}

Tensor KVCacheLayer::keys() const { return mvgpt::narrow(k_, 2, start_, length_); }
Tensor KVCacheLayer::values() const { return mvgpt::narrow(v_, 2, start_, length_); }

void KVCacheLayer::drop_front(int64_t n) {
  if (n < 0 || n > length_)
    throw std::invalid_argument("KVCacheLayer::drop_front: cannot drop " + std::to_string(n) + " of " +
                                std::to_string(length_) + " entries");
  start_ += n;
  length_ -= n;
  if (length_ == 0) start_ = 0;
}

void KVCacheLayer::keep_last(int64_t n) {
  if (n < 0) throw std::invalid_argument("KVCacheLayer::keep_last: negative count " + std::to_string(n));
  if (length_ > n) drop_front(length_ - n);
}

void KVCacheLayer::clear() {
  start_ = 0;
  length_ = 0;
}

}  // namespace mvgpt::nn
