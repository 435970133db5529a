#include "apps/flags/context.h"

#include "apps/common/app.h"

namespace mvgpt::apps {

std::unique_ptr<CLI::App> context_cli(ContextArgs& a) {
  auto app = std::make_unique<CLI::App>(
      "Loss and milliseconds per token past the context window: the whole window again for each\n"
      "token (window), the sliding KV cache (cache, RoPE only), all of the stream at once (full, RoPE only).",
      "context");
  app->add_option("--ckpt", a.ckpts, "checkpoint or run folder (repeat for several)")->required();
  app->add_option("--tokens", a.tokens_path, "llm.c token file of held-out text")->capture_default_str();
  app->add_option("--adapter", a.adapter, "a LoRA adapter file (pretrain --lora-rank) put on every --ckpt");
  app->add_option("--length", a.length, "tokens per stream (must exceed each model's window)")
      ->capture_default_str()
      ->check(kCount);
  app->add_option("--streams", a.streams, "streams, one after another from the start of the file")
      ->capture_default_str()
      ->check(kCount);
  add_position_flags(*app, a.rope_scaling, a.block_size);
  app->add_option("--methods", a.method_names, "only these methods (window, cache, full); default: all a model supports")
      ->delimiter(',')
      ->check(CLI::IsMember({"window", "cache", "full"}));
  app->add_option("--device", a.device_flag, "cpu, cuda[:N] or auto")->capture_default_str();
  add_precision_flag(*app, a.precision);
  app->add_option("--out-dir", a.out_dir, "folder for context_losses.csv and context_losses.png")->capture_default_str();
  app->add_flag("--json", a.as_json,
                "print only a JSON list of {model, method, loss, ms_per_token} on stdout (progress goes to stderr)");
  app->add_flag("--no-plot", a.no_plot, "skip the PNG");
  app->final_callback([&a] {
    check_device_flag(a.device_flag);
    // Saturates: a file never holds INT64_MAX tokens, so the run's "too few tokens" message still reads right.
    if (__builtin_mul_overflow(a.length, a.streams, &a.tokens_needed)) a.tokens_needed = std::numeric_limits<int64_t>::max();
  });
  add_version_and_examples(*app,
      "  context --ckpt checkpoints/pretrain --ckpt checkpoints/pretrain-rope\n"
      "  context --ckpt checkpoints/pretrain-rope --methods cache,full --length 1024 --streams 2 --json\n"
      "  context --ckpt checkpoints/pretrain-rope --rope-scaling ntk:4 --methods full --length 1024\n");
  return app;
}

ContextArgs parse_context_args(int argc, const char* const* argv) { return parse_with(context_cli, argc, argv); }

}  // namespace mvgpt::apps
