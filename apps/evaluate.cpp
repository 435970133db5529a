// evaluate: held-out loss, perplexity and top-1 accuracy of one or more checkpoints on a token file
// (consecutive windows of each model's context), as a table or, with --json, as a JSON list of
// {"model", "loss", "perplexity", "top1"}.
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/common/app.h"
#include "apps/common/checkpoints.h"
#include "apps/common/evaluation.h"

using namespace mvgpt;
using namespace mvgpt::apps;

int main(int argc, char** argv) {
  CLI::App app{"Held-out loss, perplexity and top-1 accuracy of checkpoints on a token file.", "evaluate"};
  std::vector<std::string> ckpts;
  std::string tokens_path = "data/valid.bin", device_flag = "auto";
  int64_t batch_size = 8, max_windows = -1;
  bool as_json = false;
  app.add_option("--ckpt", ckpts, "checkpoint or run folder (repeat for several)")->required();
  app.add_option("--tokens", tokens_path, "llm.c token file")->capture_default_str();
  app.add_option("--batch-size", batch_size, "windows per forward pass")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--max-windows", max_windows, "measure at most this many windows (default: the whole file)")
      ->check(CLI::PositiveNumber);
  app.add_option("--device", device_flag, "cpu, cuda[:N] or auto")->capture_default_str();
  app.add_flag("--json", as_json, "print only a JSON list of {model, loss, perplexity, top1}");

  return run_app(app, argc, argv, [&] {
    const Device device = resolve_device(device_flag);
    require_file(tokens_path, "token file", "run prepare first, or pass --tokens FILE");
    text::TokenFile tokens(tokens_path);
    // Check every checkpoint before measuring any, so a bad one fails fast.
    std::vector<std::string> dirs, names;
    for (const auto& c : ckpts) {
      dirs.push_back(resolve_checkpoint(c));
      names.push_back(checkpoint_name(c));
    }
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    if (!as_json) {
      std::printf("%s: %s tokens\n", tokens_path.c_str(), format_count(int64_t(tokens.size())).c_str());
      std::printf("%-24s %8s %11s %7s %11s\n", "model", "loss", "perplexity", "top-1", "tokens");
    }
    for (size_t i = 0; i < dirs.size(); ++i) {
      auto loaded = load_model(dirs[i], device);
      gpt::GPT& model = *loaded.model;
      model.eval();
      check_tokens_fit(tokens, model.config(), names[i]);
      check_same_tokenizer(tokens_path, dirs[i], names[i]);
      if (int64_t(tokens.size()) < model.config().block_size + 1)
        throw AppError(tokens_path + ": " + std::to_string(tokens.size()) + " tokens, too few for one window of " +
                       names[i] + " (" + std::to_string(model.config().block_size + 1) + ")");
      EvalResult r = evaluate_windows(model, tokens, batch_size, max_windows, device);
      out.push_back({{"model", names[i]}, {"loss", r.loss}, {"perplexity", r.perplexity()}, {"top1", r.top1}});
      if (!as_json) {
        std::printf("%-24s %8.4f %11.3f %6.1f%% %11s\n", names[i].c_str(), r.loss, r.perplexity(), 100 * r.top1,
                    format_count(r.tokens).c_str());
        std::fflush(stdout);
      }
    }
    if (as_json) std::printf("%s\n", out.dump(2).c_str());
    return 0;
  });
}
