#include "apps/common/resources.h"

#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "apps/common/app.h"
#include <mvgpt/backends/cuda/cuda_backend.h>

namespace mvgpt::apps {

TrainingMemory estimate_training_memory(const gpt::GPTConfig& c, int64_t batch_size) {
  // Doubles throughout: an absurd config must give an absurd number, not an overflow.
  // num_parameters() counts exactly in int64; past ~1e15 parameters it could overflow, and a rough
  // count (12 C^2 per block plus the embeddings) is all the message needs.
  // hidden_size() multiplies n_embd in int64 (a fuzzed config.json overflowed it): past 2^40 take
  // the GELU rule in double, the larger of the two.
  const double C = double(c.n_embd);
  const double F = c.mlp_hidden > 0 || c.n_embd < (int64_t(1) << 40) ? double(c.hidden_size()) : 4 * C;
  const double rough = double(c.n_layer) * (4 * C * C + 3 * C * F) + 2 * (double(c.vocab_size) + double(c.block_size)) * C;
  const double params = rough < 1e15 ? double(c.num_parameters()) : rough;
  const double tokens = double(batch_size) * double(c.block_size);
  TrainingMemory m;
  m.weights = 4 * params;
  m.gradients = 4 * params;
  m.optimizer = 8 * params;  // AdamW's m and v
  const double per_layer_token = 20 * double(c.n_embd) + 2 * double(c.n_head) * double(c.block_size);
  m.activations = 4 * tokens * (double(c.n_layer) * per_layer_token + 3 * double(c.vocab_size));
  return m;
}

double available_memory_bytes() {
  if (const char* env = std::getenv("MVGPT_AVAILABLE_MEMORY")) return std::strtod(env, nullptr);
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    double kib = 0;
    if (fields >> kib) return kib * 1024;
  }
  const long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : -1;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) bytes /= 1024, ++u;
  if (u == 6 && bytes >= 1e4) return format("%.3g EiB", bytes);  // a fuzzed config's 1e40 bytes: no 23-digit number
  return u == 0 ? format("%.0f bytes", bytes) : format("%.1f %s", bytes, units[u]);
}

double available_device_memory_bytes(Device device) {
  if (!device.is_cuda()) return -1;
  try {
    return double(cuda::memory_info(device.index).free);
  } catch (const std::exception&) {  // no CUDA in this build, or the query failed: the run will say
    return -1;
  }
}

std::string training_memory_shortfall(const TrainingMemory& m, int64_t batch_size, int64_t block_size, double available,
                                      Device device) {
  if (available < 0 || m.total() <= available) return "";
  const bool gpu = device.is_cuda();
  const std::string there = gpu ? "free on " + device.str() : "available";
  return format("training this model needs about %s of %smemory (weights %s, gradients %s, AdamW state %s, "
                "activations %s for a batch of %lld x %lld), but %s is %s; choose a smaller "
                "--preset/--config or --batch-size",
                format_bytes(m.total()).c_str(), gpu ? "GPU " : "", format_bytes(m.weights).c_str(),
                format_bytes(m.gradients).c_str(), format_bytes(m.optimizer).c_str(), format_bytes(m.activations).c_str(),
                (long long)batch_size, (long long)block_size, format_bytes(available).c_str(),
                there.c_str());
}

void check_training_fits(const gpt::GPTConfig& config, int64_t batch_size, Device device) {
  const double available = device.is_cuda() ? available_device_memory_bytes(device) : available_memory_bytes();
  const std::string shortfall =
      training_memory_shortfall(estimate_training_memory(config, batch_size), batch_size, config.block_size, available, device);
  if (!shortfall.empty()) throw AppError(shortfall);
}

void check_inference_fits(const gpt::GPTConfig& c, int64_t batch_size, int64_t tokens, Device device,
                          const std::string& model_name, const std::string& flag) {
  const double weights = estimate_training_memory(c, 1).weights;  // doubles: no overflow for any size
  const double rows = double(batch_size) * double(tokens);
  const double cache = 4 * rows * double(c.n_layer) * 2 * double(c.kv_heads()) * double(c.head_dim());
  const double activations = 4 * rows * (20 * double(c.n_embd) + double(c.n_head) * double(tokens) + 2 * double(c.vocab_size));
  const double needed = weights + cache + activations;
  const double available = device.is_cuda() ? available_device_memory_bytes(device) : available_memory_bytes();
  if (available < 0 || needed <= available) return;
  throw AppError(format("running %s over %lld positions (batch %lld) needs about %s of %smemory (weights %s, KV cache %s, "
                        "activations %s), but %s is %s; use a smaller %s",
                        model_name.c_str(), (long long)tokens, (long long)batch_size, format_bytes(needed).c_str(),
                        device.is_cuda() ? "GPU " : "", format_bytes(weights).c_str(), format_bytes(cache).c_str(),
                        format_bytes(activations).c_str(), format_bytes(available).c_str(),
                        device.is_cuda() ? ("free on " + device.str()).c_str() : "available", flag.c_str()));
}

}  // namespace mvgpt::apps
