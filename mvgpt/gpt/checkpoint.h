#pragma once
// A checkpoint is a folder: config.json + model.safetensors (float32, nanoGPT's tensor names and
// shapes, so PyTorch users can load it into their own GPT-2-style code), plus whatever extra files
// the caller adds (a training run's optimizer state, its progress). See docs/checkpoints.md.
//
// Saving is atomic for the folder as a whole: everything is written into "<dir>.tmp.<pid>", then
// swapped with the old folder in one rename (renameat2 RENAME_EXCHANGE), so a crash leaves either
// the old checkpoint or the new one, never a mix of the two.
//
// NOTE [ Checkpoint checksums ]
// The last file written into the temporary folder is checksums.json: the size and XXH64 of every
// other file in it (config.json, model.safetensors and the caller's extra files), so a flipped
// byte or an edit in any of them is caught on load. load_checkpoint verifies every recorded file;
// a caller that reads its extra files before loading the model (pretrain --resume reads state.json
// first) calls verify_checkpoint_files itself. A checkpoint saved before checksums existed has no
// checksums.json and loads unverified.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <mvgpt/gpt/config.h>
#include <mvgpt/gpt/model.h>

namespace mvgpt::gpt {

// A model with LoRA adapters (nn/lora.h) is saved as its base weights (model.safetensors) plus the
// adapters (adapter.safetensors); load_checkpoint puts them back on.
inline constexpr const char* kAdapterFile = "adapter.safetensors";

// Writes extra files into the temporary folder before the swap.
using ExtraFiles = std::function<void(const std::string& tmp_dir)>;

void save_checkpoint(const std::string& dir, const GPT& model, const std::map<std::string, std::string>& metadata = {},
                     const ExtraFiles& extra = {});

// Reads config.json (std::invalid_argument naming the file and field when it is wrong; a
// std::runtime_error when it does not match its checksum).
GPTConfig load_config(const std::string& dir);

inline constexpr const char* kChecksumsFile = "checksums.json";

// Checks the files recorded in dir/checksums.json against their recorded sizes and XXH64: all of
// them, or only those of `names` that are recorded. Returns false, checking nothing, when the folder
// has no checksums.json (saved before checksums existed). Throws std::runtime_error naming the file
// when one is missing, has another size or another checksum, or checksums.json itself is malformed.
bool verify_checkpoint_files(const std::string& dir, const std::vector<std::string>& names = {});

struct LoadedCheckpoint {
  std::shared_ptr<GPT> model;
  std::map<std::string, std::string> metadata;
};
// Builds the model its config describes and loads its tensors, checking every name, shape and
// dtype (a float one), that every value is finite, and the checksums (above): a missing folder or
// file, a damaged file, or tensors that do not fit the config give one error naming the file and
// what is wrong.
LoadedCheckpoint load_checkpoint(const std::string& dir, Device device = Device::cpu());

}  // namespace mvgpt::gpt
