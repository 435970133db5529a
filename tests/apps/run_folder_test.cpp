// Nothing lost, whatever the user does (issue 20): run folders that cannot be mistaken for the user's
// own, locked while a process trains in them, replaced only once the new run has a checkpoint;
// prepare's files written as one; TensorBoard events that stay with their run; settings from
// state.json checked like the flags; SIGTERM and SIGHUP stop like Ctrl-C. Every case runs in a
// scratch folder of its own under the test process's scratch root.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "app_runner.h"
#include "apps/common/run_folder.h"
#include "apps/common/tensorboard.h"

namespace mvgpt::apps::testing {
namespace {

class RunFolders : public AppsTest {
 protected:
  // A scratch folder with its own copy of data/ and the tiny config, for cases that change things.
  static fs::path scratch(const std::string& name) {
    const fs::path dir = prepared() / "run-folders" / name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::copy(prepared() / "data", dir / "data", fs::copy_options::recursive);
    write_text(dir / "tiny.json", tiny_config(false));
    return dir;
  }
};

const std::string kTiny = "--config tiny.json --batch-size 4 --eval-windows 4 --device cpu ";

int64_t state_step(const fs::path& last) {
  return nlohmann::json::parse(slurp(last / "state.json")).at("step").get<int64_t>();
}

TEST_F(RunFolders, OutNeverNamesTheCurrentFolderOrOneAboveIt) {
  const fs::path dir = scratch("out-paths");
  write_text(dir / "notes.txt", "the user's own file\n");
  ASSERT_EQ(run_app("pretrain", kTiny + "--steps 2 --eval-interval 2 --out runs/kept", dir).code, 0);
  fs::create_directories(dir / "sub");
  write_text(dir / "sub" / "tiny.json", tiny_config(false));
  const auto before = snapshot(dir);
  // Caught while parsing (2): the names themselves.
  for (const char* out : {".", "..", "/"}) {
    SCOPED_TRACE(out);
    expect_one_line_error(run_app("pretrain", kTiny + "--data ../data --steps 2 --out " + std::string(out), dir / "sub"),
                          "pretrain", "name a folder of the run's own", 2);
  }
  // Caught at run time (2): paths that resolve to the current folder or above it.
  for (const char* out : {"../", "./", "../..", "../sub", "../../out-paths"}) {
    SCOPED_TRACE(out);
    expect_one_line_error(run_app("pretrain", kTiny + "--data ../data --steps 2 --out " + std::string(out), dir / "sub"),
                          "pretrain", "name a folder of the run's own", 2);
  }
  // A folder of the user's files is no run folder, with or without --overwrite (1), even when its
  // names are those pretrain writes (another tool's log.csv and tensorboard/, a folder called best/).
  write_text(dir / "other" / "log.csv", "the user's\n");
  write_text(dir / "other" / "tensorboard" / "events", "another tool's\n");
  write_text(dir / "mine" / "best" / "notes.txt", "not a checkpoint\n");
  const auto with_others = snapshot(dir);
  for (const char* flags : {"", "--overwrite "})
    for (const char* out : {"data", "other", "mine"}) {
      SCOPED_TRACE(std::string(flags) + out);
      expect_one_line_error(run_app("pretrain", kTiny + flags + "--steps 2 --out " + out, dir), "pretrain",
                            "is not a run folder and holds other files");
    }
  EXPECT_EQ(snapshot(dir), with_others);
  fs::remove_all(dir / "other");
  fs::remove_all(dir / "mine");
  EXPECT_EQ(snapshot(dir), before);
}

TEST_F(RunFolders, ARunFolderWithoutLastIsStillARun) {
  const fs::path dir = scratch("best-only");
  ASSERT_EQ(run_app("pretrain", kTiny + "--steps 4 --eval-interval 2 --out run", dir).code, 0);
  fs::remove_all(dir / "run" / "last");  // deleted to save space, or the first save hit a full disk
  const auto before = snapshot(dir);
  expect_one_line_error(run_app("pretrain", kTiny + "--steps 2 --out run", dir), "pretrain", "best/ but no last/");
  expect_one_line_error(run_app("pretrain", "--resume --steps 6 --device cpu --out run", dir), "pretrain", "best/");
  EXPECT_EQ(snapshot(dir), before);
  // The same for a folder written before run folders had a marker.
  fs::remove(dir / "run" / "mvgpt-run.json");
  expect_one_line_error(run_app("pretrain", kTiny + "--steps 2 --out run", dir), "pretrain", "already holds a run");
  EXPECT_TRUE(fs::exists(dir / "run" / "best" / "model.safetensors"));
}

TEST_F(RunFolders, OverwriteKeepsTheOldRunUntilTheNewOneHasACheckpoint) {
  const fs::path dir = scratch("overwrite");
  ASSERT_EQ(run_app("pretrain", kTiny + "--steps 4 --eval-interval 2 --out run", dir).code, 0);
  const auto before = snapshot(dir / "run");
  // A replacement that diverges at step 1 saves nothing: the old run is back, whole.
  RunResult r = run_app("pretrain", kTiny + "--overwrite --lr 1e30 --warmup-steps 0 --steps 6 --eval-interval 6 --out run", dir);
  expect_one_line_error(r, "pretrain", "step 2: the loss is");
  EXPECT_EQ(r.err.find("--resume"), std::string::npos) << "nothing of the new run to resume: " << r.err;
  EXPECT_NE(r.out.find("kept until this run's first checkpoint"), std::string::npos) << r.out;
  EXPECT_EQ(snapshot(dir / "run"), before);
  // A replacement that saves: the old run is gone, the new one is there.
  r = run_app("pretrain", kTiny + "--overwrite --steps 2 --eval-interval 2 --out run", dir);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(state_step(dir / "run" / "last"), 2);
  EXPECT_FALSE(fs::exists(dir / "run" / ".replaced"));
  // Killed after moving the old run aside and before the first checkpoint: the next start puts it back.
  fs::create_directories(dir / "run" / ".replaced");
  for (const char* name : {"last", "best", "log.csv", "tensorboard"}) fs::rename(dir / "run" / name, dir / "run" / ".replaced" / name);
  write_text(dir / "run" / "log.csv", "step,train_loss\n1,5.0\n");  // the killed replacement's
  r = run_app("pretrain", "--resume --steps 3 --device cpu --out run", dir);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("put back the run an interrupted --overwrite had moved aside"), std::string::npos) << r.out;
  EXPECT_EQ(state_step(dir / "run" / "last"), 3);
  EXPECT_FALSE(fs::exists(dir / "run" / ".replaced"));
}

// Waits until `pred` holds (true) or `seconds` pass (false).
template <typename Pred>
bool wait_for(Pred pred, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

int wait_exit_code(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Kills and reaps a spawned run when a failed assertion leaves the test early.
struct KillOnExit {
  pid_t pid;
  ~KillOnExit() {
    if (::kill(pid, 0) == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

TEST_F(RunFolders, ARunFolderIsLockedWhileARunTrainsInIt) {
  const fs::path dir = scratch("locked");
  // A leftover of a save killed in another PID namespace, in a run folder: pid 1 is alive here, but
  // under the lock nobody can be saving into the folder, so it is removed.
  ASSERT_EQ(run_app("pretrain", kTiny + "--steps 1 --eval-interval 1 --out run", dir).code, 0);
  fs::create_directories(dir / "run" / "last.tmp.1");
  const pid_t pid = spawn_pretrain(kTiny + "--steps 100000 --eval-interval 5 --overwrite --out run", dir, dir / "first.log");
  KillOnExit guard{pid};
  ASSERT_TRUE(wait_for([&] { return fs::exists(dir / "run" / "last" / "state.json") && state_step(dir / "run" / "last") >= 5; }, 120))
      << slurp(dir / "first.log");
  EXPECT_FALSE(fs::exists(dir / "run" / "last.tmp.1"));
  EXPECT_NE(slurp(dir / "first.log").find("removed last.tmp.1"), std::string::npos) << slurp(dir / "first.log");
  // A second process is refused whatever it asks for, and changes nothing.
  for (const char* flags : {"", "--overwrite ", "--resume "}) {
    SCOPED_TRACE(flags);
    const std::string args = std::string(flags) == "--resume " ? "--resume --steps 100 --device cpu --out run"
                                                                : kTiny + flags + "--steps 3 --out run";
    expect_one_line_error(run_app("pretrain", args, dir), "pretrain", "is in use by another process (pid " + std::to_string(pid));
  }
  ::kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit_code(pid), 128 + SIGTERM) << slurp(dir / "first.log");
  EXPECT_FALSE(fs::exists(dir / "run" / "mvgpt-run.lock"));
  // Released with the process: the run continues.
  RunResult r = run_app("pretrain", "--resume --steps " + std::to_string(state_step(dir / "run" / "last") + 1) +
                        " --device cpu --out run", dir);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
}

// SIGTERM and SIGHUP (kill, timeout, systemd, batch schedulers) stop like Ctrl-C: the step ends, last/
// is saved at it, the exit code is 128 + the signal, and --resume continues from there.
TEST_F(RunFolders, SigtermAndSighupSaveAndExitLikeCtrlC) {
  const fs::path dir = scratch("signals");
  for (int sig : {SIGTERM, SIGHUP, SIGINT}) {
    SCOPED_TRACE(sig);
    const std::string out = "run" + std::to_string(sig);
    const fs::path log = dir / (out + ".log");
    const pid_t pid = spawn_pretrain(kTiny + "--steps 100000 --eval-interval 100000 --out " + out, dir, log);
    KillOnExit guard{pid};
    ASSERT_TRUE(wait_for([&] { return slurp(log).find("step     3") != std::string::npos; }, 120)) << slurp(log);
    ::kill(pid, sig);
    EXPECT_EQ(wait_exit_code(pid), 128 + sig) << slurp(log);
    const std::string text = slurp(log);
    EXPECT_NE(text.find("continue with the same command and --resume"), std::string::npos) << text;
    ASSERT_TRUE(fs::exists(dir / out / "last" / "state.json")) << text;
    EXPECT_GE(state_step(dir / out / "last"), 3);
  }
}

TEST_F(RunFolders, EachRunKeepsItsOwnTensorBoardEvents) {
  const fs::path dir = scratch("tensorboard");
  for (const char* out : {"exp1/pretrain", "exp2/pretrain", "runs/x"})
    ASSERT_EQ(run_app("pretrain", kTiny + "--steps 2 --eval-interval 2 --out " + std::string(out), dir).code, 0) << out;
  for (const char* out : {"exp1/pretrain", "exp2/pretrain", "runs/x"}) {
    SCOPED_TRACE(out);
    EXPECT_TRUE(fs::exists(dir / out / "log.csv"));
    int files = 0;
    for (const auto& e : fs::directory_iterator(dir / out / "tensorboard")) files += !read_scalar_events(e.path().string()).empty();
    EXPECT_EQ(files, 1);
  }
}

// Settings read back from state.json pass the flags' checks (a zero interval was a SIGFPE, zero
// windows a held-out loss of 0 recorded as the best).
TEST_F(RunFolders, SettingsFromStateJsonAreCheckedLikeTheFlags) {
  const fs::path dir = scratch("state");
  ASSERT_EQ(run_app("pretrain", kTiny + "--steps 2 --eval-interval 2 --out run", dir).code, 0);
  const std::string original = slurp(dir / "run" / "last" / "state.json");
  for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"eval_interval", 0}, {"eval_windows", 0}, {"batch_size", -4}, {"lr", -1.0}, {"beta2", 1.5}, {"warmup_steps", 1000}}) {
    SCOPED_TRACE(key);
    nlohmann::json j = nlohmann::json::parse(original);
    j["settings"][key] = value;
    write_text(dir / "run" / "last" / "state.json", j.dump(2));
    fs::remove(dir / "run" / "last" / "checksums.json");  // an edit the checksums would catch first; older runs have none
    const auto before = snapshot(dir / "run");
    expect_one_line_error(run_app("pretrain", "--resume --steps 4 --device cpu --out run", dir), "pretrain",
                          "state.json: settings." + key);
    EXPECT_EQ(snapshot(dir / "run"), before);
  }
}

// prepare's three files change together or not at all: a write that fails part way (here a file-size
// limit, as a full disk would) leaves the old three, byte for byte; and files of two prepare runs
// mixed in one folder are refused by the apps that read them.
TEST_F(RunFolders, PrepareReplacesItsFilesAllAtOnceOrNotAtAll) {
  const fs::path dir = scratch("prepare");
  const auto before = snapshot(dir / "data");
  int failed = 0;
  for (int kib : {1, 2, 4, 8, 16, 32}) {
    SCOPED_TRACE(kib);
    // SIGXFSZ ignored: past the limit a write fails with EFBIG instead of killing the process.
    RunResult r = run_command("trap '' XFSZ; ulimit -f " + std::to_string(kib) + "; '" + app_path("prepare") +
                              "' --data-dir ../../stories --vocab-size 280 --out data", dir);
    if (r.code == 0) break;
    ++failed;
    EXPECT_EQ(r.code, 1) << r.out << r.err;
    EXPECT_EQ(snapshot(dir / "data"), before) << r.err;
  }
  EXPECT_GT(failed, 0) << "no limit was small enough to fail a write";
  fs::remove_all(dir / "data");
  fs::copy(prepared() / "data", dir / "data", fs::copy_options::recursive);
  // Mixed files: train.bin of a vocabulary of 280 beside the tokenizer of 300.
  ASSERT_EQ(run_app("prepare", "--data-dir ../../stories --vocab-size 280 --out data280", dir).code, 0);
  fs::copy_file(dir / "data280" / "train.bin", dir / "data" / "train.bin", fs::copy_options::overwrite_existing);
  expect_one_line_error(run_app("pretrain", kTiny + "--steps 2 --out run", dir), "pretrain",
                        "data/train.bin is not the file prepare wrote with the others in its folder");
  fs::copy_file(dir / "data280" / "valid.bin", dir / "data" / "valid.bin", fs::copy_options::overwrite_existing);
  ASSERT_EQ(run_app("pretrain", "--config tiny.json --batch-size 4 --eval-windows 4 --device cpu --steps 2 --data data280 --out run280", dir).code, 0);
  expect_one_line_error(run_app("evaluate", "--ckpt run280 --tokens data/valid.bin --device cpu", dir), "evaluate",
                        "data/valid.bin is not the file prepare wrote");
}

// A TensorBoard file that cannot be written says which and why (it stopped training without a word).
TEST(TensorBoardWriter, AWriteThatFailsNamesTheFileAndTheReason) {
  const fs::path dir = fs::temp_directory_path() / ("mvgpt_tb_limit_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const pid_t pid = ::fork();
  if (pid == 0) {  // the limit is the child's alone
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    try {
      TensorBoardWriter tb(dir.string());
      for (int step = 0; step < 100000; ++step) {
        tb.add_scalar("loss/train", 1.0, step);
        tb.flush();
      }
      ::_exit(2);  // never failed
    } catch (const std::exception& e) {
      const std::string what = e.what();
      ::_exit(what.find(dir.string()) != std::string::npos && what.find("File too large") != std::string::npos ? 0 : 3);
    }
  }
  EXPECT_EQ(wait_exit_code(pid), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mvgpt::apps::testing
