#include "apps/flags/prepare.h"

#include "apps/common/app.h"

namespace mvgpt::apps {

std::unique_ptr<CLI::App> prepare_cli(PrepareArgs& a) {
  auto app = std::make_unique<CLI::App>(
      "Trains the byte-level BPE tokenizer on the training stories and encodes the training and\n"
      "held-out stories into llm.c token files (tokenizer.json, train.bin, valid.bin).",
      "prepare");
  app->add_option("--data-dir", a.data_dir,
                  "folder with train.txt and valid.txt (stories separated by <|endoftext|> lines); default "
                  "$MVGPT_DATA_DIR, else ../shared/data/tinystories from the repository root");
  app->add_option("--train", a.train_path, "training stories (default <data-dir>/train.txt)");
  app->add_option("--valid", a.valid_path, "held-out stories (default <data-dir>/valid.txt)");
  app->add_option("--out", a.out_dir, "output folder")->capture_default_str();
  app->add_option("--vocab-size", a.vocab_size, "tokens in the vocabulary: 256 bytes + merges + <|endoftext|>")
      ->capture_default_str()
      ->check(whole_between(257, 65536));
  app->add_option("--tokenizer", a.tokenizer_path, "use this tokenizer.json instead of training one");
  app->add_option("--tokenizer-mb", a.tokenizer_mb,
                  "train the tokenizer on the first N MB of the training stories (0: all of them)")
      ->capture_default_str()
      ->check(kNonNegative);
  app->final_callback([&a] {
    // Past what a size_t holds the limit is no limit (and the cast would be undefined).
    const double bytes = a.tokenizer_mb * 1e6;
    a.tokenizer_bytes = bytes < 1e18 ? size_t(bytes) : 0;
  });
  add_version_and_examples(*app,
      "  prepare                                   # ../shared/data/tinystories -> data/ (vocabulary 10000)\n"
      "  prepare --train ~/TinyStories/TinyStories-train.txt --valid ~/TinyStories/TinyStories-valid.txt --tokenizer-mb 50\n"
      "  prepare --train a.txt --valid b.txt --tokenizer data/tokenizer.json --out data-b\n");
  return app;
}

PrepareArgs parse_prepare_args(int argc, const char* const* argv) { return parse_with(prepare_cli, argc, argv); }

}  // namespace mvgpt::apps
