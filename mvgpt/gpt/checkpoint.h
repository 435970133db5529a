#pragma once
// A checkpoint is a folder: config.json + model.safetensors (float32, nanoGPT's tensor names and
// shapes, so PyTorch users can load it into their own GPT-2-style code), plus whatever extra files
// the caller adds (a training run's optimizer state, its progress). See docs/checkpoints.md.
//
// The folder's layout, its atomic save and its checksums are those of any module's checkpoint:
// nn/checkpoint.h (NOTE [ Checkpoint checksums ]).
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <mvgpt/gpt/config.h>
#include <mvgpt/gpt/model.h>
#include <mvgpt/nn/checkpoint.h>

namespace mvgpt::gpt {

// A model with LoRA adapters (nn/lora.h) is saved as its base weights (model.safetensors) plus the
// adapters (adapter.safetensors); load_checkpoint puts them back on.
using nn::ExtraFiles;
using nn::kAdapterFile;
using nn::kChecksumsFile;
using nn::verify_checkpoint_files;

void save_checkpoint(const std::string& dir, const GPT& model, const std::map<std::string, std::string>& metadata = {},
                     const ExtraFiles& extra = {});

// Reads config.json (std::invalid_argument naming the file and field when it is wrong; a
// std::runtime_error when it does not match its checksum).
GPTConfig load_config(const std::string& dir);

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
