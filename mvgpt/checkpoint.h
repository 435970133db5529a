#pragma once
// A checkpoint is a folder: config.json + model.safetensors (float32, nanoGPT's tensor names and
// shapes, so PyTorch users can load it into their own GPT-2-style code), plus whatever extra files
// the caller adds (a training run's optimizer state, its progress). See docs/checkpoints.md.
//
// Saving is atomic for the folder as a whole: everything is written into "<dir>.tmp.<pid>", then
// swapped with the old folder in one rename (renameat2 RENAME_EXCHANGE), so a crash leaves either
// the old checkpoint or the new one, never a mix of the two.
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "mvgpt/config.h"
#include "mvgpt/model.h"

namespace mvgpt::gpt {

// Writes extra files into the temporary folder before the swap.
using ExtraFiles = std::function<void(const std::string& tmp_dir)>;

void save_checkpoint(const std::string& dir, const GPT& model, const std::map<std::string, std::string>& metadata = {},
                     const ExtraFiles& extra = {});

// Reads config.json (std::invalid_argument naming the file and field when it is wrong).
GPTConfig load_config(const std::string& dir);

struct LoadedCheckpoint {
  std::shared_ptr<GPT> model;
  std::map<std::string, std::string> metadata;
};
// Builds the model its config describes and loads its tensors, checking every name and shape:
// a missing folder or file, or tensors that do not fit the config, give one error naming the
// folder and what does not fit.
LoadedCheckpoint load_checkpoint(const std::string& dir, Device device = Device::cpu());

}  // namespace mvgpt::gpt
