#include <mvgpt/gpt/batches.h>

#include <stdexcept>
#include <algorithm>
#include <string>
#include <vector>

#include <mvgpt/tensor/philox.h>

namespace mvgpt::gpt {

static void check_length(const text::TokenFile& tokens, int64_t block_size) {
  if (block_size <= 0) throw std::invalid_argument("batches: block size must be positive");
  if (int64_t(tokens.size()) < block_size + 1)
    throw std::invalid_argument(tokens.path() + ": " + std::to_string(tokens.size()) +
                                " tokens, too few for one window of " + std::to_string(block_size + 1));
}

// Copies windows starting at `starts` into (B, T) inputs and targets.
static Batch gather_windows(const text::TokenFile& tokens, const std::vector<int64_t>& starts, int64_t T) {
  const int64_t B = int64_t(starts.size());
  Batch batch{Tensor::empty({B, T}, DType::i32), Tensor::empty({B, T}, DType::i32)};
  int32_t* x = batch.inputs.data<int32_t>();
  int32_t* y = batch.targets.data<int32_t>();
  const uint16_t* src = tokens.data();
  for (int64_t b = 0; b < B; ++b) {
    const uint16_t* w = src + starts[size_t(b)];
    for (int64_t t = 0; t < T; ++t) {
      x[b * T + t] = w[t];
      y[b * T + t] = w[t + 1];
    }
  }
  return batch;
}

RandomBatches::RandomBatches(const text::TokenFile& tokens, int64_t batch_size, int64_t block_size, uint64_t seed)
    : tokens_(tokens), batch_size_(batch_size), block_size_(block_size), seed_(seed) {
  check_length(tokens, block_size);
  if (batch_size <= 0) throw std::invalid_argument("RandomBatches: batch size must be positive");
}

Batch RandomBatches::at(int64_t step) const {
  const uint64_t choices = tokens_.size() - uint64_t(block_size_);  // starts 0 .. N - T - 1
  std::vector<int64_t> starts(static_cast<size_t>(batch_size_));
  for (int64_t b = 0; b < batch_size_; ++b) {
    philox::U32x4 w = philox::random_words(seed_, uint64_t(step) * uint64_t(batch_size_) + uint64_t(b));
    uint64_t r = (uint64_t(w.v[0]) << 32) | w.v[1];
    starts[size_t(b)] = int64_t(r % choices);
  }
  return gather_windows(tokens_, starts, block_size_);
}

SequentialBatches::SequentialBatches(const text::TokenFile& tokens, int64_t batch_size, int64_t block_size,
                                     int64_t max_windows)
    : tokens_(tokens), batch_size_(batch_size), block_size_(block_size) {
  check_length(tokens, block_size);
  if (batch_size <= 0) throw std::invalid_argument("SequentialBatches: batch size must be positive");
  num_windows_ = (int64_t(tokens.size()) - 1) / block_size;
  if (max_windows >= 0 && max_windows < num_windows_) num_windows_ = max_windows;
  num_batches_ = (num_windows_ + batch_size - 1) / batch_size;
}

Batch SequentialBatches::at(int64_t i) const {
  if (i < 0 || i >= num_batches_)
    throw std::out_of_range("SequentialBatches::at: batch " + std::to_string(i) + " of " + std::to_string(num_batches_));
  std::vector<int64_t> starts;
  for (int64_t w = i * batch_size_; w < std::min(num_windows_, (i + 1) * batch_size_); ++w)
    starts.push_back(w * block_size_);
  return gather_windows(tokens_, starts, block_size_);
}

}  // namespace mvgpt::gpt
