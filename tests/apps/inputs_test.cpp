// Inputs that lie, resource limits and lost output (issue 20, items 7-9): damaged checkpoints, files
// with keys given twice or numbers out of range, CRLF stories, a tokenizer that asks for terabytes, a
// model vocabulary padded past its tokenizer's, output to a full disk, an --out-dir that is a file.
// Each case must end in one line naming the file and what is wrong (or, where the input is fine,
// in the right result), never in a "nan", a silent conversion or an endless story.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "app_runner.h"
#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/gpt/checkpoint.h>
#include <mvgpt/text/token_file.h>
#include <mvgpt/text/tokenizer.h>
#include <mvgpt/nn/safetensors.h>

namespace mvgpt::apps::testing {
namespace {

class LyingInputs : public AppsTest {
 protected:
  // A copy of the tiny learned-position model's best/ checkpoint (with its tokenizer) in bad/<name>.
  static fs::path copy_of_tiny(const std::string& name) {
    const fs::path src = trained(false) / "best";
    const fs::path dst = prepared() / "bad" / name;
    fs::remove_all(dst);
    fs::create_directories(dst.parent_path());
    fs::copy(src, dst, fs::copy_options::recursive);
    return dst;
  }
};

// Replaces the first `from` in the file by `to` (same length unless the test wants otherwise).
void edit_file(const fs::path& p, const std::string& from, const std::string& to) {
  std::string bytes = slurp(p);
  const size_t at = bytes.find(from);
  ASSERT_NE(at, std::string::npos) << from << " not in " << p;
  bytes.replace(at, from.size(), to);
  write_text(p, bytes);
}

TEST_F(LyingInputs, NonFiniteWeightsAreRefusedNotEvaluatedOrSampled) {
  const fs::path cwd = prepared();
  const fs::path dir = copy_of_tiny("nan");
  // A model saved with a NaN in it (a run that diverged): its checksums are valid.
  auto loaded = gpt::load_checkpoint(dir.string());
  const auto named = loaded.model->named_parameters();
  const std::string name = named[3].first;
  Tensor poisoned = ops::clone(named[3].second.detach());
  poisoned.data<float>()[1] = NAN;
  { NoGradGuard no_grad; ops::copy_(named[3].second, poisoned); }
  gpt::save_checkpoint(dir.string(), *loaded.model, loaded.metadata);
  for (const std::string app : {"evaluate", "generate"}) {
    SCOPED_TRACE(app);
    RunResult r = run_app(app, "--ckpt bad/nan --device cpu" + std::string(app == "generate" ? " --max-new-tokens 50" : ""), cwd);
    expect_one_line_error(r, app, "bad/nan/model.safetensors: tensor '" + name + "' holds a non-finite value");
    EXPECT_EQ(r.out.find("<|endoftext|><|endoftext|>"), std::string::npos) << r.out.substr(0, 200);
  }
}

TEST_F(LyingInputs, AFlippedBitInTheWeightsIsCaughtByTheChecksum) {
  const fs::path cwd = prepared();
  const fs::path dir = copy_of_tiny("flipped");
  std::string bytes = slurp(dir / "model.safetensors");
  bytes[bytes.size() - 203] ^= 0x04;  // a low mantissa bit: a finite, slightly different weight
  write_text(dir / "model.safetensors", bytes);
  for (const char* app : {"evaluate", "generate"}) {
    RunResult r = run_app(app, "--ckpt bad/flipped --device cpu", cwd);
    expect_one_line_error(r, app, "bad/flipped/model.safetensors does not match its checksum in checksums.json");
  }
  // Without checksums.json (a checkpoint saved before they existed) it loads as it did.
  fs::remove(dir / "checksums.json");
  EXPECT_EQ(run_app("evaluate", "--ckpt bad/flipped --device cpu --max-windows 2", cwd).code, 0);
}

TEST_F(LyingInputs, ATensorRelabelledAsAnIntegerIsRefusedNotConverted) {
  const fs::path cwd = prepared();
  const fs::path dir = copy_of_tiny("relabelled");
  // Same size per element, so the header stays consistent: only the meaning changes.
  edit_file(dir / "model.safetensors", "\"transformer.ln_f.weight\":{\"dtype\":\"F32\"",
            "\"transformer.ln_f.weight\":{\"dtype\":\"I32\"");
  expect_one_line_error(run_app("evaluate", "--ckpt bad/relabelled --device cpu", cwd), "evaluate",
                        "model.safetensors does not match its checksum");
  fs::remove(dir / "checksums.json");  // the dtype check itself, as for an older checkpoint
  expect_one_line_error(run_app("evaluate", "--ckpt bad/relabelled --device cpu", cwd), "evaluate",
                        "bad/relabelled/model.safetensors: tensor 'transformer.ln_f.weight' is I32, expected a float dtype (F32)");
}

TEST_F(LyingInputs, AKeyGivenTwiceOrANumberOutOfRangeInConfigJsonIsNamed) {
  const fs::path cwd = prepared();
  const fs::path dir = copy_of_tiny("config");
  fs::remove(dir / "checksums.json");  // the parser's own checks, behind the checksum
  const std::string good = slurp(dir / "config.json");
  edit_file(dir / "config.json", "\"n_layer\": 2,", "\"n_layer\": 2, \"n_layer\": 1,");
  expect_one_line_error(run_app("evaluate", "--ckpt bad/config --device cpu", cwd), "evaluate",
                        "bad/config/config.json: duplicate field \"n_layer\"");
  write_text(dir / "config.json", good);
  edit_file(dir / "config.json", "\"rope_base\": 10000.0", "\"rope_base\": 1e400");
  expect_one_line_error(run_app("generate", "--ckpt bad/config --device cpu", cwd), "generate",
                        "bad/config/config.json: field \"rope_base\": number out of range");
  // The same in a --config file.
  write_text(cwd / "bad" / "dup.json", "{\"vocab_size\": 300, \"n_embd\": 32, \"n_embd\": 64}");
  expect_one_line_error(run_app("pretrain", "--config bad/dup.json --steps 1 --device cpu --out bad/dup-run", cwd),
                        "pretrain", "bad/dup.json: duplicate field \"n_embd\"");
}

TEST_F(LyingInputs, CrlfStoriesGetTheirEndOfTextTokens) {
  const fs::path cwd = prepared();
  for (const char* split : {"train", "valid"}) {
    std::string crlf;
    for (char c : slurp(cwd / "stories" / (std::string(split) + ".txt"))) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
    write_text(cwd / "bad" / "crlf-stories" / (std::string(split) + ".txt"), crlf);
  }
  RunResult r = run_app("prepare", "--data-dir bad/crlf-stories --tokenizer data/tokenizer.json --out bad/crlf-data", cwd);
  ASSERT_EQ(r.code, 0) << r.err;
  const text::TokenId eot = text::Tokenizer::load((cwd / "data" / "tokenizer.json").string()).eot_id();
  for (const char* split : {"train", "valid"}) {
    SCOPED_TRACE(split);
    const text::TokenFile lf((cwd / "data" / (std::string(split) + ".bin")).string());
    const text::TokenFile crlf((cwd / "bad" / "crlf-data" / (std::string(split) + ".bin")).string());
    const auto count = [&](const text::TokenFile& f) { return std::count(f.data(), f.data() + f.size(), eot); };
    EXPECT_GT(count(lf), 0);
    EXPECT_EQ(count(crlf), count(lf));
  }
}

TEST_F(LyingInputs, ATokenizerWhoseMergesDoubleTheirTokensIsRefusedQuickly) {
  const fs::path cwd = prepared();
  trained(false);  // each test may run in a process of its own (ctest)
  std::string merges = "[97,97]";
  for (int i = 1; i < 40; ++i) merges += ",[" + std::to_string(255 + i) + "," + std::to_string(255 + i) + "]";
  write_text(cwd / "bad" / "bomb.json", "{\"type\":\"byte-bpe\",\"version\":1,\"merges\":[" + merges +
                                            "],\"special_tokens\":{\"<|endoftext|>\":296},\"vocab_size\":297}");
  EXPECT_LT(fs::file_size(cwd / "bad" / "bomb.json"), 600u);
  // Under a memory limit, so that without the bound the test fails instead of meeting the OOM killer
  // (not under AddressSanitizer, whose shadow memory alone reserves terabytes of address space).
#if defined(__SANITIZE_ADDRESS__)
  const std::string limit;
#else
  const std::string limit = "ulimit -v 4000000; ";
#endif
  const auto t0 = std::chrono::steady_clock::now();
  RunResult r = run_command(limit + "'" + app_path("generate") +
                            "' --ckpt checkpoints/tiny --tokenizer bad/bomb.json --device cpu", cwd);
  expect_one_line_error(r, "generate", "bad/bomb.json");
  EXPECT_NE(r.err.find("merge 20 [275, 275] makes a token of 2097152 bytes, past the limit of 1048576"), std::string::npos)
      << r.err;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
}

TEST_F(LyingInputs, AModelVocabularyPaddedPastTheTokenizersNeverDrawsIdsItLacks) {
  const fs::path cwd = prepared();
  write_text(cwd / "bad" / "padded.json", tiny_config(true, 400));  // the tokenizer has 300
  RunResult r = run_app("pretrain", "--config bad/padded.json --steps 2 --batch-size 4 --eval-interval 2 "
                        "--eval-windows 2 --device cpu --out bad/padded-run", cwd);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  // Nearly untrained: a quarter of the probability sits on ids 300..399.
  r = run_app("generate", "--ckpt bad/padded-run --max-new-tokens 200 --temperature 1.5 --device cpu", cwd);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find("error"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("200 tokens"), std::string::npos) << r.err;
}

TEST_F(LyingInputs, OutputThatCannotBeWrittenIsAnError) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const fs::path cwd = prepared();
  trained(false);
  trained(true);
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"evaluate", "--ckpt checkpoints/tiny --max-windows 2 --json --device cpu"},
      {"evaluate", "--ckpt checkpoints/tiny --max-windows 2 --device cpu"},
      {"context", "--ckpt checkpoints/tiny-rope --length 40 --streams 2 --json --no-plot --out-dir bad/ctx-full --device cpu"},
      {"generate", "--ckpt checkpoints/tiny --max-new-tokens 20 --device cpu"},
      {"prepare", "--data-dir stories --tokenizer data/tokenizer.json --out bad/prep-full"},
      {"pretrain", std::string("--config tiny.json --steps 1 --batch-size 4 --eval-interval 1 --eval-windows 2 ") +
                       "--device cpu --out bad/pretrain-full"},
  };
  write_text(cwd / "tiny.json", tiny_config(false));
  for (const auto& [app, args] : runs) {
    SCOPED_TRACE(app + " " + args);
    RunResult r = run_command(std::string("'").append(app_path(app)).append("' ").append(args).append(" > /dev/full"), cwd);
    EXPECT_EQ(r.code, 1) << r.err;
    // One error line (prepare and context print progress on stderr before it), and no other.
    EXPECT_NE(r.err.find(app + ": error: cannot write"), std::string::npos) << r.err;
    size_t errors = 0;
    for (size_t at = r.err.find(": error: "); at != std::string::npos; at = r.err.find(": error: ", at + 1)) ++errors;
    EXPECT_EQ(errors, 1u) << r.err;
  }
}

TEST_F(LyingInputs, AnOutDirThatIsAFileFailsBeforeAnyMeasuring) {
  const fs::path cwd = prepared();
  trained(true);
  write_text(cwd / "bad" / "a-file", "not a folder");
  const std::string run = "--ckpt checkpoints/tiny-rope --length 40 --streams 2 --device cpu --out-dir ";
  RunResult r = run_app("context", run + "bad/a-file", cwd);
  expect_one_line_error(r, "context", "--out-dir bad/a-file is a file, not a folder", 2);
  EXPECT_EQ(r.out, "");  // nothing measured
  r = run_app("context", run + "bad/a-file/sub", cwd);
  expect_one_line_error(r, "context", "bad/a-file/sub", 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(slurp(cwd / "bad" / "a-file"), "not a folder");
}

// A resumed run needs every parameter's moments: with some missing they would restart at zero and
// the run would no longer continue exactly.
TEST_F(LyingInputs, AnOptimizerFileMissingMomentsIsRefusedOnResume) {
  const fs::path cwd = prepared();
  const fs::path run = cwd / "bad" / "resume-run";
  fs::remove_all(run);
  fs::create_directories(run.parent_path());
  fs::copy(trained(false), run, fs::copy_options::recursive);
  const fs::path opt_path = run / "last" / "optimizer.safetensors";
  safetensors::File file = safetensors::load(opt_path.string(), {.mmap = false});
  safetensors::NamedTensors kept;
  for (const auto& [n, t] : file.tensors)
    if (n.rfind("ln_f.", 0) != 0) kept.emplace_back(n, t);
  ASSERT_LT(kept.size(), file.tensors.size());
  safetensors::save(opt_path.string(), kept, file.metadata);
  fs::remove(run / "last" / "checksums.json");  // the optimizer's own check, behind the checksum
  RunResult r = run_app("pretrain", "--resume --steps 8 --device cpu --out bad/resume-run", cwd);
  expect_one_line_error(r, "pretrain", "optimizer.safetensors");
  EXPECT_NE(r.err.find("no state for 2 parameter(s): ln_f.weight, ln_f.bias"), std::string::npos)
      << r.err;
}


// OpenBLAS gives each thread that calls it a 128 MiB buffer and retries forever when it cannot get
// one: under a low `ulimit -v` the apps used to spin with no message. Now they run on fewer threads,
// or end in one line saying which limit would do; never past the timeout.
TEST_F(LyingInputs, ALowAddressSpaceLimitNeverMakesTheAppsSpin) {
  const fs::path cwd = prepared();
  trained(false);
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"evaluate", "--ckpt checkpoints/tiny --max-windows 8 --device cpu"},
      {"pretrain", "--config tiny.json --steps 2 --batch-size 4 --eval-interval 2 --eval-windows 2 --device cpu "
                   "--out bad/ulimit-run --overwrite"},
  };
  write_text(cwd / "tiny.json", tiny_config(false));
  // 250000 spun here (2 cores) in a GEMM, with or without OPENBLAS_NUM_THREADS; 100000 already in
  // OpenBLAS's own threads, before main() (even --help hung, joining them at exit).
  for (const char* limit : {"100000", "250000", "1000000"}) {
    for (const auto& [app, args] : runs) {
      SCOPED_TRACE(app + " under ulimit -v " + limit);
      const RunResult help = run_command(std::string("ulimit -v ") + limit + "; timeout 60 '" + app_path(app) +
                                         "' --help > /dev/null", cwd);
      ASSERT_NE(help.code, 124) << "--help still running after 60 s";
      // A build whose libraries alone take more (CUDA's) cannot even start under the limit: not the case here.
      if (help.code != 0) {
        std::printf("note: %s does not start under ulimit -v %s; that limit is skipped\n", app.c_str(), limit);
        continue;
      }
      RunResult r = run_command(std::string("ulimit -v ") + limit + "; OPENBLAS_NUM_THREADS=16 timeout 60 '" +
                                app_path(app) + "' " + args, cwd);
      ASSERT_NE(r.code, 124) << "still running after 60 s: " << r.err;
      if (r.code != 0) {
        expect_one_line_error(r, app, "ulimit -v");
      }
    }
  }
}


// The optimizer state and state.json are covered by the checkpoint's checksums too: a resume from a
// damaged last/ stops before training on it.
TEST_F(LyingInputs, AFlippedBitInTheOptimizerStateIsCaughtOnResume) {
  const fs::path cwd = prepared();
  const fs::path run = cwd / "bad" / "flipped-run";
  fs::remove_all(run);
  fs::create_directories(run.parent_path());
  fs::copy(trained(false), run, fs::copy_options::recursive);
  std::string bytes = slurp(run / "last" / "optimizer.safetensors");
  bytes[bytes.size() - 7] ^= 0x01;
  write_text(run / "last" / "optimizer.safetensors", bytes);
  RunResult r = run_app("pretrain", "--resume --steps 8 --device cpu --out bad/flipped-run", cwd);
  expect_one_line_error(r, "pretrain", "bad/flipped-run/last/optimizer.safetensors does not match its checksum");
}

}  // namespace
}  // namespace mvgpt::apps::testing
