// import: a Hugging Face folder (gpt2, gpt_neox or llama computing our model, as export writes it)
// as an ordinary checkpoint, weights bit for bit, with its tokenizer in our format; or a llama2.c
// .bin (gpt/llama2c.h; its rotations pair neighbours) with its tokenizer.bin (text/tokenizer.h); or a
// GGUF file with the tokenizer in it (gpt/gguf.h).
#include <cstdio>
#include <filesystem>

#include "apps/common/app.h"
#include "apps/common/checkpoints.h"
#include "apps/flags/import.h"
#include "apps/common/run_folder.h"
#include <mvgpt/gpt/checkpoint.h>
#include <mvgpt/gpt/gguf.h>
#include <mvgpt/gpt/hf.h>
#include <mvgpt/gpt/llama2c.h>
#include <mvgpt/util/atomic_file.h>

namespace fs = std::filesystem;
using namespace mvgpt;
using namespace mvgpt::apps;

int main(int argc, char** argv) {
  ImportArgs args;
  const auto app = import_cli(args);
  return run_app(*app, argc, argv, [&] {
    check_new_output_folder(args.out_dir, "import", "checkpoints/from-hf");
    const bool llama2c = args.format == "llama2c";
    gpt::LoadedCheckpoint loaded;
    std::string tokenizer_json, tokenizer, gguf_summary;
    if (args.format == "gguf") {
      require_file(args.from, "GGUF model", "pass the .gguf file (export --format gguf writes one)");
      gpt::LoadedGguf file;
      try {
        file = gpt::load_gguf(args.from);
      } catch (const std::exception& e) {
        throw AppError(e.what());
      }
      loaded = std::move(file.checkpoint);
      gguf_summary = "GGUF " + file.architecture + ", " + loaded.metadata.at("gguf_type");
      if (!file.tokenizer_note.empty()) gguf_summary += "; its tokenizer was left out: " + file.tokenizer_note;
      if (file.tokenizer) {
        tokenizer = args.from;
        check_tokenizer_fits(*file.tokenizer, args.from, loaded.model->config(), args.from);
        tokenizer_json = file.tokenizer->to_json();
      }
    } else if (llama2c) {
      require_file(args.from, "llama2.c model", "pass the .bin that llama2.c's export.py wrote");
      try {
        loaded = gpt::load_llama2c(args.from);
      } catch (const std::exception& e) {
        throw AppError(e.what());
      }
      if (!args.tokenizer_path.empty()) {
        tokenizer = args.tokenizer_path;
        require_file(tokenizer, "tokenizer", "pass llama2.c's tokenizer.bin for this model");
        text::Tokenizer tok;
        try {
          tok = text::Tokenizer::load(tokenizer);
        } catch (const std::exception& e) {
          throw AppError(e.what());
        }
        if (tok.kind() != text::TokenizerKind::sentencepiece)
          throw AppError(tokenizer + " is a byte-level BPE tokenizer; a llama2.c model needs its tokenizer.bin");
        // run.c reads as many pieces as the model has ids: another count is another model's tokenizer.
        if (int64_t(tok.vocab_size()) != loaded.model->config().vocab_size)
          throw AppError(tokenizer + " has " + std::to_string(tok.vocab_size()) + " pieces but " + args.from +
                         " has a vocabulary of " + std::to_string(loaded.model->config().vocab_size) +
                         "; pass the tokenizer.bin the model was trained with");
        tokenizer_json = tok.to_json();
      }
    } else {
      const std::string config = (fs::path(args.from) / "config.json").string();
      require_file(config, "Hugging Face config", "pass the folder export or save_pretrained wrote");
      if (!gpt::hf::is_hf_config(util::read_file(config)))
        throw AppError(config + " has no \"model_type\": it is not a Hugging Face folder (an mvgpt checkpoint loads as it is)");
      try {
        loaded = gpt::load_checkpoint(args.from);
      } catch (const std::exception& e) {
        throw AppError(std::string(e.what()) + " (import reads the models export writes: see docs/checkpoints.md)");
      }
      tokenizer = checkpoint_tokenizer(args.from);
      if (!tokenizer.empty()) {
        const text::Tokenizer tok = text::Tokenizer::load(tokenizer);
        check_tokenizer_fits(tok, tokenizer, loaded.model->config(), args.from);
        tokenizer_json = tok.to_json();
      }
    }
    std::map<std::string, std::string> meta = {{"imported_from", args.from}};
    if (loaded.metadata.count("step")) meta["step"] = loaded.metadata.at("step");
    gpt::save_checkpoint(args.out_dir, *loaded.model, meta, [&](const std::string& tmp) {
      if (!tokenizer_json.empty()) util::write_file_atomic((fs::path(tmp) / "tokenizer.json").string(), tokenizer_json);
    });
    std::printf("wrote %s: %s parameters from %s (%s)%s\n", args.out_dir.c_str(),
                format_count(loaded.model->num_parameters()).c_str(), args.from.c_str(),
                llama2c                  ? ("llama2.c, " + loaded.metadata.at("llama2c_format")).c_str()
                : args.format == "gguf" ? gguf_summary.c_str()
                                         : gpt::hf::architecture(loaded.model->config()).c_str(),
                tokenizer.empty() ? (llama2c ? ", no tokenizer (pass --tokenizer tokenizer.bin to include it)" : ", no tokenizer")
                                  : ", with its tokenizer");
    return 0;
  });
}
