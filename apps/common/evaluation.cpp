#include "apps/common/evaluation.h"

#include <cmath>
#include <numbers>
#include <filesystem>

#include "apps/common/app.h"
#include "apps/common/data_folder.h"
#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/fused/cross_entropy.h>
#include <mvgpt/gpt/batches.h>

namespace mvgpt::apps {

double EvalResult::perplexity() const { return std::exp(loss); }

double EvalResult::bits_per_byte() const {
  return bytes > 0 ? loss * double(tokens) / (double(bytes) * std::numbers::ln2) : NAN;
}

std::vector<int32_t> token_byte_lengths(const text::Tokenizer& tok) {
  std::vector<int32_t> lengths(tok.vocab_size());
  for (size_t id = 0; id < lengths.size(); ++id) lengths[id] = int32_t(tok.token_bytes(text::TokenId(id)).size());
  lengths[tok.eot_id()] = 0;
  return lengths;
}

double host_scalar(const Tensor& t) { return mvgpt::to(t.detach(), Device::cpu()).item<double>(); }

EvalResult evaluate_windows(const nn::CausalLM& model, const text::TokenFile& tokens, int64_t batch_size,
                            int64_t max_windows, Device device, const std::vector<int32_t>* byte_lengths) {
  NoGradGuard no_grad;
  gpt::SequentialBatches batches(tokens, batch_size, model.block_size(), max_windows);
  double loss_sum = 0;
  int64_t correct = 0, count = 0, bytes = 0;
  for (int64_t i = 0; i < batches.size(); ++i) {
    gpt::Batch b = batches.at(i);
    Tensor logits = model.forward(mvgpt::to(b.inputs, device));  // (B, T, V)
    Tensor flat = reshape(logits, {-1, model.vocab_size()});
    Tensor targets = reshape(mvgpt::to(b.targets, device), {-1});
    Tensor losses = mvgpt::to(mvgpt::contiguous(cross_entropy(flat, targets, -100, Reduction::none)), Device::cpu());
    Tensor best = mvgpt::to(mvgpt::contiguous(mvgpt::argmax(flat, -1)), Device::cpu());  // (B*T) int64
    const float* l = losses.data<float>();
    const int64_t* p = best.data<int64_t>();
    const int32_t* y = b.targets.data<int32_t>();
    const int64_t n = losses.numel();
    for (int64_t j = 0; j < n; ++j) {
      loss_sum += double(l[j]);
      correct += p[j] == int64_t(y[j]);
      if (byte_lengths && y[j] >= 0 && size_t(y[j]) < byte_lengths->size()) bytes += (*byte_lengths)[size_t(y[j])];
    }
    count += n;
  }
  EvalResult r;
  r.tokens = count;
  r.bytes = bytes;
  r.loss = count ? loss_sum / double(count) : 0;
  r.top1 = count ? double(correct) / double(count) : 0;
  return r;
}

text::TokenFile open_held_out_tokens(const std::string& path) {
  require_file(path, "token file", "run prepare first, or pass --tokens FILE");
  verify_prepared_file(path);
  verify_prepared_file((std::filesystem::path(path).parent_path() / "tokenizer.json").string());
  return text::TokenFile(path);
}

}  // namespace mvgpt::apps
