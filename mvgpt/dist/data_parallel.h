#pragma once
// Data-parallel training over dist's world: the same weights everywhere, a share of each batch per
// rank, and gradients averaged before clipping and the optimizer step.
//
// NOTE [ Why every rank ends with the same weights ]
// Rank 0's weights are broadcast once; after that every rank applies the same averaged gradient
// with the same optimizer, so they stay equal bit for bit without another broadcast. The global
// batch of B rows is split in N equal shares, so the mean of the ranks' mean losses (and of their
// gradients) is the mean over the whole batch, as one process would compute it up to rounding.
#include <cstddef>
#include <cstdint>
#include <vector>

#include <mvgpt/tensor/generator.h>
#include <mvgpt/tensor/tensor.h>

namespace mvgpt::dist {

// 25 MiB of float32 per all-reduce, as PyTorch's DistributedDataParallel: large enough that the
// per-call latency is small, small enough that packing stays in cache-sized pieces.
inline constexpr size_t kDefaultBucketBytes = size_t(25) << 20;

// Overwrites every tensor (any dtype, any device) with rank `root`'s values, in order. Every rank
// must pass tensors of the same shapes, dtypes and device types; that is checked across ranks
// first. CUDA tensors go through NCCL when the build has it (dist/nccl.h), others through MPI.
void broadcast_tensors(const std::vector<Tensor>& tensors, int root = 0);

// Replaces every parameter's gradient by its mean over the ranks: float32/float64 gradients are
// packed into buckets of at most `bucket_bytes`, summed in place with one all-reduce each, divided
// by the rank count and copied back. Returns the bytes all-reduced (0 with one rank). Throws
// std::invalid_argument when a parameter has no gradient (the ranks must reduce the same tensors)
// or a gradient is not floating point.
// Gradients on a CUDA device, in a build with NCCL, are packed into buckets on that device and
// averaged by ncclAllReduce on the backend's stream; the others (and CUDA gradients without NCCL)
// are packed on the host and summed by MPI.
int64_t average_gradients(const std::vector<Tensor>& params, size_t bucket_bytes = kDefaultBucketBytes);

// The device this rank trains on when `requested` is asked for. Under a launch of several ranks a
// CUDA device becomes cuda:<local rank> (one GPU per process, as NCCL requires; the index asked for
// is ignored); a CPU device, or a single process, is returned unchanged. Throws std::runtime_error
// when this machine runs more ranks than it has visible GPUs.
Device local_device(Device requested);

// Makes `gen` this rank's shard (rank, size) of the stream (NOTE [ Sharded streams ] in
// tensor/generator.h): the dropout masks of this rank's rows are then those one process would draw
// for the same rows of the global batch. Call it after seeding; the offset stays the global one.
void shard_generator(Generator& gen);

// The bytes average_gradients moves per step for these parameters, counted from their shapes.
int64_t gradient_bytes(const std::vector<Tensor>& params);

// Rank `rank`'s share of a batch: rows [rank B / n, (rank + 1) B / n) of `batch` (B, ...), as a
// contiguous tensor. Throws std::invalid_argument when B is not a multiple of n.
Tensor shard_rows(const Tensor& batch, int rank, int n);

// The mean of `value` over the ranks (itself with one rank).
double mean_over_ranks(double value);

}  // namespace mvgpt::dist
