#pragma once
// Training and evaluation batches from a token file.
#include <cstdint>

#include <mvgpt/text/token_file.h>
#include <mvgpt/tensor/tensor.h>

namespace mvgpt::gpt {

struct Batch {
  Tensor inputs;   // (B, T) int32
  Tensor targets;  // (B, T) int32: the inputs shifted by one token
};

// Random windows of T + 1 tokens. Window b of step s starts at a position drawn from the Philox
// stream (seed, s * B + b), so a batch depends only on (seed, step): a resumed run sees exactly the
// batches it would have seen, and two runs with the same seed see the same data.
class RandomBatches {
 public:
  // Throws std::invalid_argument naming the file when it holds fewer than T + 1 tokens.
  RandomBatches(const text::TokenFile& tokens, int64_t batch_size, int64_t block_size, uint64_t seed);
  Batch at(int64_t step) const;
  int64_t batch_size() const { return batch_size_; }
  int64_t block_size() const { return block_size_; }

 private:
  const text::TokenFile& tokens_;
  int64_t batch_size_, block_size_;
  uint64_t seed_;
};

// Consecutive windows of T + 1 tokens (overlapping by one, so every token but the first is a
// target once), at most `max_windows` of them, grouped in batches of up to batch_size.
class SequentialBatches {
 public:
  SequentialBatches(const text::TokenFile& tokens, int64_t batch_size, int64_t block_size, int64_t max_windows = -1);
  int64_t size() const { return num_batches_; }
  int64_t num_windows() const { return num_windows_; }
  Batch at(int64_t i) const;

 private:
  const text::TokenFile& tokens_;
  int64_t batch_size_, block_size_, num_windows_, num_batches_;
};

}  // namespace mvgpt::gpt
