#include "mvgpt/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "nn/safetensors.h"
#include "util/atomic_file.h"

namespace mvgpt::gpt {

namespace fs = std::filesystem;

namespace {

void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Puts the finished folder `tmp` where `dir` is, in one step when the filesystem can exchange two
// names; otherwise with two renames (a crash between them leaves "<dir>.old.<pid>" to recover from).
void swap_into_place(const fs::path& tmp, const fs::path& dir) {
  if (!fs::exists(dir)) {
    fs::rename(tmp, dir);
  } else if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(tmp);  // now holds the previous checkpoint
  } else {
    fs::path old = dir.string() + ".old." + std::to_string(::getpid());
    fs::rename(dir, old);
    fs::rename(tmp, dir);
    fs::remove_all(old);
  }
  fsync_dir(dir.parent_path());
}

std::string require_file(const fs::path& dir, const char* name) {
  fs::path p = dir / name;
  if (!fs::exists(dir)) throw std::runtime_error(dir.string() + ": no such checkpoint folder");
  if (!fs::is_regular_file(p))
    throw std::runtime_error(dir.string() + ": not a checkpoint (" + name + " is missing)");
  return p.string();
}

}  // namespace

void save_checkpoint(const std::string& dir, const GPT& model, const std::map<std::string, std::string>& metadata,
                     const ExtraFiles& extra) {
  fs::path target = fs::path(dir).lexically_normal();
  // "runs/ckpt/" names the folder ckpt: without this the temporary folder would go inside it.
  if (!target.has_filename()) target = target.parent_path();
  if (target.has_parent_path()) fs::create_directories(target.parent_path());
  fs::path tmp = target.string() + ".tmp." + std::to_string(::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    util::write_file_atomic((tmp / "config.json").string(), model.config().to_json());
    safetensors::Metadata meta(metadata.begin(), metadata.end());
    meta.emplace("format", "pt");
    safetensors::save((tmp / "model.safetensors").string(), model.state_dict(), meta);
    if (extra) extra(tmp.string());
    swap_into_place(tmp, target);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
}

GPTConfig load_config(const std::string& dir) {
  std::string path = require_file(dir, "config.json");
  return GPTConfig::from_json(util::read_file(path), path);
}

LoadedCheckpoint load_checkpoint(const std::string& dir, Device device) {
  GPTConfig config = load_config(dir);
  std::string weights = require_file(dir, "model.safetensors");
  safetensors::File file = safetensors::load(weights);
  LoadedCheckpoint out;
  out.model = std::make_shared<GPT>(config);
  try {
    out.model->load_state_dict(file.tensors);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(dir + ": model.safetensors does not fit config.json: " + e.what());
  }
  out.model->to(device);
  out.model->eval();
  out.metadata = std::map<std::string, std::string>(file.metadata.begin(), file.metadata.end());
  return out;
}

}  // namespace mvgpt::gpt
