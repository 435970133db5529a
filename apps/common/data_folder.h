#pragma once
// prepare's output folder (data/): tokenizer.json, train.bin and valid.bin belong together, since
// the token files hold the tokenizer's ids. They are written as one: all three into a staging folder
// first (a full disk fails there, before anything is replaced), then prepare.json, a manifest with
// each file's size and XXH64 (util/hash.h), then the three renamed into place. A folder whose files come from
// two prepare runs (a crash between the renames, a file copied in by hand) no longer matches its
// manifest, and the apps that read it say so instead of training on ids of another vocabulary.
#include <cstdint>
#include <string>
#include <vector>

#include "apps/common/run_folder.h"

namespace mvgpt::apps {

class PreparedFolderWriter {
 public:
  // Locks `out_dir` (created when missing) against a second prepare and clears what a killed one
  // left in it.
  explicit PreparedFolderWriter(std::string out_dir);
  // Without commit() (an exception on the way) the staged files are removed; nothing was replaced.
  ~PreparedFolderWriter();

  // Where to write the file `name` before commit().
  std::string staged(const std::string& name) const;
  // Writes the manifest of the staged files, then moves them into place.
  void commit(const std::vector<std::string>& names);

 private:
  std::string dir_, staging_;
  FolderLock lock_;
};

// The manifest's check of the file at `path`, when its folder has a prepare.json listing it:
// AppError naming the file, what differs, and to run prepare again. Files without a manifest
// (written by hand, or by an older prepare) pass.
void verify_prepared_file(const std::string& path);

}  // namespace mvgpt::apps
