// Nothing lost, round two (issue 26): the newer apps and the edges between apps held to the same
// principles as the run folders (docs/reliability.md). Each test reproduces a case that lost data,
// answered wrongly or crashed before its fix, in the scratch folder of the suite; nothing outside it
// is touched.
#include <sys/file.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "app_runner.h"
#include <mvgpt/backends/ops.h>
#include <mvgpt/nn/safetensors.h>

namespace mvgpt::apps::testing {
namespace {

class NothingLost : public AppsTest {
 protected:
  // A LoRA fine-tune of the tiny rotary model, once per process: ft-nl/lora (its adapter in best/).
  static fs::path lora_run() {
    static const fs::path run = [] {
      trained(true);
      RunResult r = run_app("pretrain", "--init-from checkpoints/tiny-rope --lora-rank 2 --lr 0.01 --steps 2 --batch-size 2 "
                            "--eval-interval 2 --eval-windows 2 --device cpu --out ft-nl/lora", prepared());
      EXPECT_EQ(r.code, 0) << r.out << r.err;
      return prepared() / "ft-nl" / "lora";
    }();
    return run;
  }

  // The adapter of lora_run() rewritten into nl/<name>.safetensors by `edit` (tensors and metadata).
  static std::string edited_adapter(const std::string& name,
                                    const std::function<void(safetensors::NamedTensors&, safetensors::Metadata&)>& edit) {
    auto file = safetensors::load((lora_run() / "best" / "adapter.safetensors").string());
    safetensors::NamedTensors tensors;
    for (const auto& [n, t] : file.tensors) tensors.emplace_back(n, ops::clone(t));
    edit(tensors, file.metadata);
    const fs::path out = prepared() / "nl" / (name + ".safetensors");
    fs::create_directories(out.parent_path());
    safetensors::save(out.string(), tensors, file.metadata);
    return fs::relative(out, prepared()).string();
  }

  // The lines of a run's log.csv after the header, as their step numbers.
  static std::vector<int64_t> logged_steps(const fs::path& run) {
    std::vector<int64_t> steps;
    std::istringstream in(slurp(run / "log.csv"));
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line))
      if (!line.empty()) steps.push_back(std::stoll(line.substr(0, line.find(','))));
    return steps;
  }
};

// The app's one error line, after whatever progress it printed on stderr first (prepare, context).
void expect_error_last(const RunResult& r, const std::string& app, const std::string& needle, int code = 1) {
  EXPECT_EQ(r.code, code) << r.out << r.err;
  const size_t at = r.err.find(app + ": error: ");
  ASSERT_NE(at, std::string::npos) << r.err;
  EXPECT_TRUE(at == 0 || r.err[at - 1] == '\n') << r.err;
  EXPECT_EQ(r.err.find('\n', at), r.err.size() - 1) << "the error is not the last line: " << r.err;
  EXPECT_NE(r.err.find(needle, at), std::string::npos) << "expected '" << needle << "' in: " << r.err;
}

bool has_temporary(const fs::path& dir) {
  if (!fs::exists(dir)) return false;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) return true;
  return false;
}

// Case 1: prepare --out into a checkpoint replaced its tokenizer.json, and the run never loaded again.
TEST_F(NothingLost, PrepareWritesOnlyIntoAFolderOfItsOwn) {
  const fs::path cwd = prepared();
  const fs::path run = trained(true);
  const auto before = snapshot(run);
  expect_one_line_error(run_app("prepare", "--data-dir stories --vocab-size 300 --out checkpoints/tiny-rope", cwd), "prepare",
                        "holds files prepare did not write");
  expect_one_line_error(run_app("prepare", "--data-dir stories --vocab-size 300 --out checkpoints/tiny-rope/best", cwd), "prepare",
                        "is inside checkpoints/tiny-rope, a training run's folder", 2);
  EXPECT_EQ(snapshot(run), before) << "prepare changed a checkpoint";
  // Someone's folder of notes.
  write_text(cwd / "nl" / "notes" / "todo.txt", "mine\n");
  expect_one_line_error(run_app("prepare", "--data-dir stories --vocab-size 300 --out nl/notes", cwd), "prepare",
                        "(todo.txt)");
  EXPECT_FALSE(fs::exists(cwd / "nl" / "notes" / "tokenizer.json"));
  // Its own folder again, and a folder that holds this run's own inputs (finetune.sh's layout): fine.
  ASSERT_EQ(run_app("prepare", "--data-dir stories --vocab-size 300 --out nl/data", cwd).code, 0);
  RunResult again = run_app("prepare", "--data-dir stories --vocab-size 290 --out nl/data", cwd);
  EXPECT_EQ(again.code, 0) << again.err;
  fs::create_directories(cwd / "nl" / "with-inputs");
  fs::copy_file(cwd / "stories" / "train.txt", cwd / "nl" / "with-inputs" / "train.txt");
  fs::copy_file(cwd / "stories" / "valid.txt", cwd / "nl" / "with-inputs" / "valid.txt");
  RunResult inputs = run_app("prepare", "--train nl/with-inputs/train.txt --valid nl/with-inputs/valid.txt "
                             "--tokenizer data/tokenizer.json --out nl/with-inputs", cwd);
  EXPECT_EQ(inputs.code, 0) << inputs.err;
  EXPECT_TRUE(fs::exists(cwd / "nl" / "with-inputs" / "train.bin"));
}

// Case 2: a SIGKILL right after a checkpoint lost that step's row of log.csv for good.
TEST_F(NothingLost, ASigkillRightAfterACheckpointKeepsItsLogRow) {
  const fs::path cwd = prepared();
  write_text(cwd / "nl" / "tiny.json", tiny_config(false));
  const std::string args = "--config nl/tiny.json --steps 6 --batch-size 2 --eval-interval 3 --eval-windows 2 --device cpu "
                           "--out nl/killed";
  const RunResult killed = run_app("pretrain", args + " --debug-kill-after-save 3", cwd);
  ASSERT_NE(killed.code, 0);
  ASSERT_TRUE(fs::exists(cwd / "nl" / "killed" / "last" / "state.json"));
  RunResult resumed = run_app("pretrain", "--resume --device cpu --out nl/killed", cwd);
  ASSERT_EQ(resumed.code, 0) << resumed.out << resumed.err;
  EXPECT_EQ(logged_steps(cwd / "nl" / "killed"), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
}

// Case 3: a NaN in an adapter gave a finite loss and garbage stories; an infinity a "-nan" loss.
TEST_F(NothingLost, NonFiniteAdapterValuesAreRefused) {
  const fs::path cwd = prepared();
  lora_run();
  for (const float bad : {NAN, INFINITY}) {
    const std::string adapter = edited_adapter(std::isnan(bad) ? "nan" : "inf", [&](safetensors::NamedTensors& t, safetensors::Metadata&) {
      for (auto& [name, tensor] : t)
        if (name.find("lora_B") != std::string::npos) tensor.data<float>()[1] = bad;
    });
    for (const std::string app : {"evaluate", "generate", "context", "merge"}) {
      SCOPED_TRACE(app + " " + adapter);
      std::string extra = app == "generate" ? " --max-new-tokens 5 --device cpu"
                          : app == "merge"  ? " --out nl/merged-bad"
                          : app == "context" ? " --length 40 --streams 1 --no-plot --out-dir nl/ctx --device cpu"
                                             : " --device cpu";
      expect_one_line_error(run_app(app, "--ckpt checkpoints/tiny-rope --adapter " + adapter + extra, cwd), app,
                            "holds a non-finite value (NaN or infinity) at element 1");
    }
  }
  EXPECT_FALSE(fs::exists(cwd / "nl" / "merged-bad"));
}

// Case 4: an adapter whose lora_alpha is 1e38 merged into weights that overflow, and evaluate printed
// a "-nan" loss with exit 0. Every figure an app reports is finite, or the app fails.
TEST_F(NothingLost, AFigureThatIsNotFiniteIsAnError) {
  const fs::path cwd = prepared();
  lora_run();
  const std::string huge = edited_adapter("alpha", [](safetensors::NamedTensors&, safetensors::Metadata& meta) {
    for (auto& [k, v] : meta)
      if (k == "lora_alpha") v = "1e38";
  });
  expect_one_line_error(run_app("merge", "--ckpt checkpoints/tiny-rope --adapter " + huge + " --out nl/merged-huge", cwd), "merge",
                        "lora_alpha 1e38");
  expect_one_line_error(run_app("evaluate", "--ckpt checkpoints/tiny-rope --adapter " + huge + " --device cpu", cwd), "evaluate",
                        "out of range");
  EXPECT_FALSE(fs::exists(cwd / "nl" / "merged-huge"));
  // Finite weights whose forward pass overflows: evaluate and context fail instead of printing nan.
  const fs::path dir = cwd / "nl" / "overflow";
  fs::copy(trained(true) / "best", dir, fs::copy_options::recursive);
  fs::remove(dir / "checksums.json");  // an edited checkpoint: what is left to catch it is the figure
  auto file = safetensors::load((dir / "model.safetensors").string());
  safetensors::NamedTensors tensors;
  for (const auto& [n, t] : file.tensors) {
    Tensor c = ops::clone(t);
    if (n.find("ln_f.weight") != std::string::npos)
      for (int64_t i = 0; i < c.numel(); ++i) c.data<float>()[i] = 3e38f;
    tensors.emplace_back(n, c);
  }
  safetensors::save((dir / "model.safetensors").string(), tensors, file.metadata);
  expect_one_line_error(run_app("evaluate", "--ckpt nl/overflow --device cpu", cwd), "evaluate", "(not a finite number)");
  expect_error_last(run_app("context", "--ckpt nl/overflow --length 40 --streams 1 --no-plot --out-dir nl/ctx-o --device cpu", cwd),
                        "context", "(not a finite number)");
}

// Case 5: --resume of a finished --steps run trained ten more minutes at the final rate, unannounced.
TEST_F(NothingLost, ResumingAFinishedRunSaysItIsComplete) {
  const fs::path cwd = prepared();
  write_text(cwd / "nl" / "tiny.json", tiny_config(true));
  ASSERT_EQ(run_app("pretrain", "--config nl/tiny.json --steps 3 --batch-size 2 --eval-windows 2 --device cpu --out nl/done", cwd).code, 0);
  const auto before = snapshot(cwd / "nl" / "done");
  expect_one_line_error(run_app("pretrain", "--resume --device cpu --out nl/done", cwd), "pretrain",
                        "the run is complete: it was trained to --steps 3, and last/ holds step 3; to train it further, pass a "
                        "larger --steps with --resume");
  EXPECT_EQ(snapshot(cwd / "nl" / "done"), before);
  RunResult further = run_app("pretrain", "--resume --steps 4 --device cpu --out nl/done", cwd);
  ASSERT_EQ(further.code, 0) << further.err;
  EXPECT_NE(further.out.find("step     4/4"), std::string::npos) << further.out;
  // Killed part way, it resumes to its own end without being told it again.
  ASSERT_NE(run_app("pretrain", "--config nl/tiny.json --steps 4 --eval-interval 2 --batch-size 2 --eval-windows 2 --device cpu "
                    "--out nl/part --debug-kill-after-save 2", cwd).code, 0);
  RunResult rest = run_app("pretrain", "--resume --device cpu --out nl/part", cwd);
  ASSERT_EQ(rest.code, 0) << rest.err;
  EXPECT_NE(rest.out.find("step     4/4"), std::string::npos) << rest.out;
}

// Case 6: held-out stories that are the training ones, and a file without separators, went unsaid.
TEST_F(NothingLost, PrepareRefusesHeldOutStoriesThatAreTheTrainingOnes) {
  const fs::path cwd = prepared();
  expect_one_line_error(run_app("prepare", "--train stories/train.txt --valid stories/train.txt --out nl/same", cwd), "prepare",
                        "are the training file");
  fs::create_directories(cwd / "nl");
  fs::copy_file(cwd / "stories" / "train.txt", cwd / "nl" / "copy.txt", fs::copy_options::overwrite_existing);
  expect_one_line_error(run_app("prepare", "--train stories/train.txt --valid nl/copy.txt --out nl/same", cwd), "prepare",
                        "hold the same bytes as");
  EXPECT_FALSE(fs::exists(cwd / "nl" / "same"));
  write_text(cwd / "nl" / "play.txt", "To be, or not to be, that is the question.\nWhether 'tis nobler in the mind to suffer.\n");
  RunResult one = run_app("prepare", "--train nl/play.txt --valid stories/valid.txt --vocab-size 260 --out nl/play", cwd);
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_NE(one.out.find("note: nl/play.txt has no <|endoftext|> line between stories"), std::string::npos) << one.out;
  EXPECT_EQ(one.out.find("note: stories/valid.txt"), std::string::npos) << one.out;
}

// Case 7: a file-size limit killed the apps with SIGXFSZ: exit 153 and not a word.
TEST_F(NothingLost, AFileSizeLimitIsAnErrorNotASignal) {
  const fs::path cwd = prepared();
  const fs::path run = trained(true);
  write_text(cwd / "nl" / "tiny.json", tiny_config(true));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"prepare", "--data-dir stories --vocab-size 300 --out nl/xfsz-data"},
      {"pretrain", "--config nl/tiny.json --steps 2 --batch-size 2 --eval-windows 2 --device cpu --out nl/xfsz-run"},
      {"export", "--ckpt " + run.string() + " --out nl/xfsz-hf"},
      {"merge", "--ckpt ft-nl/lora --out nl/xfsz-merged"},
      {"import", "--from nl/xfsz-src --out nl/xfsz-import"}};
  lora_run();
  ASSERT_EQ(run_app("export", "--ckpt " + run.string() + " --out nl/xfsz-src", cwd).code, 0);
  for (const auto& [app, args] : cases) {
    SCOPED_TRACE(app);
    RunResult r = run_command("ulimit -f 4; '" + app_path(app) + "' " + args, cwd);
    expect_error_last(r, app, "File too large");
  }
  for (const char* out : {"xfsz-data", "xfsz-hf", "xfsz-merged", "xfsz-import"}) {
    EXPECT_FALSE(fs::exists(cwd / "nl" / out)) << out;
    EXPECT_FALSE(fs::exists(cwd / "nl" / (std::string(out) + ".tmp." + "x"))) << out;
  }
  EXPECT_FALSE(has_temporary(cwd / "nl")) << "a temporary output was left behind";
}

// Case 8: a config asking for a model far larger than its weights file was allocated first.
TEST_F(NothingLost, AConfigIsBoundedByItsWeightsBeforeAnythingIsAllocated) {
  const fs::path cwd = prepared();
  ASSERT_EQ(run_app("export", "--ckpt " + trained(true).string() + " --out nl/hf-big", cwd).code, 0);
  auto config = nlohmann::json::parse(slurp(cwd / "nl" / "hf-big" / "config.json"));
  config["hidden_size"] = 6144;
  write_text(cwd / "nl" / "hf-big" / "config.json", config.dump(2));
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::string app : {"evaluate", "generate", "import"}) {
    SCOPED_TRACE(app);
    const std::string args = app == "import" ? "--from nl/hf-big --out nl/big-import" : "--ckpt nl/hf-big --device cpu";
    // The peak resident memory of the app (python3's wait4 of its one child): the edited model
    // alone is 1.5 GB, the app without it a few tens of MB.
    const std::string command = "'" + app_path(app) + "' " + args;
    RunResult r = run_command("python3 -c 'import resource, subprocess, sys; subprocess.run(sys.argv[1], shell=True); "
                              "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' \"" + command + "\"", cwd);
    EXPECT_EQ(r.err.rfind(app + ": error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("describes a model of"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("nothing was allocated"), std::string::npos) << r.err;
    const size_t last = r.out.find_last_of('\n', r.out.size() - 2);  // the app's own output comes first
    ASSERT_FALSE(r.out.empty()) << r.err;
    EXPECT_LT(std::stod(r.out.substr(last == std::string::npos ? 0 : last + 1)), 600e3) << "KiB at the peak: the model was allocated before it was refused";
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
  // Our own format too (without checksums.json, which would catch the edit first).
  const fs::path own = cwd / "nl" / "wide";
  fs::copy(trained(true) / "best", own, fs::copy_options::recursive);
  fs::remove(own / "checksums.json");
  auto ours = nlohmann::json::parse(slurp(own / "config.json"));
  ours["n_embd"] = 4096;
  ours["mlp_hidden"] = 16384;
  write_text(own / "config.json", ours.dump(2));
  expect_one_line_error(run_app("evaluate", "--ckpt nl/wide --device cpu", cwd), "evaluate", "describes a model of");
}

// Case 9: an export that failed or was killed left <out>.tmp.<pid> behind for good.
TEST_F(NothingLost, TemporaryOutputsOfDeadWritersAreRemovedAndLiveOnesRefused) {
  const fs::path cwd = prepared();
  const std::string ckpt = trained(true).string();
  // A writer that died: its temporary folder (nobody holds its lock) goes at the next start.
  write_text(cwd / "nl" / "hf-dead.tmp.999999" / "model.safetensors", "half");
  RunResult r = run_app("export", "--ckpt " + ckpt + " --out nl/hf-dead", cwd);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("removed nl/hf-dead.tmp.999999, left by a export"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(cwd / "nl" / "hf-dead.tmp.999999"));
  // A writer that is alive (here: this test holds the lock its temporary folder carries).
  fs::create_directories(cwd / "nl" / "hf-live.tmp.1");
  const int fd = ::open((cwd / "nl" / "hf-live.tmp.1").c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  for (const std::string app : {"export", "merge", "import"}) {
    SCOPED_TRACE(app);
    const std::string args = app == "export" ? "--ckpt " + ckpt : app == "merge" ? "--ckpt ft-nl/lora" : "--from nl/hf-dead";
    if (app == "merge") lora_run();
    expect_one_line_error(run_app(app, args + " --out nl/hf-live", cwd), app, "is being written by another process");
  }
  EXPECT_TRUE(fs::exists(cwd / "nl" / "hf-live.tmp.1"));
  ::close(fd);
  fs::remove_all(cwd / "nl" / "hf-live.tmp.1");
  EXPECT_FALSE(has_temporary(cwd / "nl"));
}

// Case 10: range errors printed the largest double in 309 digits, and said 0 was outside [0, ...].
TEST_F(NothingLost, RangeErrorsSayWhatIsAllowedInOneShortLine) {
  const fs::path cwd = prepared();
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"pretrain", "--init-from x --lora-rank 0", "--lora-rank: 0 is not allowed; expected a whole number of at least 1"},
      {"pretrain", "--lr -1", "--lr: -1 is not allowed; expected a number above 0"},
      {"pretrain", "--steps 0", "--steps: 0 is not allowed; expected a whole number of at least 1"},
      {"pretrain", "--batch-size 0", "--batch-size: 0 is not allowed"},
      {"pretrain", "--beta2 1.5", "--beta2: 1.5 is not allowed; expected a number from 0 to 0.999999"},
      {"pretrain", "--dropout -0.1", "expected a number from 0 to 0.99"},
      {"context", "--ckpt x --streams 0", "--streams: 0 is not allowed"},
      {"evaluate", "--ckpt x --batch-size 0", "--batch-size: 0 is not allowed"},
      {"generate", "--ckpt x --num-samples 0", "--num-samples: 0 is not allowed"},
      {"generate", "--ckpt x --temperature -1", "--temperature: -1 is not allowed; expected a number of at least 0"},
      {"generate", "--ckpt x --top-k -1", "--top-k: -1 is not allowed; expected a whole number of at least 0"},
      {"generate", "--ckpt x --top-p 0", "--top-p: 0 is not allowed; expected a number above 0 and at most 1"},
      {"prepare", "--tokenizer-mb -1", "--tokenizer-mb: -1 is not allowed"},
      {"prepare", "--vocab-size 100", "--vocab-size: 100 is not allowed; expected a whole number from 257 to 65536"},
      {"pretrain", "--lr 1e-3 --lr 2e-3", "--lr is given 2 times; give it once"},
  };
  for (const auto& [app, args, needle] : cases) {
    SCOPED_TRACE(app + " " + args);
    RunResult r = run_app(app, args, cwd);
    expect_one_line_error(r, app, needle, 2);
    EXPECT_LT(r.err.size(), 160u) << r.err;
    EXPECT_EQ(r.err.find("179769"), std::string::npos) << r.err;
  }
}

// Case 11: --lora-targets , swallowed the flags after it and left an empty checkpoints/ behind.
TEST_F(NothingLost, AnEmptyLayerNameIsRefusedAndNoFolderIsLeftBehind) {
  const fs::path cwd = prepared();
  trained(true);
  for (const std::string targets : {",", "''", "c_attn,,c_fc"}) {
    SCOPED_TRACE(targets);
    expect_one_line_error(run_app("pretrain", "--init-from checkpoints/tiny-rope --lora-rank 2 --lora-targets " + targets +
                                  " --steps 1 --device cpu --out nl-lora/ck/run", cwd),
                          "pretrain", "names an empty layer", 2);
  }
  // A run that fails after its folder was made takes the folders it made with it.
  expect_one_line_error(run_app("pretrain", "--init-from checkpoints/tiny-rope --lora-rank 2 --lora-targets no_such_layer "
                                "--steps 1 --device cpu --out nl-lora/ck/run", cwd),
                        "pretrain", "no_such_layer");
  EXPECT_FALSE(fs::exists(cwd / "nl-lora"));
}

// Case 12: causes misreported.
TEST_F(NothingLost, EachFailureNamesItsRealCause) {
  const fs::path cwd = prepared();
  // A Hugging Face config with a number out of range is a Hugging Face config with a bad number.
  ASSERT_EQ(run_app("export", "--ckpt " + trained(true).string() + " --out nl/hf-1e400", cwd).code, 0);
  std::string config = slurp(cwd / "nl" / "hf-1e400" / "config.json");
  const size_t at = config.find("\"hidden_size\": ");
  ASSERT_NE(at, std::string::npos) << config;
  config.replace(at, config.find(',', at) - at, "\"hidden_size\": 1e400");
  write_text(cwd / "nl" / "hf-1e400" / "config.json", config);
  RunResult hf = run_app("import", "--from nl/hf-1e400 --out nl/x", cwd);
  expect_one_line_error(hf, "import", "hidden_size");
  EXPECT_EQ(hf.err.find("not a Hugging Face folder"), std::string::npos) << hf.err;
  // A tokenizer.bin whose header says 0 is a tokenizer.bin with a bad header, not bad JSON.
  std::string bin(4, '\0');
  bin += std::string("\x00\x00\x80\x3f\x01\x00\x00\x00" "a", 9);
  write_text(cwd / "nl" / "zero.bin", bin);
  RunResult tok = run_app("prepare", "--data-dir stories --tokenizer nl/zero.bin --out nl/tok", cwd);
  expect_one_line_error(tok, "prepare", "max_token_length is 0");
  EXPECT_EQ(tok.err.find("JSON"), std::string::npos) << tok.err;
  // A cut or empty adapter is a damaged file, not one of another model.
  lora_run();
  const std::string adapter = slurp(lora_run() / "best" / "adapter.safetensors");
  write_text(cwd / "nl" / "cut.safetensors", adapter.substr(0, adapter.size() / 2));
  write_text(cwd / "nl" / "empty.safetensors", "");
  for (const std::string file : {"nl/cut.safetensors", "nl/empty.safetensors"}) {
    SCOPED_TRACE(file);
    RunResult r = run_app("evaluate", "--ckpt checkpoints/tiny-rope --adapter " + file + " --device cpu", cwd);
    expect_one_line_error(r, "evaluate", "the file is damaged or not an adapter");
    EXPECT_EQ(r.err.find("another model"), std::string::npos) << r.err;
  }
  // --init-from a folder that does not exist.
  expect_one_line_error(run_app("pretrain", "--init-from no/such/run --steps 1 --device cpu --out nl/never", cwd), "pretrain",
                        "checkpoint no/such/run: no such folder");
  EXPECT_FALSE(fs::exists(cwd / "nl" / "never"));
}

// The red-team pass over the apps since "Nothing lost": outputs inside another app's folder, a
// fine-tune over its own base, a rank no layer allows, a prompt without end.
TEST_F(NothingLost, NoAppWritesIntoAnotherAppsFolderOrOverWhatItReads) {
  const fs::path cwd = prepared();
  const fs::path run = trained(true);
  lora_run();
  write_text(cwd / "nl" / "tiny.json", tiny_config(true));
  const auto before = snapshot(run);
  // An export inside a run's last/ was deleted by the run's next save.
  expect_one_line_error(run_app("export", "--ckpt checkpoints/tiny-rope --out checkpoints/tiny-rope/last/hf", cwd), "export",
                        "is inside checkpoints/tiny-rope/last, a checkpoint", 2);
  expect_one_line_error(run_app("merge", "--ckpt ft-nl/lora --out ft-nl/lora/best/merged", cwd), "merge",
                        "is inside ft-nl/lora/best, a checkpoint", 2);
  expect_one_line_error(run_app("export", "--ckpt checkpoints/tiny-rope --out data/hf", cwd), "export",
                        "is inside data, prepare's data folder", 2);
  expect_one_line_error(run_app("pretrain", "--config nl/tiny.json --steps 1 --device cpu --out checkpoints/tiny-rope/sub", cwd),
                        "pretrain", "is inside checkpoints/tiny-rope, a training run's folder", 2);
  expect_error_last(run_app("context", "--ckpt checkpoints/tiny-rope --length 40 --streams 1 --no-plot --device cpu "
                            "--out-dir checkpoints/tiny-rope/best/plots", cwd),
                    "context", "is inside checkpoints/tiny-rope/best, a checkpoint", 2);
  // A fine-tune whose --out is its own base: with --overwrite it moved the base aside and deleted it.
  expect_one_line_error(run_app("pretrain", "--init-from checkpoints/tiny-rope --steps 1 --device cpu --overwrite "
                                "--out checkpoints/tiny-rope", cwd),
                        "pretrain", "holds the checkpoint --init-from reads", 2);
  EXPECT_EQ(snapshot(run), before);
  // A LoRA rank past the layers' sides (width 32) asked for memory that no adapter needs.
  expect_one_line_error(run_app("pretrain", "--init-from checkpoints/tiny-rope --lora-rank 1000000000 --steps 1 --device cpu "
                                "--out nl/rank", cwd),
                        "pretrain", "--lora-rank 1000000000 is larger than the model's width (32)", 2);
  EXPECT_FALSE(fs::exists(cwd / "nl" / "rank"));
  // A window far past the memory: a --block-size of 16M took a minute and 8 GB for three tokens.
  RunResult window = run_command("MVGPT_AVAILABLE_MEMORY=2000000000 '" + app_path("generate") +
                                 "' --ckpt checkpoints/tiny-rope --block-size 16777216 --max-new-tokens 3 --device cpu", cwd);
  expect_one_line_error(window, "generate", "over 16777216 positions (batch 1) needs about");
  EXPECT_NE(window.err.find("use a smaller --block-size"), std::string::npos) << window.err;
  // A token file handed over as the tokenizer.
  expect_one_line_error(run_app("prepare", "--data-dir stories --tokenizer data/train.bin --out nl/tok2", cwd), "prepare",
                        "data/train.bin is an llm.c token file (train.bin, valid.bin), not a tokenizer");
  // A prompt without end on standard input.
  RunResult endless = run_command("head -c 20000000 /dev/zero | '" + app_path("generate") +
                                  "' --ckpt checkpoints/tiny-rope --prompt-file - --device cpu", cwd);
  expect_one_line_error(endless, "generate", "the prompt on standard input is longer than 16 MiB");
}

// An adapter put on a model of the same shapes but other weights computed numbers of neither, unsaid.
TEST_F(NothingLost, AnAdapterOnOtherBaseWeightsIsSaid) {
  const fs::path cwd = prepared();
  lora_run();
  write_text(cwd / "nl" / "tiny.json", tiny_config(true));
  ASSERT_EQ(run_app("pretrain", "--config nl/tiny.json --seed 7 --steps 1 --batch-size 2 --eval-windows 2 --device cpu "
                    "--out nl/other-base", cwd).code, 0);
  const std::string adapter = " --adapter ft-nl/lora/best/adapter.safetensors --device cpu --max-windows 2";
  RunResult own = run_app("evaluate", "--ckpt checkpoints/tiny-rope" + adapter, cwd);
  ASSERT_EQ(own.code, 0) << own.err;
  EXPECT_EQ(own.err.find("warning"), std::string::npos) << own.err;
  RunResult other = run_app("evaluate", "--ckpt nl/other-base" + adapter, cwd);
  ASSERT_EQ(other.code, 0) << other.err;
  EXPECT_NE(other.err.find("evaluate: warning: ft-nl/lora/best/adapter.safetensors was trained on other base weights than "
                           "nl/other-base/best's"), std::string::npos) << other.err;
}

// A llama2.c model's floats were taken as they came: a NaN gave a nan loss after import.
TEST_F(NothingLost, NonFiniteLlama2cWeightsAreRefused) {
  const fs::path cwd = prepared();
  std::string bytes = slurp(fs::path(MVGPT_SOURCE_DIR) / "tests" / "fixtures" / "llama2c" / "tiny_v1.bin");
  ASSERT_GT(bytes.size(), 300u);
  const float nan = NAN;
  std::memcpy(bytes.data() + 256 + 4 * 3, &nan, 4);  // export.py --version 1: a 256-byte header, then the first norm
  write_text(cwd / "nl" / "nan.bin", bytes);
  expect_one_line_error(run_app("import", "--format llama2c --from nl/nan.bin --out nl/nan-import", cwd), "import",
                        "nl/nan.bin: the weights of transformer.h.0.ln_1.weight hold a non-finite value (NaN or infinity) at element 3");
  EXPECT_FALSE(fs::exists(cwd / "nl" / "nan-import"));
}

// context's --out-dir is a folder of its own, as every app's output is.
TEST_F(NothingLost, ContextWritesOnlyIntoAFolderOfItsOwn) {
  const fs::path cwd = prepared();
  trained(true);
  const auto before = snapshot(cwd / "data");
  expect_one_line_error(run_app("context", "--ckpt checkpoints/tiny-rope --length 40 --streams 1 --no-plot --out-dir data --device cpu",
                                cwd),
                        "context", "holds files context did not write");
  EXPECT_EQ(snapshot(cwd / "data"), before);
  for (int i = 0; i < 2; ++i) {  // its own folder, again and again
    RunResult r = run_app("context", "--ckpt checkpoints/tiny-rope --length 40 --streams 1 --no-plot --out-dir nl/ctx-own --device cpu",
                          cwd);
    ASSERT_EQ(r.code, 0) << r.err;
  }
}

}  // namespace
}  // namespace mvgpt::apps::testing
