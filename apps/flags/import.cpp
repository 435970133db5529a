#include "apps/flags/import.h"

#include "apps/common/app.h"

namespace mvgpt::apps {

std::unique_ptr<CLI::App> import_cli(ImportArgs& a) {
  auto app = std::make_unique<CLI::App>(
      "Reads another ecosystem's model into a checkpoint: a Hugging Face folder (gpt2, gpt_neox or llama that computes\n"
      "our model, such as export writes; weights bit for bit; evaluate, context and generate also load one directly), or\n"
      "a llama2.c .bin (legacy or export.py --version 1) with its tokenizer.bin, or a GGUF file (gpt2, gptneox or llama\n"
      "as export --format gguf writes them; F32 files bit for bit) with the tokenizer it holds.", "import");
  app->add_option("--from", a.from, "the Hugging Face folder, the llama2.c .bin file or the .gguf file")->required();
  app->add_option("--format", a.format, "hf, llama2c or gguf")->check(CLI::IsMember({"hf", "llama2c", "gguf"}))->capture_default_str();
  app->add_option("--out", a.out_dir, "the new checkpoint folder (must not exist yet, or be empty)")->required();
  app->add_option("--tokenizer", a.tokenizer_path,
                  "llama2c: the model's tokenizer.bin, saved with the checkpoint as tokenizer.json");
  add_version_and_examples(*app,
      "  import --from hf/pretrain-rope --out checkpoints/from-hf\n"
      "  import --format llama2c --from stories15M.bin --tokenizer tokenizer.bin --out checkpoints/stories15M\n"
      "  import --format gguf --from pretrain-rope.gguf --out checkpoints/from-gguf\n");
  app->final_callback([&a] {
    if (!a.tokenizer_path.empty() && a.format != "llama2c")
      throw UsageError("--tokenizer is for --format llama2c; a Hugging Face folder or a GGUF file brings its own tokenizer");
  });
  return app;
}

ImportArgs parse_import_args(int argc, const char* const* argv) { return parse_with(import_cli, argc, argv); }

}  // namespace mvgpt::apps
