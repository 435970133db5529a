// export: a checkpoint as a Hugging Face folder that transformers loads
// (AutoModelForCausalLM.from_pretrained) and PreTrainedTokenizerFast reads (NOTE [ Hugging Face
// folders ] in mvgpt/gpt/hf.h), or as a GGUF file that llama.cpp runs (NOTE [ GGUF models ] in
// mvgpt/gpt/gguf.h). import reads either back, bit for bit (GGUF: in F32).
#include <cstdio>
#include <optional>

#include "apps/common/app.h"
#include "apps/common/checkpoints.h"
#include "apps/flags/export.h"
#include "apps/common/run_folder.h"
#include <mvgpt/gpt/gguf.h>
#include <mvgpt/gpt/hf.h>

using namespace mvgpt;
using namespace mvgpt::apps;

int main(int argc, char** argv) {
  ExportArgs args;
  const auto app = export_cli(args);
  return run_app(*app, argc, argv, [&] {
    const bool to_gguf = args.format == "gguf";
    if (to_gguf) check_new_output_file(args.out_dir, ".gguf", "export --format gguf", "my-model.gguf");
    else check_new_output_folder(args.out_dir, "export", "hf/my-model");
    const std::string dir = resolve_checkpoint(args.ckpt);
    auto loaded = load_model(dir, Device::cpu());
    if (args.tokenizer_path.empty()) args.tokenizer_path = checkpoint_tokenizer(dir);
    std::optional<text::Tokenizer> tok;
    if (!args.tokenizer_path.empty()) {
      require_file(args.tokenizer_path, "tokenizer", "pass --tokenizer FILE (the one the model was trained with)");
      tok = text::Tokenizer::load(args.tokenizer_path);
      check_tokenizer_fits(*tok, args.tokenizer_path, loaded.model->config(), checkpoint_name(args.ckpt));
    }
    std::map<std::string, std::string> meta = {{"exported_from", dir}};
    if (loaded.metadata.count("step")) meta["step"] = loaded.metadata.at("step");
    if (to_gguf) {
      if (!tok)
        throw AppError(dir + " has no tokenizer.json, and llama.cpp runs no model without one: pass --tokenizer FILE "
                       "(the one the model was trained with)");
      const auto type = *gguf::parse_tensor_type(args.outtype);
      try {
        gpt::save_gguf(args.out_dir, *loaded.model, *tok, type, meta);
      } catch (const std::invalid_argument& e) {
        throw AppError(dir + ": " + e.what());
      } catch (const std::runtime_error& e) {
        throw AppError(e.what());
      }
      std::printf("wrote %s: llama.cpp's %s, %s (%s parameters), %s tokenizer from %s\n", args.out_dir.c_str(),
                  gpt::gguf_architecture(loaded.model->config()).c_str(), gguf::tensor_type_name(type).c_str(),
                  format_count(loaded.model->num_parameters()).c_str(),
                  tok->kind() == text::TokenizerKind::sentencepiece ? "SentencePiece" : "byte-level BPE",
                  args.tokenizer_path.c_str());
      return 0;
    }
    std::string no_tokenizer = ", no tokenizer (pass --tokenizer FILE to add one)";
    if (tok && tok->kind() == text::TokenizerKind::sentencepiece) {
      // Said on the result line; the model itself goes out.
      no_tokenizer = ", no tokenizer.json: " + args.tokenizer_path +
                     " is llama2.c's SentencePiece tokenizer, which mvgpt does not write for transformers yet "
                     "(load its tokenizer.model with LlamaTokenizer)";
      tok.reset();
    }
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
