#include "apps/flags/generate.h"

#include "apps/common/app.h"

namespace mvgpt::apps {

std::unique_ptr<CLI::App> generate_cli(GenerateArgs& a) {
  auto app = std::make_unique<CLI::App>("Generates text from a checkpoint, streaming it as it is produced.", "generate");
  app->add_option("--ckpt", a.ckpt, "checkpoint or run folder")->required();
  app->add_option("--adapter", a.adapter, "a LoRA adapter file (pretrain --lora-rank) put on the model");
  auto* prompt_opt = app->add_option("--prompt", a.prompt, "text to continue (empty: start a new story)");
  app->add_option("--prompt-file", a.prompt_file, "read the prompt from this file (- for standard input)")->excludes(prompt_opt);
  app->add_option("--max-new-tokens", a.max_new_tokens, "tokens to generate")->capture_default_str()->check(kCountOrZero);
  app->add_option("--temperature", a.temperature, "0: always the likeliest token")
      ->capture_default_str()
      ->check(kNonNegative);
  app->add_option("--top-k", a.top_k, "draw among the k likeliest tokens (0: all)")
      ->capture_default_str()
      ->check(kCountOrZero);
  app->add_option("--top-p", a.top_p, "draw among the likeliest tokens whose probability adds up to p (1: all)")
      ->capture_default_str()
      ->check(number_check(0, 1, true, false));
  app->add_option("--num-samples", a.num_samples, "samples to write, each its own draws (seed, seed + 1, ...), separated by a line of dashes")
      ->capture_default_str()
      ->check(kCount);
  app->add_option("--seed", a.seed, "seed of the draws")->capture_default_str();
  app->add_option("--tokenizer", a.tokenizer_path, "tokenizer.json (default: the checkpoint's, else data/tokenizer.json)");
  add_position_flags(*app, a.rope_scaling, a.block_size);
  app->add_option("--device", a.device_flag, "cpu, cuda[:N] or auto")->capture_default_str();
  add_precision_flag(*app, a.precision);
  app->add_flag("--no-cache", a.no_cache, "run the whole window again for each token");
  app->add_flag("--stop-at-end", a.stop_at_end, "stop at the end of the story (<|endoftext|>, or BOS with llama2.c's tokenizer, as run.c does)");
  app->final_callback([&a] { check_device_flag(a.device_flag); });
  add_version_and_examples(*app,
      "  generate --ckpt checkpoints/pretrain-rope --prompt \"Once upon a time\"\n"
      "  generate --ckpt checkpoints/pretrain-rope --max-new-tokens 1000 --temperature 0.7 --top-k 50\n"
      "  generate --ckpt checkpoints/pretrain-rope --top-p 0.9 --num-samples 3 --stop-at-end\n"
      "  generate --ckpt checkpoints/pretrain-rope --rope-scaling ntk:4 --block-size 1024 --max-new-tokens 1000\n"
      "  echo \"The dog\" | generate --ckpt checkpoints/pretrain-rope --prompt-file -\n");
  return app;
}

GenerateArgs parse_generate_args(int argc, const char* const* argv) { return parse_with(generate_cli, argc, argv); }

}  // namespace mvgpt::apps
