#include "apps/common/checkpoints.h"

#include <filesystem>

#include "apps/common/app.h"
#include <mvgpt/nn/lora.h>
#include <mvgpt/util/hash.h>

namespace mvgpt::apps {

namespace fs = std::filesystem;

std::string resolve_checkpoint(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw AppError("checkpoint " + dir + ": no such folder; pretrain writes them under checkpoints/");
  if (fs::exists(fs::path(dir) / "config.json", ec)) return dir;
  for (const char* sub : {"best", "last"})
    if (fs::exists(fs::path(dir) / sub / "config.json", ec)) return (fs::path(dir) / sub).string();
  throw AppError("checkpoint " + dir +
                 ": no config.json in it (nor in best/ or last/); pass a checkpoint folder such as checkpoints/pretrain");
}

std::string checkpoint_name(const std::string& given) {
  fs::path p = fs::path(given).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // trailing slash
  std::string name = p.filename().string();
  if ((name == "best" || name == "last") && !p.parent_path().filename().empty())
    name = p.parent_path().filename().string() + "/" + name;
  return name.empty() ? given : name;
}

gpt::LoadedCheckpoint load_model(const std::string& resolved_dir, Device device, const std::string& adapter) {
  gpt::LoadedCheckpoint loaded;
  try {
    loaded = gpt::load_checkpoint(resolved_dir, device);
  } catch (const std::exception& e) {
    // The loader names the folder and what does not fit; say what to do about it.
    throw AppError(std::string(e.what()) + " (the checkpoint is damaged or was edited: use another one, or pretrain again)");
  }
  if (adapter.empty()) return loaded;
  require_file(adapter, "adapter", "pass the adapter.safetensors a LoRA run saved (pretrain --lora-rank)");
  if (nn::lora_options(*loaded.model).rank > 0)
    throw AppError(resolved_dir + " has adapters of its own already; merge them first (merge --ckpt " + resolved_dir + ")");
  nn::Adapter file;
  try {
    file = nn::load_adapter(adapter);
  } catch (const std::exception& e) {  // the file itself: damaged, cut, or not an adapter
    throw AppError(std::string(e.what()) + " (the file is damaged or not an adapter: pass the adapter.safetensors a LoRA run saved)");
  }
  try {
    nn::apply_adapter(*loaded.model, file);
  } catch (const std::exception& e) {  // a whole adapter that does not fit this model
    throw AppError(adapter + ": " + e.what() + " (an adapter trained on another model?)");
  }
  // Shapes can fit a model of other weights (another run of the same shape): said, not refused, since
  // putting an adapter on a related base can be meant.
  if (!file.base_fingerprint.empty() && file.base_fingerprint != util::to_hex(nn::base_weights_fingerprint(*loaded.model)))
    warn_after_success(adapter + " was trained on other base weights than " + resolved_dir +
                       "'s: its results hold for the base it was trained on (pretrain --init-from in its run's state.json)");
  loaded.model->to(device);
  loaded.model->eval();
  return loaded;
}

void apply_position_flags(gpt::GPT& model, const std::string& rope_scaling, int64_t block_size,
                          const std::string& model_name) {
  auto learned = [&](const char* flag) {
    return AppError(std::string(flag) + ": " + model_name + " has a learned table of " +
                    std::to_string(model.config().block_size) + " positions; only a rotary model's positions can change");
  };
  if (!rope_scaling.empty()) {
    const gpt::RopeScaling s = gpt::RopeScaling::parse(rope_scaling);  // checked when parsing the flags
    if (!model.config().rope) {
      if (s.enabled()) throw learned("--rope-scaling");
    } else {
      model.set_rope_scaling(s);
    }
  }
  if (block_size > 0 && block_size != model.config().block_size) {
    if (!model.config().rope) throw learned("--block-size");
    model.set_block_size(block_size);
  }
}

void check_tokens_fit(const text::TokenFile& tokens, const gpt::GPTConfig& config, const std::string& model_name) {
  const int32_t max_id = tokens.max_token();
  if (max_id >= config.vocab_size)
    throw AppError(tokens.path() + " holds token id " + std::to_string(max_id) + " but " + model_name +
                   " has a vocabulary of " + std::to_string(config.vocab_size) +
                   "; encode the text with the model's own tokenizer (prepare --tokenizer <checkpoint>/tokenizer.json)");
}

std::string checkpoint_tokenizer(const std::string& resolved_dir) {
  fs::path p = fs::path(resolved_dir) / "tokenizer.json";
  std::error_code ec;
  return fs::is_regular_file(p, ec) ? p.string() : "";
}

void check_tokenizer_fits(const text::Tokenizer& tok, const std::string& tok_path, const gpt::GPTConfig& config,
                          const std::string& model_name) {
  if (int64_t(tok.vocab_size()) > config.vocab_size)
    throw AppError("tokenizer " + tok_path + " has " + std::to_string(tok.vocab_size()) + " tokens but " + model_name +
                   " has a vocabulary of " + std::to_string(config.vocab_size) +
                   "; use the tokenizer the model was trained with (--tokenizer <checkpoint>/tokenizer.json)");
}

bool same_tokenizer(const std::string& path_a, const std::string& path_b) {
  return text::Tokenizer::load(path_a) == text::Tokenizer::load(path_b);
}

void check_same_tokenizer(const std::string& token_file, const std::string& resolved_dir, const std::string& model_name) {
  const std::string mine = checkpoint_tokenizer(resolved_dir);
  const fs::path beside = fs::path(token_file).parent_path() / "tokenizer.json";
  std::error_code ec;
  if (mine.empty() || !fs::is_regular_file(beside, ec)) return;
  if (!same_tokenizer(beside.string(), mine))
    throw AppError(token_file + " was encoded with " + beside.string() + ", which is not the tokenizer " + model_name +
                   " was trained with (" + mine + "); re-encode the text with prepare --tokenizer " + mine +
                   " --out <another folder>");
}

}  // namespace mvgpt::apps
