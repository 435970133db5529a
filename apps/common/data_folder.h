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

// NOTE [ What prepare writes into ]
// prepare writes only into a folder that is new, empty, or its own: one holding nothing but what
// prepare writes (tokenizer.json, train.bin, valid.bin, prepare.json, its lock and staging folders)
// and the inputs of this very run (finetune.sh keeps train.txt beside its token files). A checkpoint
// (config.json, model.safetensors), a run folder or any other file makes it refuse before any work:
// `prepare --out ck/base/last` once replaced a checkpoint's tokenizer.json, and the run never loaded
// again. AppError naming the folder, a few of its other files and what to do; UsageError for a path
// that cannot be an output folder (the current folder or one above it, the root, a file).
void check_prepare_folder(const std::string& out_dir, const std::vector<std::string>& inputs);

class PreparedFolderWriter {
 public:
  // Locks `out_dir` (created when missing) against a second prepare, checks it again under the lock
  // (check_prepare_folder) and clears what a killed one left in it.
  PreparedFolderWriter(std::string out_dir, const std::vector<std::string>& inputs);
  // Without commit() (an exception on the way) the staged files are removed; nothing was replaced.
  ~PreparedFolderWriter();

  // Where to write the file `name` before commit().
  std::string staged(const std::string& name) const;
  // Writes the manifest of the staged files, then moves them into place.
  void commit(const std::vector<std::string>& names);

 private:
  std::string dir_, staging_;
  CreatedFolders created_;  // removed again unless commit() ran
  FolderLock lock_;
};

// The manifest's check of the file at `path`, when its folder has a prepare.json listing it:
// AppError naming the file, what differs, and to run prepare again. Files without a manifest
// (written by hand, or by an older prepare) pass.
void verify_prepared_file(const std::string& path);

}  // namespace mvgpt::apps
