#include "apps/flags/export.h"

#include "apps/common/app.h"

namespace mvgpt::apps {

std::unique_ptr<CLI::App> export_cli(ExportArgs& a) {
  auto app = std::make_unique<CLI::App>(
      "Writes a checkpoint as a Hugging Face folder that transformers loads (AutoModelForCausalLM.from_pretrained):\n"
      "learned positions as GPT2LMHeadModel, RoPE as GPTNeoXForCausalLM, the Llama style as LlamaForCausalLM,\n"
      "with the tokenizer as tokenizer.json for PreTrainedTokenizerFast (docs/checkpoints.md).", "export");
  app->add_option("--ckpt", a.ckpt, "checkpoint or run folder")->required();
  app->add_option("--format", a.format, "the folder's format")->check(CLI::IsMember({"hf"}))->capture_default_str();
  app->add_option("--out", a.out_dir, "the new folder (must not exist yet, or be empty)")->required();
  app->add_option("--tokenizer", a.tokenizer_path, "tokenizer.json to include (default: the checkpoint's own)");
  add_version_and_examples(*app,
      "  export --ckpt checkpoints/pretrain-rope --format hf --out hf/pretrain-rope\n"
      "  python3 -c \"import transformers as t; t.AutoModelForCausalLM.from_pretrained('hf/pretrain-rope')\"\n");
  return app;
}

ExportArgs parse_export_args(int argc, const char* const* argv) { return parse_with(export_cli, argc, argv); }

}  // namespace mvgpt::apps
