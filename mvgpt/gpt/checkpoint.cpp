#include <mvgpt/gpt/checkpoint.h>

#include <stdexcept>

#include <mvgpt/gpt/hf.h>
#include <mvgpt/util/atomic_file.h>

namespace mvgpt::gpt {

void save_checkpoint(const std::string& dir, const GPT& model, const std::map<std::string, std::string>& metadata,
                     const ExtraFiles& extra) {
  nn::save_module_checkpoint(dir, model, model.config().to_json(), metadata, extra);
}

namespace {

// Our config.json, or a Hugging Face folder's.
GPTConfig config_from_text(const std::string& text, const std::string& path) {
  return hf::is_hf_config(text) ? hf::config_from_hf(text, path) : GPTConfig::from_json(text, path);
}

}  // namespace

GPTConfig load_config(const std::string& dir) {
  const std::string path = nn::require_checkpoint_file(dir, "config.json");
  verify_checkpoint_files(dir, {"config.json"});
  return config_from_text(util::read_file(path), path);
}

LoadedCheckpoint load_checkpoint(const std::string& dir, Device device) {
  const nn::CheckpointFolder folder = nn::open_checkpoint(dir);
  GPTConfig config = config_from_text(folder.config_text, folder.config_path);
  nn::CheckpointWeights weights = nn::read_checkpoint_weights(folder);
  // What config.json asks for is bounded by what the weights file holds, before anything is
  // allocated: a 30 KB folder whose hidden_size was edited to 6144 took 1.5 GB and 6 s to be refused.
  // A model at most twice the file (plus 1M parameters) is built, so that load_state_dict can name
  // each tensor that does not fit; past that nothing is.
  if (const int64_t needed = config.num_parameters(); needed > 2 * weights.values + (int64_t(1) << 20))
    throw std::runtime_error(dir + ": config.json describes a model of " + std::to_string(needed) + " parameters, but " +
                             folder.weights_path + " holds " + std::to_string(weights.values) +
                             " values, far fewer: the config was edited or belongs to another model (nothing was allocated)");
  // A Hugging Face folder (export --format hf, or transformers' save_pretrained of such a model).
  nn::NamedTensors tensors = weights.tensors;
  if (hf::is_hf_config(folder.config_text)) {
    try {
      tensors = hf::tensors_from_hf(config, weights.tensors, folder.weights_path);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(e.what());
    }
  }
  LoadedCheckpoint out;
  out.model = std::make_shared<GPT>(config);
  nn::load_module_weights(folder, *out.model, tensors, device);
  out.metadata = std::move(weights.metadata);
  return out;
}

}  // namespace mvgpt::gpt
