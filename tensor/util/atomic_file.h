#pragma once
// Writing a file so that a crash never leaves a half-written one where a good one was: write to
// "<path>.tmp.<pid>", fsync, rename over the target, fsync the folder.
#include <cstddef>
#include <cstdio>
#include <functional>
#include <string>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace mvgpt::util {

class AtomicFileWriter {
 public:
  // Opens the temporary file; throws std::runtime_error naming the path when it cannot.
  explicit AtomicFileWriter(std::string path);
  // Without commit() (an exception on the way), the temporary file is removed and the target untouched.
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  // Flushes, fsyncs and renames into place. `replace` false: the file must not exist, at the rename
  // too (renameat2 with RENAME_NOREPLACE, or a hard link where the filesystem lacks it): a file
  // made by someone else meanwhile is kept and std::runtime_error says so.
  void commit(bool replace = true);
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_path_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
};

void write_file_atomic(const std::string& path, std::string_view contents);
// True for "<base>.tmp.<digits>": the temporary name AtomicFileWriter and write_folder_atomic give
// `base` while they write it (in progress, or left by a process that died).
bool is_temporary_name(const std::string& name, const std::string& base);
// Makes renames inside `dir` ("" for the current folder) durable: fsync of the folder itself.
// Best effort: a filesystem that cannot open folders is left as it is.
void fsync_dir(const std::string& dir);
// Writes a whole folder at once: `fill(tmp)` writes its files into "<dir>.tmp.<pid>" beside it, which
// then takes the place of `dir` in one renameat2(RENAME_EXCHANGE) (two renames on a filesystem
// without exchange), and the old folder, if any, is removed. A crash or an exception from `fill`
// leaves the old folder whole (the temporary one is removed on an exception). Parent folders are
// created; a trailing slash in `dir` names the same folder.
void write_folder_atomic(const std::string& dir, const std::function<void(const std::string& tmp)>& fill);
// write_folder_atomic holds an flock() on its "<dir>.tmp.<pid>" while it writes, so the temporary
// folders of a writer that died (SIGKILL, a power cut) can be told from a live writer's, whatever
// its pid means in this PID namespace. Removes the former and returns their paths; throws
// FolderInUse (its message the temporary folder's path) when another process is writing `dir` now.
struct FolderInUse : std::runtime_error {
  using std::runtime_error::runtime_error;
};
std::vector<std::string> remove_abandoned_folder_writes(const std::string& dir);
// The whole file; throws std::runtime_error naming the path when it cannot be read.
std::string read_file(const std::string& path);

}  // namespace mvgpt::util
