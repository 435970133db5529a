#include "apps/flags/merge.h"

#include "apps/common/app.h"

namespace mvgpt::apps {

std::unique_ptr<CLI::App> merge_cli(MergeArgs& a) {
  auto app = std::make_unique<CLI::App>(
      "Folds LoRA adapters into the weights (W += alpha / r B A) and writes an ordinary checkpoint.", "merge");
  app->add_option("--ckpt", a.ckpt, "checkpoint or run folder (a LoRA run's, or the base model with --adapter)")->required();
  app->add_option("--adapter", a.adapter, "a LoRA adapter file to put on the checkpoint first");
  app->add_option("--out", a.out_dir, "the new checkpoint folder (must not exist yet)")->required();
  add_version_and_examples(*app,
      "  merge --ckpt checkpoints/shakespeare-lora --out checkpoints/shakespeare-merged\n"
      "  merge --ckpt checkpoints/pretrain-rope --adapter checkpoints/shakespeare-lora/best/adapter.safetensors --out merged\n");
  return app;
}

MergeArgs parse_merge_args(int argc, const char* const* argv) { return parse_with(merge_cli, argc, argv); }

}  // namespace mvgpt::apps
