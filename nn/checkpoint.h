#pragma once
// A checkpoint of any module is a folder:
//   config.json        the caller's text, from which the model's own loader builds it again
//                      (CausalLM::config_json());
//   model.safetensors  the module's state_dict (float32 as trained; LoRA adapters aside);
//   adapter.safetensors with LoRA adapters (nn/lora.h): PEFT's names, put back on by the loader;
//   the caller's extra files (a training run's optimizer state, state.json, the tokenizer);
//   checksums.json     written last: the size and XXH64 of every other file.
// The GPT's checkpoints (mvgpt/gpt/checkpoint.h) are these with the GPT's config. See
// docs/checkpoints.md.
//
// Saving is atomic for the folder as a whole: everything is written into "<dir>.tmp.<pid>", then
// swapped with the old folder in one rename (renameat2 RENAME_EXCHANGE), so a crash leaves either
// the old checkpoint or the new one, never a mix of the two.
//
// NOTE [ Checkpoint checksums ]
// checksums.json records every other file in the folder, so a flipped byte or an edit in any of
// them is caught on load. open_checkpoint verifies every recorded file; a caller that reads its
// extra files before loading the model (pretrain --resume reads state.json first) calls
// verify_checkpoint_files itself. A checkpoint saved before checksums existed has no
// checksums.json and loads unverified.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <mvgpt/nn/causal_lm.h>
#include <mvgpt/nn/module.h>

namespace mvgpt::nn {

inline constexpr const char* kAdapterFile = "adapter.safetensors";
inline constexpr const char* kChecksumsFile = "checksums.json";

// Writes extra files into the temporary folder before the swap.
using ExtraFiles = std::function<void(const std::string& tmp_dir)>;

// Saves `model` with `config_json` as its config.json; `metadata` goes into model.safetensors'
// header (with "format": "pt", as PyTorch's save_file writes).
void save_module_checkpoint(const std::string& dir, const Module& model, const std::string& config_json,
                            const std::map<std::string, std::string>& metadata = {}, const ExtraFiles& extra = {});

// Checks the files recorded in dir/checksums.json against their recorded sizes and XXH64: all of
// them, or only those of `names` that are recorded. Returns false, checking nothing, when the folder
// has no checksums.json (saved before checksums existed). Throws std::runtime_error naming the file
// when one is missing, has another size or another checksum, or checksums.json itself is malformed.
bool verify_checkpoint_files(const std::string& dir, const std::vector<std::string>& names = {});

// dir/name, or std::runtime_error "<dir>: no such checkpoint folder" or "<dir>: not a checkpoint
// (<name> is missing)".
std::string require_checkpoint_file(const std::string& dir, const char* name);

// A checkpoint folder whose checksums were verified, and its config.json's text.
struct CheckpointFolder {
  std::string dir, config_path, config_text, weights_path;
};
// std::runtime_error "<dir>: no such checkpoint folder", "<dir>: not a checkpoint (model.safetensors
// is missing)" (or config.json), or a checksum's error.
CheckpointFolder open_checkpoint(const std::string& dir);

struct CheckpointWeights {
  NamedTensors tensors;  // every one a float tensor of finite values
  std::map<std::string, std::string> metadata;
  int64_t values = 0;  // the number of values they hold
};
// model.safetensors' tensors; std::runtime_error naming the file and the tensor when one is not a
// float tensor or holds a value that is not finite.
CheckpointWeights read_checkpoint_weights(const CheckpointFolder& folder);

// Puts `tensors` into `model` (every name, shape and dtype checked: "<dir>: model.safetensors does not
// fit config.json: ..."), then the folder's adapters when it has adapter.safetensors; moves the
// model to `device` and into eval mode.
void load_module_weights(const CheckpointFolder& folder, Module& model, const NamedTensors& tensors,
                         Device device = Device::cpu());

// A causal LM saved with save_module_checkpoint: `build` makes the model that config.json describes
// (its own parser: std::invalid_argument naming the path and field when it is wrong), then the
// weights are loaded into it as above.
using BuildCausalLM =
    std::function<std::shared_ptr<CausalLM>(const std::string& config_text, const std::string& config_path)>;
struct LoadedCausalLM {
  std::shared_ptr<CausalLM> model;
  std::map<std::string, std::string> metadata;
};
LoadedCausalLM load_causal_lm(const std::string& dir, const BuildCausalLM& build, Device device = Device::cpu());

}  // namespace mvgpt::nn
