#pragma once
// Resource limits: a run that cannot fit in memory fails before it allocates anything, with how much
// it would need, instead of being killed (or swapping) halfway through its first step.
#include <cstdint>
#include <string>

#include <mvgpt/gpt/config.h>
#include <mvgpt/tensor/device.h>

namespace mvgpt::apps {

// Bytes a training run of `config` at `batch_size` sequences of block_size tokens needs, roughly:
// float32 weights, gradients and AdamW's two moments, plus the activations backward keeps (per
// layer and token ~20 * n_embd floats and the attention's rows, and the logits with their gradient).
struct TrainingMemory {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0;
  double total() const { return weights + gradients + optimizer + activations; }
};
TrainingMemory estimate_training_memory(const gpt::GPTConfig& config, int64_t batch_size);

// Memory the system can give us now: MemAvailable from /proc/meminfo, else free pages from sysconf;
// -1 when neither is known. MVGPT_AVAILABLE_MEMORY (bytes) overrides it, for tests.
double available_memory_bytes();

// What the GPU `device` has free now (cudaMemGetInfo: other processes' use counts), -1 when unknown.
double available_device_memory_bytes(Device device);

// The decision, apart from the machine: "" when `m` fits in `available` bytes of `device`'s memory
// (or available < 0, unknown), else the message saying what the run needs and what there is.
std::string training_memory_shortfall(const TrainingMemory& m, int64_t batch_size, int64_t block_size, double available,
                                      Device device);

// AppError with that message when the run does not fit: in the host's memory on the CPU, in the
// GPU's free memory with --device cuda (the weights pass through the host on their way, briefly).
void check_training_fits(const gpt::GPTConfig& config, int64_t batch_size, Device device);

// Running a model (evaluate, context, generate) over `tokens` positions at a time, `batch_size`
// sequences: float32 weights, the KV cache of those positions, one layer's activations with its
// attention rows, and the logits. AppError saying what it needs, what there is and that `flag`
// (--block-size, --length) should be smaller when that does not fit: a --block-size of 16M took a
// minute and 8 GB for three tokens of a tiny model, and would have taken 300 GB of the series' one.
void check_inference_fits(const gpt::GPTConfig& config, int64_t batch_size, int64_t tokens, Device device,
                          const std::string& model_name, const std::string& flag);

// "1.5 GiB", "300.0 MiB".
std::string format_bytes(double bytes);

}  // namespace mvgpt::apps
