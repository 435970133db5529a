// evaluate: held-out loss, perplexity, top-1 accuracy and bits per byte of one or more checkpoints on
// a token file (consecutive windows of each model's context), as a table or, with --json, as a JSON
// list of {"model", "loss", "perplexity", "top1", "bits_per_byte", "tokens", "bytes"}.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/common/app.h"
#include "apps/flags/evaluate.h"
#include "apps/common/checkpoints.h"
#include "apps/common/evaluation.h"
#include "apps/common/resources.h"

using namespace mvgpt;
using namespace mvgpt::apps;

int main(int argc, char** argv) {
  EvaluateArgs args;
  const auto app = evaluate_cli(args);
  return run_app(*app, argc, argv, [&] {
    const Device device = resolve_device(args.device_flag);
    const PrecisionChoice precision = choose_precision(args.precision, device);
    const PrecisionGuard guard(precision.precision);
    const text::TokenFile tokens = open_held_out_tokens(args.tokens_path);
    // Check every checkpoint before measuring any, so a bad one fails fast.
    std::vector<std::string> dirs, names;
    for (const auto& c : args.ckpts) {
      dirs.push_back(resolve_checkpoint(c));
      names.push_back(checkpoint_name(c));
    }
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    if (!args.as_json) {
      std::printf("precision: %s\n", precision.reason.c_str());
      std::printf("%s: %s tokens\n", args.tokens_path.c_str(), format_count(int64_t(tokens.size())).c_str());
      std::printf("%-24s %8s %11s %7s %7s %11s\n", "model", "loss", "perplexity", "top-1", "bits/B", "tokens");
    }
    for (size_t i = 0; i < dirs.size(); ++i) {
      auto loaded = load_model(dirs[i], device, args.adapter);
      gpt::GPT& model = *loaded.model;
      model.eval();
      apply_position_flags(model, args.rope_scaling, args.block_size, names[i]);
      check_inference_fits(model.config(), args.batch_size, model.config().block_size, device, names[i], "--block-size or --batch-size");
      check_tokens_fit(tokens, model.config(), names[i]);
      check_same_tokenizer(args.tokens_path, dirs[i], names[i]);
      if (int64_t(tokens.size()) < model.config().block_size + 1)
        throw AppError(args.tokens_path + ": " + std::to_string(tokens.size()) + " tokens, too few for one window of " +
                       names[i] + " (" + std::to_string(model.config().block_size + 1) + ")");
      // Bits per byte need the text each token stands for: the model's own tokenizer.
      std::vector<int32_t> byte_lengths;
      if (const std::string own = checkpoint_tokenizer(dirs[i]); !own.empty())
        byte_lengths = token_byte_lengths(text::Tokenizer::load(own));
      EvalResult r = evaluate_windows(model, tokens, args.batch_size, args.max_windows, device,
                                      byte_lengths.empty() ? nullptr : &byte_lengths);
      require_finite(r.loss, names[i] + ": the loss on " + args.tokens_path,
                     "its weights" + std::string(args.adapter.empty() ? "" : " with " + args.adapter) +
                         " overflow in the forward pass; use another checkpoint" + (args.adapter.empty() ? "" : " or adapter"));
      const double bpb = r.bits_per_byte();
      out.push_back({{"model", names[i]}, {"loss", r.loss}, {"perplexity", r.perplexity()}, {"top1", r.top1},
                     {"bits_per_byte", std::isfinite(bpb) ? nlohmann::ordered_json(bpb) : nlohmann::ordered_json(nullptr)},
                     {"tokens", r.tokens}, {"bytes", r.bytes}});
      if (!args.as_json) {
        std::printf("%-24s %8.4f %11.3f %6.1f%% %7s %11s\n", names[i].c_str(), r.loss, r.perplexity(), 100 * r.top1,
                    std::isfinite(bpb) ? format("%.4f", bpb).c_str() : "-", format_count(r.tokens).c_str());
        std::fflush(stdout);
      }
    }
    if (args.as_json) {
      std::printf("%s\n", out.dump(2).c_str());
      std::fprintf(stderr, "precision: %s\n", precision.reason.c_str());  // stdout holds the JSON alone
    }
    return 0;
  });
}
