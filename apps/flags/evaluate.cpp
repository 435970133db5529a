#include "apps/flags/evaluate.h"

#include "apps/common/app.h"

namespace mvgpt::apps {

std::unique_ptr<CLI::App> evaluate_cli(EvaluateArgs& a) {
  auto app = std::make_unique<CLI::App>("Held-out loss, perplexity and top-1 accuracy of checkpoints on a token file.", "evaluate");
  app->add_option("--ckpt", a.ckpts, "checkpoint or run folder (repeat for several)")->required();
  app->add_option("--tokens", a.tokens_path, "llm.c token file")->capture_default_str();
  app->add_option("--adapter", a.adapter, "a LoRA adapter file (pretrain --lora-rank) put on every --ckpt");
  app->add_option("--batch-size", a.batch_size, "windows per forward pass")->capture_default_str()->check(kCount);
  add_position_flags(*app, a.rope_scaling, a.block_size);
  app->add_option("--max-windows", a.max_windows, "measure at most this many windows (default: the whole file)")
      ->check(kCount);
  app->add_option("--device", a.device_flag, "cpu, cuda[:N] or auto")->capture_default_str();
  add_precision_flag(*app, a.precision);
  app->add_flag("--json", a.as_json, "print only a JSON list of {model, loss, perplexity, top1}");
  app->final_callback([&a] { check_device_flag(a.device_flag); });
  add_version_and_examples(*app,
      "  evaluate --ckpt checkpoints/pretrain --ckpt checkpoints/pretrain-rope\n"
      "  evaluate --ckpt checkpoints/pretrain-rope/last --max-windows 64 --json\n");
  return app;
}

EvaluateArgs parse_evaluate_args(int argc, const char* const* argv) { return parse_with(evaluate_cli, argc, argv); }

}  // namespace mvgpt::apps
