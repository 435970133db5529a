// Resource limits (apps/common/resources.h): the estimate of what a training run needs, and the
// decision against the memory there is, host or GPU, with made-up numbers (no GPU needed).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "apps/common/resources.h"
#include <mvgpt/backends/backend.h>

namespace mvgpt::apps {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

TrainingMemory made_up() {
  TrainingMemory m;
  m.weights = 1 * kGiB;
  m.gradients = 1 * kGiB;
  m.optimizer = 2 * kGiB;
  m.activations = 4 * kGiB;
  return m;
}

TEST(ResourceLimits, ARunThatDoesNotFitInTheHostSaysWhatItNeedsAndWhatThereIs) {
  EXPECT_EQ(training_memory_shortfall(made_up(), 16, 256, 4 * kGiB, Device::cpu()),
            "training this model needs about 8.0 GiB of memory (weights 1.0 GiB, gradients 1.0 GiB, AdamW state 2.0 GiB, "
            "activations 4.0 GiB for a batch of 16 x 256), but 4.0 GiB is available; choose a smaller --preset/--config "
            "or --batch-size");
}

TEST(ResourceLimits, OnAGpuItIsTheGpusFreeMemoryThatCounts) {
  EXPECT_EQ(training_memory_shortfall(made_up(), 64, 1024, 7.5 * kGiB, Device::cuda(1)),
            "training this model needs about 8.0 GiB of GPU memory (weights 1.0 GiB, gradients 1.0 GiB, AdamW state "
            "2.0 GiB, activations 4.0 GiB for a batch of 64 x 1024), but 7.5 GiB is free on cuda:1; choose a smaller "
            "--preset/--config or --batch-size");
}

TEST(ResourceLimits, ARunThatFitsOrMemoryThatIsUnknownPasses) {
  for (Device d : {Device::cpu(), Device::cuda(0)}) {
    EXPECT_EQ(training_memory_shortfall(made_up(), 16, 256, 8 * kGiB, d), "");    // exactly enough
    EXPECT_EQ(training_memory_shortfall(made_up(), 16, 256, 140 * kGiB, d), "");  // an H200's worth
    EXPECT_EQ(training_memory_shortfall(made_up(), 16, 256, -1, d), "");          // not measured
    EXPECT_NE(training_memory_shortfall(made_up(), 16, 256, 8 * kGiB - 1, d), "");
  }
}

TEST(ResourceLimits, DeviceMemoryIsUnknownOffTheGpu) {
  EXPECT_EQ(available_device_memory_bytes(Device::cpu()), -1);
  if (!cuda_available()) {
    EXPECT_EQ(available_device_memory_bytes(Device::cuda(0)), -1);
  } else {
    EXPECT_GT(available_device_memory_bytes(Device::cuda(0)), 0);
  }
}

TEST(ResourceLimits, TheEstimateCountsSixteenBytesAParameterAndActivationsPerToken) {
  gpt::GPTConfig c;  // the series' model
  c.vocab_size = 10000;
  const double params = double(c.num_parameters());
  const TrainingMemory one = estimate_training_memory(c, 1), sixteen = estimate_training_memory(c, 16);
  EXPECT_EQ(one.weights, 4 * params);
  EXPECT_EQ(one.gradients, 4 * params);
  EXPECT_EQ(one.optimizer, 8 * params);  // AdamW's two moments
  EXPECT_EQ(sixteen.weights, one.weights);
  EXPECT_DOUBLE_EQ(sixteen.activations, 16 * one.activations);  // linear in the batch
  // An absurd config gives an absurd number, not an overflow.
  c.n_embd = 1 << 20;
  c.n_layer = 1 << 20;
  const double absurd = estimate_training_memory(c, 1 << 30).total();
  EXPECT_TRUE(std::isfinite(absurd));
  EXPECT_GT(absurd, 1e20);
  // fuzz_config's crasher (tests/fixtures/fuzz/config/crash-74bd805d4141): a width whose 4 x overflows
  // int64 in hidden_size(), and a context near INT64_MAX. validate() refuses it now; the estimate
  // does not overflow either way.
  gpt::GPTConfig wide;
  wide.vocab_size = 67;
  wide.block_size = 16;
  wide.n_embd = 5555555555555511048;
  EXPECT_THROW(wide.validate(), std::invalid_argument);
  EXPECT_GT(estimate_training_memory(wide, 16).weights, 1e36);
  EXPECT_EQ(format_bytes(estimate_training_memory(wide, 16).weights), "1.03e+22 EiB");
  wide.block_size = std::numeric_limits<int64_t>::max();
  EXPECT_TRUE(std::isfinite(estimate_training_memory(wide, 16).total()));
}

}  // namespace
}  // namespace mvgpt::apps
