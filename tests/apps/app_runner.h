#pragma once
// Helpers for tests that run the built apps: a scratch folder per test process, tiny stories to
// prepare, a tiny model config, and running an app with its exit code, stdout and stderr.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>
#include <string>

#include <gtest/gtest.h>

namespace mvgpt::apps::testing {

namespace fs = std::filesystem;

struct RunResult {
  int code = -1;
  std::string out, err;
};

inline std::string app_path(const std::string& name) { return std::string(MVGPT_BINARY_DIR) + "/apps/" + name; }

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_text(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// Runs the shell command `command` in `cwd`, capturing stdout and stderr.
inline RunResult run_command(const std::string& command, const fs::path& cwd) {
  static int counter = 0;
  const fs::path err_file = cwd / (".stderr." + std::to_string(::getpid()) + "." + std::to_string(counter++));
  const std::string cmd = "cd '" + cwd.string() + "' && " + command + " 2> '" + err_file.string() + "'";
  RunResult r;
  if (std::FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    while (size_t n = std::fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
    int status = ::pclose(p);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  r.err = slurp(err_file);
  fs::remove(err_file);
  return r;
}

// Runs `app args` in `cwd`, capturing stdout and stderr.
inline RunResult run_app(const std::string& app, const std::string& args, const fs::path& cwd) {
  // Appended rather than "'" + ...: GCC 12 misreports the prepend as an overlapping memcpy (-Wrestrict).
  return run_command(std::string("'").append(app_path(app)).append("' ").append(args), cwd);
}

// Every file under `dir` with its bytes, to check that a failed command changed nothing.
inline std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  if (!fs::exists(dir)) return files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = slurp(e.path());
  return files;
}

// Small stories in TinyStories' layout, different for each seed.
inline std::string tiny_stories(int count, unsigned seed) {
  const char* names[] = {"Lily", "Tom", "Ben", "Mia", "Sam", "Anna"};
  const char* animals[] = {"cat", "dog", "bird", "frog", "fish"};
  const char* places[] = {"park", "garden", "house", "forest", "river"};
  const char* verbs[] = {"play", "run", "jump", "sing", "read"};
  const char* feelings[] = {"happy", "sad", "tired", "excited"};
  std::string text;
  unsigned x = seed * 2654435761u + 12345u;
  auto pick = [&](int n) {
    x = x * 1664525u + 1013904223u;
    return int((x >> 16) % unsigned(n));
  };
  for (int i = 0; i < count; ++i) {
    std::string name = names[pick(6)], animal = animals[pick(5)], place = places[pick(5)];
    text += "Once upon a time, there was a little " + animal + " named " + name + ". " + name + " liked to " +
            verbs[pick(5)] + " in the " + place + ".\n";
    text += "One day, " + name + " saw a big " + animals[pick(5)] + ". " + name + " was very " + feelings[pick(4)] +
            ". They went to the " + places[pick(5)] + " together and had fun.\n";
    text += "<|endoftext|>\n";
  }
  return text;
}

// A model small enough to train in a fraction of a second.
inline std::string tiny_config(bool rope, int vocab = 300) {
  return std::string("{\"vocab_size\": ") + std::to_string(vocab) +
         ", \"block_size\": 16, \"n_layer\": 2, \"n_head\": 2, \"n_embd\": 32, \"rope\": " + (rope ? "true" : "false") +
         "}";
}

// A scratch folder for this test process, removed at the end of the test suite.
class AppsTest : public ::testing::Test {
 protected:
  static fs::path root() {
    static fs::path dir = [] {
      fs::path d = fs::temp_directory_path() / ("mvgpt_apps_test_" + std::to_string(::getpid()));
      fs::remove_all(d);
      fs::create_directories(d);
      return d;
    }();
    return dir;
  }

  // stories/{train,valid}.txt and data/ from prepare (vocabulary 300), once per process.
  static const fs::path& prepared() {
    static fs::path dir = [] {
      write_text(root() / "stories" / "train.txt", tiny_stories(60, 1));
      write_text(root() / "stories" / "valid.txt", tiny_stories(20, 2));
      RunResult r = run_app("prepare", "--data-dir stories --vocab-size 300 --out data", root());
      EXPECT_EQ(r.code, 0) << r.err;
      return root();
    }();
    return dir;
  }

  // A pretrained tiny run (learned or rotary positions) in checkpoints/<name>, once per process.
  static fs::path trained(bool rope) {
    static std::map<bool, fs::path> done;
    if (auto it = done.find(rope); it != done.end()) return it->second;
    const fs::path cwd = prepared();
    const std::string name = rope ? "tiny-rope" : "tiny";
    write_text(cwd / (name + ".json"), tiny_config(rope));
    RunResult r = run_app("pretrain", "--config " + name + ".json --steps 6 --batch-size 4 --eval-interval 3 --eval-windows 4 "
                          "--device cpu --out checkpoints/" + name, cwd);
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    return done[rope] = cwd / "checkpoints" / name;
  }
};

// Removes the scratch folder once every test has run (not per suite: prepared() and trained() are
// shared by all the suites of the process).
class ScratchCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(fs::temp_directory_path() / ("mvgpt_apps_test_" + std::to_string(::getpid())), ec);
  }
};
inline const bool kScratchCleanupRegistered = (::testing::AddGlobalTestEnvironment(new ScratchCleanup), true);

// Starts `pretrain args` in `cwd` with its output in files; returns the child's pid.
inline pid_t spawn_pretrain(const std::string& args, const fs::path& cwd, const fs::path& out_file) {
  std::vector<std::string> words{app_path("pretrain")};
  std::istringstream in(args);
  for (std::string w; in >> w;) words.push_back(w);
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::chdir(cwd.c_str()) != 0) ::_exit(127);
    const int fd = ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// One line "<app>: error: ..." on stderr, containing `needle`.
inline void expect_one_line_error(const RunResult& r, const std::string& app, const std::string& needle, int code = 1) {
  EXPECT_EQ(r.code, code) << r.out << r.err;
  EXPECT_EQ(r.err.rfind(app + ": error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.err;
}

}  // namespace mvgpt::apps::testing
