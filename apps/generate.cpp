// generate: writes a story from a prompt, printing each token as it is produced. With RoPE the KV
// cache slides past the context window (one token's work per token); with learned positions the
// whole last window runs again for each token once the story outgrows it.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "apps/common/app.h"
#include "apps/flags/generate.h"
#include "apps/common/checkpoints.h"
#include "apps/common/resources.h"
#include <mvgpt/gpt/generate.h>
#include <mvgpt/util/atomic_file.h>

namespace fs = std::filesystem;
using namespace mvgpt;
using namespace mvgpt::apps;

int main(int argc, char** argv) {
  GenerateArgs args;
  const auto app = generate_cli(args);
  return run_app(*app, argc, argv, [&] {
    const Device device = resolve_device(args.device_flag);
    const PrecisionChoice precision = choose_precision(args.precision, device);  // said in the stats line
    const PrecisionGuard guard(precision.precision);
    const std::string dir = resolve_checkpoint(args.ckpt);
    const std::string name = checkpoint_name(args.ckpt);
    if (args.tokenizer_path.empty()) args.tokenizer_path = checkpoint_tokenizer(dir);
    if (args.tokenizer_path.empty()) args.tokenizer_path = "data/tokenizer.json";
    require_file(args.tokenizer_path, "tokenizer", "pass --tokenizer FILE (the one the model was trained with)");
    text::Tokenizer tok = text::Tokenizer::load(args.tokenizer_path);
    auto loaded = load_model(dir, device, args.adapter);
    gpt::GPT& model = *loaded.model;
    model.eval();
    apply_position_flags(model, args.rope_scaling, args.block_size, name);
    check_inference_fits(model.config(), 1, model.config().block_size, device, name, "--block-size");
    check_tokenizer_fits(tok, args.tokenizer_path, model.config(), name);
    const std::string own = checkpoint_tokenizer(dir);
    if (!own.empty() && own != args.tokenizer_path && !same_tokenizer(own, args.tokenizer_path))
      throw AppError("tokenizer " + args.tokenizer_path + " is not the one " + name + " was trained with (" + own +
                     "); leave out --tokenizer to use it");

    if (!args.prompt_file.empty()) {
      // A prompt is read whole and encoded before the first token: bounded, so `< /dev/zero` or a
      // mistaken multi-gigabyte file fails at once instead of filling the memory.
      constexpr size_t kMaxPromptBytes = size_t(16) << 20;
      const std::string source = args.prompt_file == "-" ? "the prompt on standard input" : "prompt file " + args.prompt_file;
      if (args.prompt_file == "-") {
        char buf[65536];
        while (std::cin.read(buf, sizeof buf) || std::cin.gcount() > 0) {
          args.prompt.append(buf, size_t(std::cin.gcount()));
          if (args.prompt.size() > kMaxPromptBytes) break;
        }
        if (std::cin.bad()) throw AppError("cannot read the prompt from standard input");
      } else {
        require_file(args.prompt_file, "prompt file", "pass an existing file, or - for standard input");
        if (fs::file_size(args.prompt_file) > kMaxPromptBytes) args.prompt.resize(kMaxPromptBytes + 1);
        else args.prompt = util::read_file(args.prompt_file);
      }
      if (args.prompt.size() > kMaxPromptBytes)
        throw AppError(source + " is longer than 16 MiB, far past any model's context; pass the text to continue (its end)");
      while (!args.prompt.empty() && (args.prompt.back() == '\n' || args.prompt.back() == '\r')) args.prompt.pop_back();
    }
    const std::vector<text::TokenId> ids = tok.encode_prompt(args.prompt);  // after <|endoftext|>, or from BOS
    std::vector<int32_t> context(ids.begin(), ids.end());
    auto t0 = Clock::now();
    int64_t produced = 0;
    auto write = [&](std::string_view text) {
      // Stop at the first failed write (a full disk) instead of generating the rest into nothing.
      if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0)
        throw AppError(std::string("cannot write the story to standard output (") + std::strerror(errno) + ")");
    };
    for (int64_t sample = 0; sample < args.num_samples; ++sample) {
      if (sample > 0) write("---------------\n");  // nanoGPT's sample.py separator
      // A model may have more ids than its tokenizer (a --config vocab_size padded past it): those ids
      // were never trained on and have no text, so they are never drawn.
      const gpt::SampleOptions options{.temperature = args.temperature, .top_k = args.top_k, .top_p = args.top_p,
                                       .seed = args.seed + uint64_t(sample), .use_cache = !args.no_cache,
                                       .vocab_limit = int64_t(tok.vocab_size())};
      write(args.prompt);
      text::TokenId last = ids.back();
      gpt::generate(model, context, args.max_new_tokens, options, [&](int32_t id) {
        ++produced;
        if (args.stop_at_end && text::TokenId(id) == tok.eot_id()) return false;
        write(tok.decode_next(last, text::TokenId(id)));
        last = text::TokenId(id);
        return true;
      });
      write("\n");
    }
    const double s = seconds_since(t0);
    std::fflush(stdout);  // the text ends before the stats line, also when both go to one file
    std::fprintf(stderr, "%s: %lld tokens in %.2f s (%.2f ms/token, %s cache, %s positions; precision: %s)\n",
                 name.c_str(), (long long)produced, s, produced ? 1e3 * s / double(produced) : 0.0,
                 args.no_cache ? "no" : "with", model.config().rope ? "rotary" : "learned", precision.reason.c_str());
    return 0;
  });
}
