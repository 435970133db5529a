#pragma once
// What every app shares: how errors end a run (one line on stderr, exit 1; usage errors exit 2),
// where the data is by default, which device to use, and small formatting helpers.
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>

#include <mvgpt/autograd/precision.h>
#include <mvgpt/tensor/device.h>

namespace mvgpt::apps {

// A failure the user can act on; its message says what is wrong and what to do. Exit code 1.
class AppError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A bad command line (a flag's value, a combination of flags). Exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses the command line (with the app's checks of its flags, apps/common/cli.h) and runs `body`,
// turning every exception into one line "<app>: error: <message>" on stderr: 2 for command-line
// errors (CLI11's and UsageError), 1 for everything else. --help prints the usage and exits 0.
// Standard output is flushed at the end: a write that failed (a full disk, /dev/full) is an error
// too, exit 1.
int run_app(CLI::App& app, int argc, char** argv, const std::function<int()>& body);

// Checks, before any work, that the folder `dir` (given by `flag`) can be written: it is a folder,
// or does not exist yet and its nearest existing parent is a writable folder. UsageError when a file
// is in the way, AppError when it cannot be written.
void check_output_folder(const std::string& flag, const std::string& dir);

// "auto" (or ""): the GPU when one is available, else the CPU. "cuda" without a GPU is an AppError
// that says why and suggests --device cpu; text that is not a device is a UsageError. When "auto"
// falls back to the CPU because the CUDA runtime failed (not for want of a GPU), the reason is kept
// for device_note() and repeated as a warning once the run has succeeded.
Device resolve_device(const std::string& flag);
// "--device auto runs on the CPU: <why>" after such a fallback, else "".
std::string device_note();
// A warning printed ("<app>: warning: <text>") only after the run has succeeded, never before an error.
void warn_after_success(std::string text);
// Waits for the device's queued work (for honest timings on a GPU); nothing on the CPU.
void synchronize(Device device);

// The folder of the raw stories (train.txt, valid.txt): --data-dir when given, else $MVGPT_DATA_DIR,
// else ../shared/data/tinystories relative to the repository root, found from the executable's
// location or the current directory. AppError listing the places looked at when none exists.
std::string find_stories_dir(const std::string& flag);

// The repository root the running executable was built from ("" when not found).
std::string repository_root();

// Every figure an app reports is a finite number, or the app fails: AppError "<what> is nan (not a
// finite number); <why>" otherwise.
void require_finite(double value, const std::string& what, const std::string& why);

// Throws AppError("<what> <path>: no such file; <hint>") when `path` is not a regular file.
void require_file(const std::string& path, const std::string& what, const std::string& hint);

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// "1:05:03", "4:07", "0:09".
std::string format_duration(double seconds);
// "12,345,678".
std::string format_count(int64_t n);
// printf into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// A status line that redraws itself on a terminal (\r) and prints at most every `every_s` seconds
// otherwise, so logs stay short. Written to stderr.
class ProgressLine {
 public:
  explicit ProgressLine(double every_s = 0.25);
  void update(const std::string& text, bool force = false);
  // Ends the line (keeps the last text).
  void finish(const std::string& text);
  // Erases the line on a terminal (before other output goes there); nothing in a log.
  void clear();

 private:
  bool tty_;
  double every_s_;
  Clock::time_point last_{};
  bool drawn_ = false;
  size_t width_ = 0;
};

}  // namespace mvgpt::apps
