#pragma once
// The run folder pretrain writes into (checkpoints/pretrain): recognised by the marker file pretrain
// wrote, locked while a process trains in it, and replaced only once the new run exists.
//
// NOTE [ Nothing lost in a run folder ]
// - pretrain touches only the names it writes (kRunEntries, the marker, the lock, its temporary
//   folders); anything else in the folder is the user's and is never moved or deleted.
// - A folder is a run when it holds the marker (mvgpt-run.json) and something of a run, or, for
//   folders written before the marker existed, a last/ or best/ checkpoint. A non-empty folder that
//   is neither is refused: `--out ..` names the user's own folder, not a run.
// - The folder is locked with flock() on mvgpt-run.lock for as long as the process lives: the
//   kernel releases it when the process dies, however it dies, and it holds across PID namespaces.
//   Only the lock holder writes checkpoints, so any "<name>.tmp.<pid>" folder found under the lock
//   is a killed save's leftover, whatever its pid says.
// - --overwrite moves the old run into .replaced/ inside the folder and deletes it only after the new
//   run's first last/ checkpoint is complete; a new run that fails before that puts the old one back,
//   and a killed one is put back (or finished) by the next start.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace mvgpt::apps {

// What a run folder may hold that pretrain wrote (and may move aside with --overwrite).
inline const std::vector<std::string> kRunEntries = {"last", "best", "log.csv", "tensorboard"};

// Creates `dir` and the folders above it that are missing, and removes those it created again (deepest
// first, each only while empty) when destroyed without keep(): a command that fails leaves no empty
// folders behind (`--out checkpoints/x` with a bad flag once left checkpoints/).
class CreatedFolders {
 public:
  explicit CreatedFolders(const std::string& dir);
  ~CreatedFolders();
  CreatedFolders(const CreatedFolders&) = delete;
  CreatedFolders& operator=(const CreatedFolders&) = delete;
  void keep() { created_.clear(); }

 private:
  std::vector<std::string> created_;  // the deepest first
};

// An exclusive flock() on `lock_path`, created when missing and removed by its holder when released,
// so the file exists only while someone holds it. AppError naming the holder when it is held.
class FolderLock {
 public:
  FolderLock(std::string lock_path, const std::string& what);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  std::string path_;
  int fd_ = -1;
};

// The names in `dir` that `is_own` does not claim (sorted; none when the folder is missing): what an
// app that writes into `dir` must not touch, and refuses to share the folder with.
std::vector<std::string> others_in_folder(const std::string& dir, const std::function<bool(const std::string& name)>& is_own);
// "a, b, c and 2 more", for messages.
std::string list_names(std::vector<std::string> names);

// The folder above `path` (not `path` itself) that an app manages as a whole, as "<folder>, <what
// it is>": a run folder, a checkpoint, prepare's data folder or a model's folder; "" when none.
// Nothing is written inside one by another app.
std::string managed_folder_above(const std::string& path);

// UsageError when `out` cannot be a run folder of its own: empty, ".", "..", the filesystem root,
// the current folder or one above it, an existing file, or inside a managed folder (above).
// `what_to_do` ends each message.
void check_run_folder_path(const std::string& out,
                           const std::string& what_to_do = "name a folder of the run's own, such as checkpoints/my-run");
// The same for a folder an app writes once and never replaces (merge, export, import): UsageError as
// above, or AppError when it exists and is not empty, or when another process is writing it (its
// "<out>.tmp.<pid>" is locked); `example` is a folder name to suggest. The temporary folders of
// writers that died ("<out>.tmp.<pid>", unlocked) are removed, with a line on stdout for each.
void check_new_output_folder(const std::string& out, const std::string& app, const std::string& example);
// The same checks for an app that writes one new file (export --format gguf): `out` ends in
// `extension`, does not exist (not even as a dangling link: the app never replaces what it did not
// make), its folder exists, and it is not inside a folder another app writes. UsageError or AppError.
void check_new_output_file(const std::string& out, const std::string& extension, const std::string& app,
                           const std::string& example);

class RunFolder {
 public:
  // Checks the path, creates the folder when missing, takes the lock (AppError naming the other
  // process when it is held), finishes or undoes an --overwrite a killed process left half done, and
  // removes killed saves' temporary folders (`notes` gets a line for each thing it did).
  explicit RunFolder(std::string dir);
  // A replacement that never reached its first checkpoint puts the old run back.
  ~RunFolder();
  RunFolder(const RunFolder&) = delete;
  RunFolder& operator=(const RunFolder&) = delete;

  const std::string& dir() const { return dir_; }
  const std::vector<std::string>& notes() const { return notes_; }

  // The folder holds a run: marked and with last/ or best/, or (an older run) a last/ or best/
  // checkpoint with its config.json.
  bool holds_run() const;
  // pretrain's marker is there.
  bool marked() const;
  // Names in the folder that pretrain did not write (empty for a run folder or a new one).
  std::vector<std::string> foreign_entries() const;

  // AppError when a fresh run may not start here: the folder holds a run and not `overwrite`, or it
  // holds files that are not a run's.
  void check_fresh(bool overwrite) const;
  // A fresh run starts here: check_fresh, then what a previous run left is moved aside and the marker
  // written.
  void start_fresh(bool overwrite);
  // A resumed run: writes the marker if an older run folder has none.
  void start_resumed();
  // The new run's last/ checkpoint is complete: the replaced run (if any) is deleted.
  void checkpoint_saved();
  bool replacing() const { return replacing_; }

 private:
  void recover();
  void restore_replaced() noexcept;
  void write_marker() const;

  std::string dir_;
  std::optional<CreatedFolders> created_;  // removed again if no run was started in the folder
  std::optional<FolderLock> lock_;
  bool replacing_ = false;
  std::vector<std::string> notes_;
};

}  // namespace mvgpt::apps
