#include "apps/common/data_folder.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "apps/common/app.h"
#include <mvgpt/util/atomic_file.h>
#include <mvgpt/util/hash.h>
#include <mvgpt/util/json.h>

namespace mvgpt::apps {

namespace fs = std::filesystem;

namespace {

constexpr const char* kManifest = "prepare.json";
constexpr const char* kStagingPrefix = ".prepare.staging.";
constexpr const char* kLockName = ".prepare.lock";

constexpr const char* kOwnFiles[] = {"tokenizer.json", "train.bin", "valid.bin", kManifest};

// A name prepare writes into its folder: its three files, the manifest, the lock, a staging folder,
// or an atomic write of one of them ("<name>.tmp.<pid>").
bool is_prepare_name(const std::string& name) {
  if (name == kLockName || name.rfind(kStagingPrefix, 0) == 0) return true;
  for (const char* own : kOwnFiles)
    if (name == own || util::is_temporary_name(name, own)) return true;
  return false;
}

}  // namespace

void check_prepare_folder(const std::string& out_dir, const std::vector<std::string>& inputs) {
  check_run_folder_path(out_dir, "prepare writes into a folder of its own: name one such as data");
  const std::vector<std::string> others = others_in_folder(out_dir, [&](const std::string& name) {
    if (is_prepare_name(name)) return true;
    std::error_code ec;
    return std::any_of(inputs.begin(), inputs.end(),
                       [&](const std::string& in) { return !in.empty() && fs::equivalent(fs::path(out_dir) / name, in, ec); });
  });
  if (!others.empty())
    throw AppError("--out " + out_dir + " holds files prepare did not write (" + list_names(others) +
                   "), which it never replaces; prepare writes into a new or empty folder, or one it wrote before: "
                   "choose another --out, such as data-new");
}

PreparedFolderWriter::PreparedFolderWriter(std::string out_dir, const std::vector<std::string>& inputs)
    : dir_(std::move(out_dir)),
      staging_((fs::path(dir_) / (kStagingPrefix + std::to_string(::getpid()))).string()),
      created_(dir_),
      lock_((fs::path(dir_) / kLockName).string(), dir_) {
  check_prepare_folder(dir_, inputs);  // again, under the lock
  // Under the lock no other prepare writes here: any staging folder is a killed run's.
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(kStagingPrefix) || (is_prepare_name(name) && name.find(".tmp.") != std::string::npos))
      stale.push_back(e.path());
  }
  for (const fs::path& p : stale) fs::remove_all(p, ec);
  fs::create_directories(staging_);
}

PreparedFolderWriter::~PreparedFolderWriter() {
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

std::string PreparedFolderWriter::staged(const std::string& name) const { return (fs::path(staging_) / name).string(); }

void PreparedFolderWriter::commit(const std::vector<std::string>& names) {
  nlohmann::json files = nlohmann::json::object();
  for (const std::string& name : names)
    files[name] = {{"bytes", fs::file_size(staged(name))}, {"xxh64", util::to_hex(util::digest_file(staged(name)).xxh64)}};
  // The manifest goes first: a crash among the renames leaves files that do not match it.
  util::write_file_atomic((fs::path(dir_) / kManifest).string(),
                          nlohmann::json{{"app", "prepare"}, {"files", files}}.dump(2) + "\n");
  for (const std::string& name : names) fs::rename(staged(name), fs::path(dir_) / name);
  util::fsync_dir(dir_);  // the renames, durable
  created_.keep();
}

void verify_prepared_file(const std::string& path) {
  const fs::path manifest = fs::path(path).parent_path() / kManifest;
  std::error_code ec;
  if (!fs::is_regular_file(manifest, ec)) return;
  nlohmann::json entry;
  try {
    const nlohmann::json j = util::parse_json_strict(util::read_file(manifest.string()));
    const std::string name = fs::path(path).filename().string();
    if (!j.at("files").contains(name)) return;
    entry = j.at("files").at(name);
    (void)entry.at("bytes").get<uint64_t>();
    (void)entry.at("xxh64").get<std::string>();
  } catch (const std::exception& e) {
    throw AppError(manifest.string() + " is damaged (" + e.what() + "); run prepare again");
  }
  const uint64_t bytes = fs::file_size(path, ec);
  std::string differs;
  if (ec)
    differs = "cannot read its size: " + ec.message();
  else if (bytes != entry.at("bytes").get<uint64_t>())
    differs = format("%llu bytes where the manifest says %llu", (unsigned long long)bytes,
                     (unsigned long long)entry.at("bytes").get<uint64_t>());
  else if (util::to_hex(util::digest_file(path).xxh64) != entry.at("xxh64").get<std::string>())
    differs = "its checksum differs from the manifest's";
  if (!differs.empty())
    throw AppError(path + " is not the file prepare wrote with the others in its folder (" + differs + ", " +
                   manifest.string() + "); run prepare again");
}

}  // namespace mvgpt::apps
