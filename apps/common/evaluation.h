#pragma once
// Held-out loss, perplexity and top-1 accuracy of a model on consecutive windows of a token file
// (what pretrain measures at intervals and evaluate reports).
#include <cstdint>
#include <string>
#include <vector>

#include <mvgpt/nn/causal_lm.h>
#include <mvgpt/text/token_file.h>
#include <mvgpt/text/tokenizer.h>

namespace mvgpt::apps {

struct EvalResult {
  double loss = 0;  // mean cross-entropy per predicted token (nats)
  double top1 = 0;  // fraction of tokens whose likeliest prediction is the target
  int64_t tokens = 0;
  int64_t bytes = 0;  // text bytes the predicted tokens stand for (0: no tokenizer given)
  double perplexity() const;
  // The loss per byte of text in bits: comparable across tokenizers (NaN without bytes).
  double bits_per_byte() const;
};

// Each token's length in bytes of text, for bits per byte. The end-of-text token stands for no
// text (it replaces the separator line between stories) and counts 0.
std::vector<int32_t> token_byte_lengths(const text::Tokenizer& tok);

// Consecutive windows of block_size + 1 tokens from the start of the file (all of them when
// max_windows < 0), batch_size at a time, without gradients. Sums are kept in double, so the result
// does not depend on the batch size beyond float rounding of the logits.
// With `byte_lengths` (token_byte_lengths of the model's tokenizer), bytes and bits per byte too.
EvalResult evaluate_windows(const nn::CausalLM& model, const text::TokenFile& tokens, int64_t batch_size,
                            int64_t max_windows, Device device, const std::vector<int32_t>* byte_lengths = nullptr);

// The held-out token file given by --tokens; an AppError naming it, with prepare's hint, when it
// is missing.
text::TokenFile open_held_out_tokens(const std::string& path);

// A scalar tensor's value on the host.
double host_scalar(const Tensor& t);

}  // namespace mvgpt::apps
