#include "apps/flags/export.h"

#include "apps/common/app.h"

namespace mvgpt::apps {

std::unique_ptr<CLI::App> export_cli(ExportArgs& a) {
  auto app = std::make_unique<CLI::App>(
      "Writes a checkpoint as a Hugging Face folder that transformers loads (AutoModelForCausalLM.from_pretrained):\n"
      "learned positions as GPT2LMHeadModel, RoPE as GPTNeoXForCausalLM, the Llama style as LlamaForCausalLM, with the\n"
      "tokenizer as tokenizer.json; or (--format gguf) as one GGUF file that llama.cpp runs: gpt2, gptneox or llama, with\n"
      "the tokenizer in GGUF's own keys (docs/checkpoints.md).", "export");
  app->add_option("--ckpt", a.ckpt, "checkpoint or run folder")->required();
  app->add_option("--format", a.format, "hf (a folder) or gguf (one file)")->check(CLI::IsMember({"hf", "gguf"}))->capture_default_str();
  app->add_option("--out", a.out_dir, "hf: the new folder (must not exist yet, or be empty); gguf: the new .gguf file")->required();
  CLI::Option* outtype = app->add_option("--outtype", a.outtype, "gguf: the matrices' type (norms and biases stay f32)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0"}))->capture_default_str();
  app->add_option("--tokenizer", a.tokenizer_path, "tokenizer.json to include (default: the checkpoint's own)");
  add_version_and_examples(*app,
      "  export --ckpt checkpoints/pretrain-rope --format hf --out hf/pretrain-rope\n"
      "  python3 -c \"import transformers as t; t.AutoModelForCausalLM.from_pretrained('hf/pretrain-rope')\"\n"
      "  export --ckpt checkpoints/pretrain-rope --format gguf --outtype f16 --out pretrain-rope.gguf\n"
      "  llama-cli -m pretrain-rope.gguf -p 'Once upon a time' -n 100 --temp 0\n");
  app->final_callback([&a, outtype] {
    if (a.format != "gguf" && outtype->count() > 0)
      throw UsageError("--outtype is for --format gguf; a Hugging Face folder is float32");
  });
  return app;
}

ExportArgs parse_export_args(int argc, const char* const* argv) { return parse_with(export_cli, argc, argv); }

}  // namespace mvgpt::apps
