#pragma once
// Finding, naming and loading the checkpoints users point the apps at, and the checks that a model,
// a token file and a tokenizer belong together (each failure says what to do).
#include <string>

#include <mvgpt/gpt/checkpoint.h>
#include <mvgpt/text/token_file.h>
#include <mvgpt/text/tokenizer.h>

namespace mvgpt::apps {

// A checkpoint folder holds config.json. A pretraining run folder (checkpoints/pretrain) holds
// best/ and last/: it stands for best/ (or last/ when there is no best/ yet). AppError otherwise.
std::string resolve_checkpoint(const std::string& dir);

// The name a checkpoint gets in tables and JSON: the folder given on the command line
// ("checkpoints/pretrain-rope" -> "pretrain-rope"); "pretrain-rope/last" when it is a run's
// best/ or last/ folder itself.
std::string checkpoint_name(const std::string& given);

// load_checkpoint with the folder resolved; errors keep the loader's message (which names the
// folder and what does not fit).
// With `adapter` (a LoRA adapter file, --adapter), the adapter is put on the loaded model.
gpt::LoadedCheckpoint load_model(const std::string& resolved_dir, Device device, const std::string& adapter = "");

// Load-time changes to how a rotary model reads positions, no weight touched: --rope-scaling
// (none, linear:F or ntk:F; "" keeps the checkpoint's) and --block-size (the window; <= 0 keeps it).
// AppError naming the flag and the model when it has a learned table of positions.
void apply_position_flags(gpt::GPT& model, const std::string& rope_scaling, int64_t block_size, const std::string& model_name);

// AppError when the token file holds an id the model has no embedding for.
void check_tokens_fit(const text::TokenFile& tokens, const gpt::GPTConfig& config, const std::string& model_name);

// The tokenizer file saved with a checkpoint (resolved_dir/tokenizer.json), or "" when none.
std::string checkpoint_tokenizer(const std::string& resolved_dir);

// AppError when the tokenizer's vocabulary is larger than the model's.
void check_tokenizer_fits(const text::Tokenizer& tok, const std::string& tok_path, const gpt::GPTConfig& config,
                          const std::string& model_name);

// When both exist, the tokenizer.json beside `token_file` (the one prepare encoded it with) must be
// the checkpoint's own: AppError saying which files differ and how to re-encode otherwise.
void check_same_tokenizer(const std::string& token_file, const std::string& resolved_dir, const std::string& model_name);

// True when the two tokenizer files hold the same merges (both must load).
bool same_tokenizer(const std::string& path_a, const std::string& path_b);

}  // namespace mvgpt::apps
