#include <mvgpt/nn/checkpoint.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include <mvgpt/nn/lora.h>
#include <mvgpt/nn/safetensors.h>
#include <mvgpt/util/atomic_file.h>
#include <mvgpt/util/hash.h>
#include <mvgpt/util/json.h>

namespace mvgpt::nn {

namespace fs = std::filesystem;

std::string require_checkpoint_file(const std::string& dir, const char* name) {
  const fs::path p = fs::path(dir) / name;
  if (!fs::exists(dir)) throw std::runtime_error(dir + ": no such checkpoint folder");
  if (!fs::is_regular_file(p)) throw std::runtime_error(dir + ": not a checkpoint (" + name + " is missing)");
  return p.string();
}

namespace {

// checksums.json: {"algorithm": "xxh64", "files": {name: {"bytes": n, "xxh64": "16 hex digits"}}}
// for every regular file in `dir` (written last, so it covers the caller's extra files too).
void write_checksums(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().filename() != kChecksumsFile) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  nlohmann::ordered_json files = nlohmann::ordered_json::object();
  for (const auto& name : names) {
    const util::FileDigest d = util::digest_file((dir / name).string());
    files[name] = {{"bytes", d.bytes}, {"xxh64", util::to_hex(d.xxh64)}};
  }
  nlohmann::ordered_json j = {{"algorithm", "xxh64"}, {"files", std::move(files)}};
  util::write_file_atomic((dir / kChecksumsFile).string(), j.dump(2) + "\n");
}

}  // namespace

bool verify_checkpoint_files(const std::string& dir, const std::vector<std::string>& names) {
  const fs::path manifest = fs::path(dir) / kChecksumsFile;
  std::error_code ec;
  if (!fs::exists(manifest, ec)) return false;
  const std::string where = manifest.string() + ": ";
  nlohmann::json j;
  try {
    j = util::parse_json_strict(util::read_file(manifest.string()));
  } catch (const util::JsonError& e) {
    throw std::runtime_error(where + e.what());
  }
  if (!j.is_object() || !j.contains("algorithm") || j["algorithm"] != "xxh64" || !j.contains("files") ||
      !j["files"].is_object())
    throw std::runtime_error(where + "expected {\"algorithm\": \"xxh64\", \"files\": {...}}");
  for (const auto& [name, entry] : j["files"].items()) {
    if (!names.empty() && std::find(names.begin(), names.end(), name) == names.end()) continue;
    uint64_t expected = 0;
    if (!entry.is_object() || !entry.contains("bytes") || !entry["bytes"].is_number_unsigned() ||
        !entry.contains("xxh64") || !entry["xxh64"].is_string() ||
        !util::from_hex(entry["xxh64"].get<std::string>(), expected) || name.find('/') != std::string::npos)
      throw std::runtime_error(where + "the entry of \"" + name + "\" is malformed");
    const fs::path file = fs::path(dir) / name;
    if (!fs::is_regular_file(file, ec))
      throw std::runtime_error(file.string() + " is missing (" + kChecksumsFile + " records it)");
    const util::FileDigest found = util::digest_file(file.string());
    const uint64_t bytes = entry["bytes"].get<uint64_t>();
    if (found.bytes != bytes)
      throw std::runtime_error(file.string() + " is " + std::to_string(found.bytes) + " bytes, " + kChecksumsFile +
                               " records " + std::to_string(bytes) + " (it was truncated or changed after it was saved)");
    if (found.xxh64 != expected)
      throw std::runtime_error(file.string() + " does not match its checksum in " + kChecksumsFile + " (xxh64 " +
                               util::to_hex(found.xxh64) + ", recorded " + util::to_hex(expected) +
                               "): its bytes changed after it was saved");
  }
  return true;
}

void save_module_checkpoint(const std::string& dir, const Module& model, const std::string& config_json,
                            const std::map<std::string, std::string>& metadata, const ExtraFiles& extra) {
  util::write_folder_atomic(dir, [&](const std::string& tmp_dir) {
    const fs::path tmp(tmp_dir);
    util::write_file_atomic((tmp / "config.json").string(), config_json);
    safetensors::Metadata meta(metadata.begin(), metadata.end());
    meta.emplace("format", "pt");
    // With LoRA adapters: the base weights as ever, the adapters in a file of their own.
    NamedTensors base;
    for (auto& [name, t] : model.state_dict())
      if (!is_lora_name(name)) base.emplace_back(name, t);
    safetensors::save((tmp / "model.safetensors").string(), base, meta);
    if (const LoRAOptions lora = lora_options(model); lora.rank > 0) save_adapter((tmp / kAdapterFile).string(), model, lora);
    if (extra) extra(tmp.string());
    write_checksums(tmp);
  });
}

CheckpointFolder open_checkpoint(const std::string& dir) {
  CheckpointFolder f;
  f.dir = dir;
  f.weights_path = require_checkpoint_file(dir, "model.safetensors");
  // Every recorded file, the caller's extra ones too (at ~4 GB/s: a checkpoint that loads is whole,
  // and pretrain --resume's optimizer state is covered before it is read).
  verify_checkpoint_files(dir);
  f.config_path = require_checkpoint_file(dir, "config.json");
  f.config_text = util::read_file(f.config_path);
  return f;
}

CheckpointWeights read_checkpoint_weights(const CheckpointFolder& folder) {
  safetensors::File file = safetensors::load(folder.weights_path);
  // Before anything is copied: load_state_dict would convert an int tensor silently, and a NaN
  // would only show later as a "nan" loss or a story of nothing but <|endoftext|>.
  for (const auto& [name, t] : file.tensors)
    safetensors::require_finite_float(folder.weights_path, name, t, "(F32) for a model weight",
                                      "the weights are unusable");
  CheckpointWeights w;
  for (const auto& [name, t] : file.tensors) w.values += t.numel();
  w.tensors = std::move(file.tensors);
  w.metadata = std::map<std::string, std::string>(file.metadata.begin(), file.metadata.end());
  return w;
}

void load_module_weights(const CheckpointFolder& folder, Module& model, const NamedTensors& tensors, Device device) {
  try {
    model.load_state_dict(tensors);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(folder.dir + ": model.safetensors does not fit config.json: " + e.what());
  }
  if (const fs::path adapter = fs::path(folder.dir) / kAdapterFile; fs::exists(adapter)) {
    try {
      apply_adapter(model, load_adapter(adapter.string()));
    } catch (const std::exception& e) {
      throw std::runtime_error(adapter.string() + ": " + e.what());
    }
  }
  model.to(device);
  model.eval();
}

LoadedCausalLM load_causal_lm(const std::string& dir, const BuildCausalLM& build, Device device) {
  const CheckpointFolder folder = open_checkpoint(dir);
  LoadedCausalLM out;
  out.model = build(folder.config_text, folder.config_path);
  CheckpointWeights weights = read_checkpoint_weights(folder);
  load_module_weights(folder, *out.model, weights.tensors, device);
  out.metadata = std::move(weights.metadata);
  return out;
}

}  // namespace mvgpt::nn
