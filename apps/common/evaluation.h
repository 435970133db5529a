#pragma once
// Held-out loss, perplexity and top-1 accuracy of a model on consecutive windows of a token file
// (what pretrain measures at intervals and evaluate reports).
#include <cstdint>
#include <string>

#include "mvgpt/model.h"
#include "mvgpt/token_file.h"

namespace mvgpt::apps {

struct EvalResult {
  double loss = 0;  // mean cross-entropy per predicted token (nats)
  double top1 = 0;  // fraction of tokens whose likeliest prediction is the target
  int64_t tokens = 0;
  double perplexity() const;
};

// Consecutive windows of block_size + 1 tokens from the start of the file (all of them when
// max_windows < 0), batch_size at a time, without gradients. Sums are kept in double, so the result
// does not depend on the batch size beyond float rounding of the logits.
EvalResult evaluate_windows(const gpt::GPT& model, const text::TokenFile& tokens, int64_t batch_size,
                            int64_t max_windows, Device device);

// The held-out token file given by --tokens; an AppError naming it, with prepare's hint, when it
// is missing.
text::TokenFile open_held_out_tokens(const std::string& path);

// A scalar tensor's value on the host.
double host_scalar(const Tensor& t);

}  // namespace mvgpt::apps
