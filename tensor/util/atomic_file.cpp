#include <mvgpt/util/atomic_file.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace mvgpt::util {

static std::runtime_error io_error(const std::string& what, const std::string& path) {
  return std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  tmp_path_ = path_ + ".tmp." + std::to_string(::getpid());
  // "x": O_EXCL, so a file (or a link) already at the temporary name, which is not ours, is neither
  // truncated nor followed.
  file_ = std::fopen(tmp_path_.c_str(), "wbx");
  if (!file_) throw io_error("cannot create", tmp_path_);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (file_) std::fclose(file_);
  if (!committed_) std::remove(tmp_path_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t n) {
  if (!file_) throw std::logic_error("AtomicFileWriter::write: " + path_ + " was already committed");
  if (n && std::fwrite(data, 1, n, file_) != n) throw io_error("cannot write", tmp_path_);
}

void AtomicFileWriter::commit(bool replace) {
  if (!file_) throw std::logic_error("AtomicFileWriter::commit: " + path_ + " was already committed");
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0) throw io_error("cannot flush", tmp_path_);
  if (std::fclose(file_) != 0) {
    file_ = nullptr;
    throw io_error("cannot close", tmp_path_);
  }
  file_ = nullptr;
  if (replace) {
    if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) throw io_error("cannot rename into", path_);
  } else if (::renameat2(AT_FDCWD, tmp_path_.c_str(), AT_FDCWD, path_.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno == EEXIST) throw std::runtime_error(path_ + " appeared while it was written; it was left as it is");
    // No RENAME_NOREPLACE here (some filesystems): a hard link also fails when the name exists.
    if (errno != EINVAL && errno != ENOSYS) throw io_error("cannot rename into", path_);
    if (::link(tmp_path_.c_str(), path_.c_str()) != 0)
      throw errno == EEXIST ? std::runtime_error(path_ + " appeared while it was written; it was left as it is")
                            : io_error("cannot link into", path_);
    std::remove(tmp_path_.c_str());
  }
  committed_ = true;
  fsync_dir(std::filesystem::path(path_).parent_path().string());  // the rename itself, durable
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

namespace {

// Puts the finished folder `tmp` where `dir` is, in one step when the filesystem can exchange two
// names; otherwise with two renames (a crash between them leaves "<dir>.old.<pid>" to recover from).
void swap_into_place(const std::filesystem::path& tmp, const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  if (!fs::exists(dir)) {
    fs::rename(tmp, dir);
  } else if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(tmp);  // now holds the previous folder
  } else {
    fs::path old = dir.string() + ".old." + std::to_string(::getpid());
    fs::rename(dir, old);
    fs::rename(tmp, dir);
    fs::remove_all(old);
  }
  fsync_dir(dir.parent_path().string());
}

// The folder `dir` names: "runs/ckpt/" names ckpt (without this, the temporary folder beside it
// would go inside it).
std::filesystem::path folder_named(const std::string& dir) {
  std::filesystem::path target = std::filesystem::path(dir).lexically_normal();
  return target.has_filename() ? target : target.parent_path();
}

}  // namespace

bool is_temporary_name(const std::string& name, const std::string& base) {
  const std::string prefix = base + ".tmp.";
  return name.size() > prefix.size() && name.rfind(prefix, 0) == 0 &&
         name.find_first_not_of("0123456789", prefix.size()) == std::string::npos;
}

void write_folder_atomic(const std::string& dir, const std::function<void(const std::string& tmp)>& fill) {
  namespace fs = std::filesystem;
  const fs::path target = folder_named(dir);
  if (target.has_parent_path()) fs::create_directories(target.parent_path());
  const fs::path tmp = target.string() + ".tmp." + std::to_string(::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  // Held until the folder is in place (remove_abandoned_folder_writes); the kernel drops it when we die.
  const int lock_fd = ::open(tmp.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (lock_fd >= 0) (void)::flock(lock_fd, LOCK_EX | LOCK_NB);
  struct Unlock {
    int fd;
    ~Unlock() {
      if (fd >= 0) ::close(fd);
    }
  } unlock{lock_fd};
  try {
    fill(tmp.string());
    swap_into_place(tmp, target);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
}

std::vector<std::string> remove_abandoned_folder_writes(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path target = folder_named(dir);
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::vector<std::string> removed;
  std::error_code ec;
  std::vector<fs::path> candidates;
  for (const auto& e : fs::directory_iterator(parent, ec))
    if (is_temporary_name(e.path().filename().string(), target.filename().string()) && e.is_directory(ec))
      candidates.push_back(e.path());
  for (const fs::path& p : candidates) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) continue;
    const bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    if (!held) {
      fs::remove_all(p, ec);  // under our lock: the writer is gone
      removed.push_back(p.string());
    }
    ::close(fd);
    if (held) throw FolderInUse(p.string());
  }
  return removed;
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  AtomicFileWriter w(path);
  w.write(contents);
  w.commit();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw io_error("cannot open", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw io_error("cannot read", path);
  return ss.str();
}

}  // namespace mvgpt::util
