#include "apps/common/app.h"

#include <alloca.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <vector>

#include "apps/common/cli.h"
#include <mvgpt/backends/backend.h>
#include <mvgpt/backends/cpu/openblas_core.h>

namespace mvgpt::apps {

namespace fs = std::filesystem;

// NOTE [ OpenBLAS's threads under ulimit -v ]
// OpenBLAS starts its worker threads (one fewer than the cores) in its library constructor, and each
// takes a 128 MiB buffer as it starts, retrying forever when it cannot: under `ulimit -v`, with
// enough cores, the app spins before main() and hangs at exit joining those threads (seen with gdb:
// `evaluate --help` under ulimit -v 100000 on 2 cores). We hold OpenBLAS to one thread anyway
// (blas.cpp), so under a finite address-space limit the process starts again at once with
// OPENBLAS_NUM_THREADS=1, from the executable's preinit_array: it runs before any library's
// constructor (OpenBLAS's included), but also before libc's, which resets the environment, so a
// setenv there would be lost; execve with a new environment is what works. Without a limit, or
// with OPENBLAS_NUM_THREADS=1 already, nothing happens.
static void openblas_one_thread_under_a_limit(int, char** argv, char** envp) {
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) != 0 || as.rlim_cur == RLIM_INFINITY || envp == nullptr) return;
  static const char kOne[] = "OPENBLAS_NUM_THREADS=1";
  size_t n = 0;
  for (; envp[n] != nullptr; ++n)
    if (std::strcmp(envp[n], kOne) == 0) return;
  char** env = static_cast<char**>(alloca((n + 2) * sizeof(char*)));
  size_t k = 0;
  for (size_t i = 0; i < n; ++i)
    if (std::strncmp(envp[i], "OPENBLAS_NUM_THREADS=", sizeof("OPENBLAS_NUM_THREADS=") - 1) != 0) env[k++] = envp[i];
  env[k++] = const_cast<char*>(kOne);
  env[k] = nullptr;
  ::execve("/proc/self/exe", argv, env);  // returns only on failure (no /proc): go on as before
}
__attribute__((section(".preinit_array"), used)) static void (*const preinit_openblas)(int, char**, char**) =
    &openblas_one_thread_under_a_limit;

// Errors from the layers below may span lines (a list of mismatched tensors): one line, of a length
// a terminal shows.
static std::string one_line(const std::string& message) {
  std::string out;
  for (size_t i = 0; i < message.size(); ++i) {
    if (message[i] != '\n') {
      out += message[i];
      continue;
    }
    while (i + 1 < message.size() && (message[i + 1] == ' ' || message[i + 1] == '\n')) ++i;
    if (i + 1 < message.size()) out += ' ';
  }
  constexpr size_t kMax = 600;
  if (out.size() > kMax) out = out.substr(0, kMax) + " ...";
  return out;
}

// CLI11's words for a flag given twice ("--lr: At Most 1 required but received 2"), said plainly.
static std::string plain_parse_error(const std::string& message) {
  static const std::regex twice(R"(^(--?[A-Za-z0-9_-]+): At Most 1 required but received (\d+)$)");
  std::smatch m;
  if (std::regex_match(message, m, twice))
    return m[1].str() + " is given " + m[2].str() + " times; give it once";
  return message;
}

namespace {
std::vector<std::string>& deferred_warnings() {
  static std::vector<std::string> warnings;
  return warnings;
}
std::string& auto_device_note() {
  static std::string note;
  return note;
}
}  // namespace

void warn_after_success(std::string text) { deferred_warnings().push_back(std::move(text)); }

std::string device_note() { return auto_device_note(); }

int run_app(CLI::App& app, int argc, char** argv, const std::function<int()>& body) {
  const std::string name = app.get_name();
  // OpenBLAS's notice stays in openblas_core_info() (pretrain's header prints it); nothing may come
  // before an error's one line. A warning (slow kernels) is repeated once a run has succeeded.
  cpu::set_openblas_notice_handler({});
  const auto usage_error = [&](const std::exception& e) {
    std::cerr << name << ": error: " << one_line(plain_parse_error(e.what())) << " (see " << name << " --help)\n";
    return 2;
  };
  // A file-size limit (ulimit -f) kills with SIGXFSZ by default: ignored, the write fails with EFBIG
  // instead, and the app says which file could not be written, removes its temporary outputs and
  // exits 1 like any other write error.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    app.parse(argc, argv);  // the app's checks of its flags run in here too (apps/flags/<app>.h)
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return usage_error(e);
  } catch (const UsageError& e) {
    return usage_error(e);
  }
  int code = 1;
  try {
    code = body();
    if (code == 0 && cpu::openblas_core_checked()) {
      const cpu::OpenBlasNotice notice = cpu::openblas_core_info().notice;
      if (notice.warning) warn_after_success(notice.message);
    }
    if (code == 0)
      for (const std::string& w : deferred_warnings()) std::cerr << name << ": warning: " << w << "\n";
  } catch (const UsageError& e) {
    code = usage_error(e);
  } catch (const std::bad_alloc&) {
    rlimit as{};
    const bool limited = ::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY;
    std::cerr << name << ": error: out of memory"
              << (limited ? " under the address-space limit (ulimit -v) of " + std::to_string(as.rlim_cur >> 20) + " MiB" : "")
              << "; use a smaller model or batch, or " << (limited ? "raise the limit" : "free memory") << "\n";
    code = 1;
  } catch (const std::exception& e) {
    std::cerr << name << ": error: " << one_line(e.what()) << "\n";
    code = 1;
  }
  // Output that never reached its file (a full disk, /dev/full) is a failure, not exit 0 with the
  // results lost: stdio only reports it at a flush, so flush here and look.
  errno = 0;
  std::cout.flush();
  const bool lost = std::fflush(stdout) != 0 || std::ferror(stdout) || std::cout.fail();
  if (lost && code == 0) {  // when the run failed already, its own error line is the one to show
    const int err = errno;
    std::cerr << name << ": error: cannot write to standard output" << (err ? std::string(" (") + std::strerror(err) + ")" : "")
              << "; the output is incomplete\n";
    code = 1;
  }
  return code;
}

void check_output_folder(const std::string& flag, const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  if (ec) throw AppError(flag + " " + dir + ": " + ec.message());
  if (fs::exists(p, ec)) {
    if (!fs::is_directory(p, ec))
      throw UsageError(flag + " " + dir + " is a file, not a folder; pass a folder (it is created if needed)");
  } else {
    // It will be created: the nearest existing folder above it must be writable.
    while (p.has_parent_path() && p != p.root_path() && !fs::exists(p, ec)) p = p.parent_path();
    if (!fs::is_directory(p, ec))
      throw UsageError(flag + " " + dir + ": " + p.string() + " is a file, so the folder cannot be created there");
  }
  if (::access(p.c_str(), W_OK | X_OK) != 0)
    throw AppError(flag + " " + dir + ": cannot write in " + p.string() + " (" + std::strerror(errno) +
                   "); choose another folder");
}

Device resolve_device(const std::string& flag) {
  // The CPU backend first (every app uses it, if only to load): its checks of OpenBLAS, the one under
  // an address-space limit included, fail here with their own message, not inside a later step.
  (void)backend_for(Device::cpu());
  if (flag.empty() || flag == "auto") {
    const CudaStatus cuda = cuda_status();
    if (cuda.available) return Device::cuda();
    if (cuda.error && auto_device_note().empty()) {
      auto_device_note() = "--device auto runs on the CPU: " + cuda.reason;
      warn_after_success(auto_device_note());
    }
    return Device::cpu();
  }
  check_device_flag(flag);
  const Device d = Device::parse(flag);
  if (d.is_cuda()) {
    if (!cuda_available())
      throw AppError("--device " + flag + ": " + cuda_status().reason + "; use --device cpu");
    if (d.index >= cuda_device_count())
      throw AppError("--device " + flag + ": only " + std::to_string(cuda_device_count()) +
                     " GPU(s) are visible; use cuda:0 .. cuda:" + std::to_string(cuda_device_count() - 1));
  }
  return d;
}

void synchronize(Device device) {
  if (device.is_cuda()) backend_for(device).synchronize();
}

// The top CMakeLists.txt declares project(mvgpt ...).
static bool is_project_root(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(dir / "CMakeLists.txt", ec)) return false;
  std::ifstream in(dir / "CMakeLists.txt");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("project(mvgpt", 0) == 0) return true;
  return false;
}

std::string repository_root() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  // build*/apps/<app>: walk up to the folder whose CMakeLists.txt is the project's own (whatever
  // the layout under it; it once looked for a header that has since moved, and never found it).
  for (fs::path p = exe.parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path())
    if (is_project_root(p)) return p.string();
  return "";
}

std::string find_stories_dir(const std::string& flag) {
  if (!flag.empty()) {
    if (!fs::is_directory(flag)) throw AppError("--data-dir " + flag + ": no such folder");
    return flag;
  }
  if (const char* env = std::getenv("MVGPT_DATA_DIR"); env && *env) {
    if (!fs::is_directory(env)) throw AppError("MVGPT_DATA_DIR=" + std::string(env) + ": no such folder");
    return env;
  }
  std::vector<fs::path> candidates;
  if (auto root = repository_root(); !root.empty()) candidates.push_back(fs::path(root) / ".." / "shared" / "data" / "tinystories");
  std::error_code ec;
  for (fs::path p = fs::current_path(ec); !ec && !p.empty(); p = p.parent_path()) {
    candidates.push_back(p / ".." / "shared" / "data" / "tinystories");
    if (p == p.root_path()) break;
  }
  std::string looked;
  for (const auto& c : candidates) {
    if (fs::is_directory(c, ec)) return fs::weakly_canonical(c).string();
    if (looked.size() < 400) looked += (looked.empty() ? "" : ", ") + fs::weakly_canonical(c, ec).string();
  }
  throw AppError("no stories folder found (looked in " + looked +
                 "); pass --data-dir DIR (a folder with train.txt and valid.txt) or set MVGPT_DATA_DIR");
}

void require_finite(double value, const std::string& what, const std::string& why) {
  if (!std::isfinite(value)) throw AppError(what + " is " + format("%g", value) + " (not a finite number); " + why);
}

void require_file(const std::string& path, const std::string& what, const std::string& hint) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw AppError(what + " " + path + ": no such file; " + hint);
}

std::string format_duration(double seconds) {
  if (!(seconds >= 0)) seconds = 0;
  seconds = std::min(seconds, 1e15);  // an ETA of a --minutes 1e300 run: no int64 overflow (undefined)
  auto s = int64_t(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(s / 3600), (long long)(s / 60 % 60), (long long)(s % 60));
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", (long long)(s / 60), (long long)(s % 60));
  return buf;
}

std::string format_count(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out(size_t(n > 0 ? n : 0), '\0');
  std::vsnprintf(out.data(), out.size() + 1, fmt, args);
  va_end(args);
  return out;
}

ProgressLine::ProgressLine(double every_s) : tty_(::isatty(STDERR_FILENO) != 0), every_s_(tty_ ? every_s : 5.0) {}

void ProgressLine::update(const std::string& text, bool force) {
  auto now = Clock::now();
  if (!force && drawn_ && std::chrono::duration<double>(now - last_).count() < every_s_) return;
  last_ = now;
  drawn_ = true;
  if (tty_) {
    std::string pad = text.size() < width_ ? std::string(width_ - text.size(), ' ') : "";
    std::fprintf(stderr, "\r%s%s", text.c_str(), pad.c_str());
    width_ = text.size();
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  std::fflush(stderr);
}

void ProgressLine::finish(const std::string& text) {
  if (tty_) {
    std::string pad = text.size() < width_ ? std::string(width_ - text.size(), ' ') : "";
    std::fprintf(stderr, "\r%s%s\n", text.c_str(), pad.c_str());
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  std::fflush(stderr);
  drawn_ = false;
  width_ = 0;
}

void ProgressLine::clear() {
  if (tty_ && drawn_) {
    std::fprintf(stderr, "\r%s\r", std::string(width_, ' ').c_str());
    std::fflush(stderr);
  }
  drawn_ = false;
  width_ = 0;
}

}  // namespace mvgpt::apps
