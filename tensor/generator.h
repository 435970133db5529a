#pragma once
// A random stream: a seed and how many elements have been drawn. Ops that draw n elements take the
// range [offset, offset + n) and advance; saving (seed, offset) saves the stream exactly.
//
// NOTE [ Sharded streams ]
// A data-parallel rank computes rows [r B / N, (r + 1) B / N) of a global batch of B rows. With a
// shard (r, N) set, a draw of n elements (this rank's share) takes [offset + r n, offset + (r + 1) n)
// and advances the offset by N n, the size of the global draw. Philox is counter-based, so rank r's
// share of every draw whose leading dimension is the batch (dropout masks) is exactly the
// corresponding rows of what one process would draw for the whole batch, and `offset` stays the
// global stream's position on every rank (what a checkpoint saves). The default shard (0, 1) is the
// plain stream.
#include <cstdint>

namespace mvgpt {

struct Generator {
  uint64_t seed = 0;
  uint64_t offset = 0;
  uint64_t shard_index = 0;  // r: which share of each draw this stream takes
  uint64_t shard_count = 1;  // N: how many shares a draw is split into

  explicit Generator(uint64_t s = 0) : seed(s) {}
  // Reserves n elements of the stream (this shard's share of a draw of N n) and returns where they start.
  uint64_t take(uint64_t n) {
    uint64_t start = offset + shard_index * n;
    offset += shard_count * n;
    return start;
  }
  // Makes this stream shard `index` of `count` (see the NOTE). Throws std::invalid_argument unless
  // 0 <= index < count.
  void set_shard(uint64_t index, uint64_t count);
};

// The process-wide stream used when an op is not given one (seeded with manual_seed).
Generator& default_generator();
// Restarts the default stream at (seed, 0) with the default shard (0, 1).
void manual_seed(uint64_t seed);

}  // namespace mvgpt
