// generate: writes a story from a prompt, printing each token as it is produced. With RoPE the KV
// cache slides past the context window (one token's work per token); with learned positions the
// whole last window runs again for each token once the story outgrows it.
#include <cstdio>
#include <string>
#include <vector>

#include "apps/common/app.h"
#include "apps/common/checkpoints.h"
#include "mvgpt/generate.h"

using namespace mvgpt;
using namespace mvgpt::apps;

int main(int argc, char** argv) {
  CLI::App app{"Generates text from a checkpoint, streaming it as it is produced.", "generate"};
  std::string ckpt, prompt, tokenizer_path, device_flag = "auto";
  int64_t max_new_tokens = 200;
  gpt::SampleOptions options;
  options.temperature = 0.8;
  options.top_k = 200;
  options.seed = 1337;
  bool no_cache = false, stop_at_end = false;
  app.add_option("--ckpt", ckpt, "checkpoint or run folder")->required();
  app.add_option("--prompt", prompt, "text to continue (empty: start a new story)");
  app.add_option("--max-new-tokens", max_new_tokens, "tokens to generate")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--temperature", options.temperature, "0: always the likeliest token")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--top-k", options.top_k, "draw among the k likeliest tokens (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", options.seed, "seed of the draws")->capture_default_str();
  app.add_option("--tokenizer", tokenizer_path, "tokenizer.json (default: the checkpoint's, else data/tokenizer.json)");
  app.add_option("--device", device_flag, "cpu, cuda[:N] or auto")->capture_default_str();
  app.add_flag("--no-cache", no_cache, "run the whole window again for each token");
  app.add_flag("--stop-at-end", stop_at_end, "stop at the end of the story (<|endoftext|>)");

  return run_app(app, argc, argv, [&] {
    const Device device = resolve_device(device_flag);
    const std::string dir = resolve_checkpoint(ckpt);
    const std::string name = checkpoint_name(ckpt);
    if (tokenizer_path.empty()) tokenizer_path = checkpoint_tokenizer(dir);
    if (tokenizer_path.empty()) tokenizer_path = "data/tokenizer.json";
    require_file(tokenizer_path, "tokenizer", "pass --tokenizer FILE (the one the model was trained with)");
    text::Tokenizer tok = text::Tokenizer::load(tokenizer_path);
    auto loaded = load_model(dir, device);
    gpt::GPT& model = *loaded.model;
    model.eval();
    check_tokenizer_fits(tok, tokenizer_path, model.config(), name);
    const std::string own = checkpoint_tokenizer(dir);
    if (!own.empty() && own != tokenizer_path && !same_tokenizer(own, tokenizer_path))
      throw AppError("tokenizer " + tokenizer_path + " is not the one " + name + " was trained with (" + own +
                     "); leave out --tokenizer to use it");

    std::vector<text::TokenId> ids = tok.encode(prompt);
    if (ids.empty()) ids.push_back(tok.eot_id());  // a new story starts after an end of text
    std::vector<int32_t> context(ids.begin(), ids.end());
    options.use_cache = !no_cache;

    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    std::fflush(stdout);
    auto t0 = Clock::now();
    int64_t produced = 0;
    gpt::generate(model, context, max_new_tokens, options, [&](int32_t id) {
      ++produced;
      if (stop_at_end && text::TokenId(id) == tok.eot_id()) return false;
      const std::string& bytes = tok.token_bytes(text::TokenId(id));
      std::fwrite(bytes.data(), 1, bytes.size(), stdout);
      std::fflush(stdout);
      return true;
    });
    const double s = seconds_since(t0);
    std::printf("\n");
    std::fprintf(stderr, "%s: %lld tokens in %.2f s (%.2f ms/token, %s cache, %s positions)\n", name.c_str(),
                 (long long)produced, s, produced ? 1e3 * s / double(produced) : 0.0, no_cache ? "no" : "with",
                 model.config().rope ? "rotary" : "learned");
    return 0;
  });
}
