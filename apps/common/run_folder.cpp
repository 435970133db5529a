#include "apps/common/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "apps/common/app.h"
#include <mvgpt/util/atomic_file.h>

namespace mvgpt::apps {

namespace fs = std::filesystem;

namespace {

constexpr const char* kMarker = "mvgpt-run.json";
constexpr const char* kLock = "mvgpt-run.lock";
constexpr const char* kReplaced = ".replaced";

bool is_run_entry(const std::string& name) {
  return std::find(kRunEntries.begin(), kRunEntries.end(), name) != kRunEntries.end();
}

// "<entry>.tmp.<digits>" (a save or an atomic write in progress, or killed) or "<entry>.old.<digits>"
// (a checkpoint swap killed between its two renames): returns <entry> and which kind, "" otherwise.
std::pair<std::string, std::string> leftover_of(const std::string& name) {
  for (const char* kind : {".tmp.", ".old."}) {
    const size_t at = name.rfind(kind);
    if (at == std::string::npos) continue;
    const std::string digits = name.substr(at + 5);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string base = name.substr(0, at);
    if (is_run_entry(base) || base == kMarker) return {base, kind};
  }
  return {"", ""};
}

// Names pretrain may have written: in a folder that is a run (marked, or an older run's checkpoint),
// the run's entries too; elsewhere only its lock, so another tool's log.csv or tensorboard/ counts
// as the user's.
bool is_ours(const std::string& name, bool run_folder) {
  if (name == kLock) return true;
  return run_folder && (is_run_entry(name) || name == kMarker || name == kReplaced || !leftover_of(name).first.empty());
}

// A checkpoint folder pretrain wrote: config.json in it.
bool is_checkpoint(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "config.json", ec);
}

// "last/ at step 12" from its state.json, for messages.
std::string describe_run(const fs::path& dir) {
  std::error_code ec;
  std::string what;
  if (fs::exists(dir / "last", ec)) {
    what = "last/";
    try {
      what += " at step " + std::to_string(nlohmann::json::parse(util::read_file((dir / "last" / "state.json").string()))
                                               .at("step")
                                               .get<int64_t>());
    } catch (const std::exception&) {
    }
  }
  if (fs::exists(dir / "best", ec)) what += what.empty() ? "best/ but no last/" : " and best/";
  return what;
}

bool is_same_or_inside(const fs::path& inner, const fs::path& outer) {
  auto [o, i] = std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end());
  return o == outer.end();
}

}  // namespace

std::string list_names(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  std::string s;
  for (size_t i = 0; i < names.size() && i < 3; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > 3) s += format(" and %zu more", names.size() - 3);
  return s;
}

std::vector<std::string> others_in_folder(const std::string& dir, const std::function<bool(const std::string& name)>& is_own) {
  std::vector<std::string> names;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return names;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (const std::string name = e.path().filename().string(); !is_own(name)) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

std::string managed_folder_above(const std::string& path) {
  std::error_code ec;
  const fs::path abs = fs::weakly_canonical(fs::absolute(path), ec);
  if (ec) return "";
  for (fs::path p = abs.parent_path(); !p.empty(); p = p.parent_path()) {
    const char* kind = fs::exists(p / kMarker, ec)                                          ? "a training run's folder"
                       : fs::exists(p / "checksums.json", ec)                              ? "a checkpoint"
                       : fs::exists(p / "prepare.json", ec)                                ? "prepare's data folder"
                       : fs::exists(p / "config.json", ec) && fs::exists(p / "model.safetensors", ec) ? "a model's folder"
                                                                                           : nullptr;
    if (kind) {  // as the user would write it: relative to the current folder when inside it
      const fs::path cwd = fs::weakly_canonical(fs::current_path(ec), ec);
      const fs::path rel = !ec && is_same_or_inside(p, cwd) ? fs::relative(p, cwd, ec) : p;
      return (ec || rel.empty() ? p : rel).string() + ", " + kind;
    }
    if (p == p.root_path()) break;
  }
  return "";
}

void check_run_folder_path(const std::string& out, const std::string& what_to_do) {
  const std::string hint = "; " + what_to_do;
  if (out.empty()) throw UsageError("--out is empty" + hint);
  std::error_code ec;
  const fs::path abs = fs::weakly_canonical(fs::absolute(out), ec);
  if (ec) throw UsageError("--out " + out + ": " + ec.message() + hint);
  if (abs == abs.root_path()) throw UsageError("--out " + out + " is the filesystem's root" + hint);
  const fs::path cwd = fs::weakly_canonical(fs::current_path(), ec);
  if (!ec && is_same_or_inside(cwd, abs))
    throw UsageError("--out " + out + " is " + (abs == cwd ? "the current folder" : "a folder above the current one") + hint);
  if (fs::exists(abs, ec) && !fs::is_directory(abs, ec)) throw UsageError("--out " + out + " is a file, not a folder" + hint);
  // A folder inside another app's output goes with it: a checkpoint is replaced whole at the run's
  // next save (an export into ck/run/last/hf was deleted by it), and the apps that read it check it.
  if (const std::string above = managed_folder_above(out); !above.empty())
    throw UsageError("--out " + out + " is inside " + above + ", which another app writes and replaces as a whole" + hint);
}

void check_new_output_folder(const std::string& out, const std::string& app, const std::string& example) {
  check_run_folder_path(out, app + " writes a new folder: name a new folder, such as " + example);
  // Under the flock each writer holds on its temporary folder (util::write_folder_atomic): a live one
  // means another process writes this --out now; one we can lock was left by a writer that died.
  try {
    for (const std::string& removed : util::remove_abandoned_folder_writes(out))
      std::printf("removed %s, left by a %s that was stopped before it finished\n", removed.c_str(), app.c_str());
  } catch (const util::FolderInUse& e) {
    throw AppError("--out " + out + " is being written by another process (" + e.what() + "); wait for it to end, or choose another --out");
  }
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::is_empty(out, ec))
    throw AppError(out + " already exists and is not empty; " + app + " writes a new folder: choose another --out");
}

void check_new_output_file(const std::string& out, const std::string& extension, const std::string& app,
                           const std::string& example) {
  const std::string hint = "; " + app + " writes a new file: name one, such as " + example;
  if (out.empty()) throw UsageError("--out is empty" + hint);
  if (!out.ends_with(extension) || fs::path(out).filename() == extension)
    throw UsageError("--out " + out + " does not end in " + extension + hint);
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(out, ec);
  if (fs::is_directory(status)) throw UsageError("--out " + out + " is a folder" + hint);
  if (fs::exists(status))
    throw AppError(out + " already exists; " + app + " never replaces a file: choose another --out (or move that one away yourself)");
  const fs::path abs = fs::weakly_canonical(fs::absolute(out), ec);
  if (ec) throw UsageError("--out " + out + ": " + ec.message() + hint);
  if (!fs::is_directory(abs.parent_path(), ec))
    throw AppError("the folder of --out " + out + " (" + abs.parent_path().string() + ") does not exist; create it first");
  if (const std::string above = managed_folder_above(out); !above.empty())
    throw UsageError("--out " + out + " is inside " + above + ", which another app writes and replaces as a whole" + hint);
}

FolderLock::FolderLock(std::string lock_path, const std::string& what) : path_(std::move(lock_path)) {
  for (;;) {
    // O_CLOEXEC: a child (gnuplot) must not inherit the lock and hold it after we die.
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw AppError("cannot create " + path_ + ": " + std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      std::string holder;
      try {
        holder = util::read_file(path_);
      } catch (const std::exception&) {
      }
      ::close(fd_);
      fd_ = -1;
      if (err == EWOULDBLOCK)
        throw AppError(what + " is in use by another process" + (holder.empty() ? "" : " (" + holder + ")") +
                       "; wait for it to end, or choose another folder");
      throw AppError("cannot lock " + path_ + ": " + std::strerror(err));
    }
    // The holder we waited for may have removed the file between our open and our lock: then we
    // hold a lock on a file nobody else will see, and must lock the one at the path instead.
    struct stat held {}, at_path {};
    if (::fstat(fd_, &held) != 0 || (::stat(path_.c_str(), &at_path) != 0 && errno != ENOENT)) {
      const int err = errno;
      ::close(fd_);
      throw AppError("cannot check the lock " + path_ + ": " + std::strerror(err));
    }
    if (::stat(path_.c_str(), &at_path) == 0 && held.st_ino == at_path.st_ino && held.st_dev == at_path.st_dev) break;
    ::close(fd_);  // the file we locked was removed by its last holder: lock the one at the path
  }
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  const std::string who = format("pid %d on %s", int(::getpid()), host);
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, who.data(), who.size(), 0) != ssize_t(who.size())) {
    // The lock holds without its note; only another process's message loses the pid.
  }
}

FolderLock::~FolderLock() {
  ::unlink(path_.c_str());  // before the unlock: a waiter then finds the file gone and retries
  ::close(fd_);
}

CreatedFolders::CreatedFolders(const std::string& dir) {
  std::error_code ec;
  for (fs::path p = fs::absolute(dir, ec).lexically_normal(); !ec && p.has_relative_path() && !fs::exists(p, ec);
       p = p.parent_path()) {
    if (!p.has_filename()) continue;  // "a/b/" names b
    created_.push_back(p.string());
  }
  fs::create_directories(dir);
}

CreatedFolders::~CreatedFolders() {
  for (const std::string& dir : created_) {
    std::error_code ec;
    if (!fs::remove(dir, ec)) break;  // not empty (or gone): the folders above it are not empty either
  }
}

RunFolder::RunFolder(std::string dir) : dir_(std::move(dir)) {
  check_run_folder_path(dir_);
  created_.emplace(dir_);
  lock_.emplace((fs::path(dir_) / kLock).string(), dir_);
  recover();
}

RunFolder::~RunFolder() {
  if (replacing_) restore_replaced();
  lock_.reset();
  created_.reset();  // a new folder for a run that never started goes, with the folders made for it
}

void RunFolder::recover() {
  // Only in a run folder (marked, or an older run's): elsewhere a '.replaced' or 'last.tmp.1' is the user's.
  if (!marked() && !holds_run()) return;
  const fs::path dir(dir_);
  std::error_code ec;
  if (fs::exists(dir / kReplaced, ec)) {
    if (fs::exists(dir / "last" / "config.json", ec)) {
      fs::remove_all(dir / kReplaced, ec);
      notes_.push_back("removed the run an interrupted --overwrite had replaced (" + (dir / kReplaced).string() + ")");
    } else {
      replacing_ = true;
      restore_replaced();
      notes_.push_back("put back the run an interrupted --overwrite had moved aside (its replacement saved no checkpoint)");
    }
  }
  std::vector<std::string> leftovers;  // collected first: the loop below renames and removes entries
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (!leftover_of(e.path().filename().string()).first.empty()) leftovers.push_back(e.path().filename().string());
  std::sort(leftovers.begin(), leftovers.end());
  for (const std::string& name : leftovers) {
    const auto [base, kind] = leftover_of(name);
    std::error_code err;
    if (kind == ".old." && !fs::exists(dir / base, err)) {
      fs::rename(dir / name, dir / base, err);
      notes_.push_back("put back " + (dir / base).string() + " from " + name + " (a save killed between two renames)");
    } else {
      fs::remove_all(dir / name, err);
      notes_.push_back("removed " + name + ", left by a save that was killed");
    }
  }
}

bool RunFolder::marked() const {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir_) / kMarker, ec);
}

bool RunFolder::holds_run() const {
  const fs::path dir(dir_);
  std::error_code ec;
  // With the marker, whatever pretrain left is the run's; without it (a folder from before the
  // marker), only real checkpoints count: a user's folder named best/ is not a run.
  if (marked()) return fs::exists(dir / "last", ec) || fs::exists(dir / "best", ec);
  return is_checkpoint(dir / "last") || is_checkpoint(dir / "best");
}

std::vector<std::string> RunFolder::foreign_entries() const {
  const bool run = marked() || holds_run();
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (!is_ours(name, run)) names.push_back(name);
  }
  return names;
}

void RunFolder::check_fresh(bool overwrite) const {
  const fs::path dir(dir_);
  if (holds_run()) {
    if (!overwrite)
      throw AppError(dir_ + " already holds a run (" + describe_run(dir) +
                     "); continue it with --resume, start over with --overwrite, or choose another --out");
  } else if (!marked()) {
    const std::vector<std::string> foreign = foreign_entries();
    if (!foreign.empty())
      throw AppError(dir_ + " is not a run folder and holds other files (" + list_names(foreign) +
                     "), which pretrain never deletes; choose another --out, such as checkpoints/my-run");
  }
}

void RunFolder::start_fresh(bool overwrite) {
  check_fresh(overwrite);
  const fs::path dir(dir_);
  std::error_code ec;
  // The marker first: a start killed while moving things aside leaves a folder recover() may work on.
  write_marker();
  // Aside, not deleted: the old run goes only once the new one has a checkpoint (checkpoint_saved).
  fs::create_directories(dir / kReplaced);
  replacing_ = true;
  for (const std::string& name : kRunEntries)
    if (fs::exists(dir / name, ec)) fs::rename(dir / name, dir / kReplaced / name);
  if (fs::is_empty(dir / kReplaced, ec)) {
    fs::remove(dir / kReplaced, ec);
    replacing_ = false;
  }
  created_->keep();
}

void RunFolder::start_resumed() {
  std::error_code ec;
  if (!fs::exists(fs::path(dir_) / kMarker, ec)) write_marker();
  created_->keep();
}

void RunFolder::checkpoint_saved() {
  if (!replacing_) return;
  std::error_code ec;
  fs::remove_all(fs::path(dir_) / kReplaced, ec);
  replacing_ = false;
}

void RunFolder::restore_replaced() noexcept {
  const fs::path dir(dir_);
  std::error_code ec;
  for (const std::string& name : kRunEntries) {
    fs::remove_all(dir / name, ec);  // the new run's (a log without a checkpoint)
    if (fs::exists(dir / kReplaced / name, ec)) fs::rename(dir / kReplaced / name, dir / name, ec);
  }
  fs::remove_all(dir / kReplaced, ec);
  replacing_ = false;
}

void RunFolder::write_marker() const {
  const nlohmann::json marker = {{"app", "pretrain"}, {"what", "an mvgpt training run folder"}, {"format", 1}};
  util::write_file_atomic((fs::path(dir_) / kMarker).string(), marker.dump(2) + "\n");
}

}  // namespace mvgpt::apps
