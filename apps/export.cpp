// export: a checkpoint as a Hugging Face folder that transformers loads
// (AutoModelForCausalLM.from_pretrained) and PreTrainedTokenizerFast reads: NOTE [ Hugging Face
// folders ] in mvgpt/gpt/hf.h. import reads such a folder back, bit for bit.
#include <cstdio>
#include <optional>

#include "apps/common/app.h"
#include "apps/common/checkpoints.h"
#include "apps/flags/export.h"
#include "apps/common/run_folder.h"
#include <mvgpt/gpt/hf.h>

using namespace mvgpt;
using namespace mvgpt::apps;

int main(int argc, char** argv) {
  ExportArgs args;
  const auto app = export_cli(args);
  return run_app(*app, argc, argv, [&] {
    check_new_output_folder(args.out_dir, "export", "hf/my-model");
    const std::string dir = resolve_checkpoint(args.ckpt);
    auto loaded = load_model(dir, Device::cpu());
    if (args.tokenizer_path.empty()) args.tokenizer_path = checkpoint_tokenizer(dir);
    std::optional<text::Tokenizer> tok;
    if (!args.tokenizer_path.empty()) {
      require_file(args.tokenizer_path, "tokenizer", "pass --tokenizer FILE (the one the model was trained with)");
      tok = text::Tokenizer::load(args.tokenizer_path);
      check_tokenizer_fits(*tok, args.tokenizer_path, loaded.model->config(), checkpoint_name(args.ckpt));
    }
    std::string no_tokenizer = ", no tokenizer (pass --tokenizer FILE to add one)";
    if (tok && tok->kind() == text::TokenizerKind::sentencepiece) {
      // Said on the result line; the model itself goes out.
      no_tokenizer = ", no tokenizer.json: " + args.tokenizer_path +
                     " is llama2.c's SentencePiece tokenizer, which mvgpt does not write for transformers yet "
                     "(load its tokenizer.model with LlamaTokenizer)";
      tok.reset();
    }
    std::map<std::string, std::string> meta = {{"exported_from", dir}};
    if (loaded.metadata.count("step")) meta["step"] = loaded.metadata.at("step");
    try {
      gpt::hf::save_hf(args.out_dir, *loaded.model, tok ? &*tok : nullptr, meta);
    } catch (const std::invalid_argument& e) {
      throw AppError(dir + ": " + e.what());
    }
    std::printf("wrote %s: %s (%s parameters)%s\n", args.out_dir.c_str(), gpt::hf::architecture(loaded.model->config()).c_str(),
                format_count(loaded.model->num_parameters()).c_str(),
                tok ? (", tokenizer.json from " + args.tokenizer_path).c_str() : no_tokenizer.c_str());
    return 0;
  });
}
