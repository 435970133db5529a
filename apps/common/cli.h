#pragma once
// The apps' command lines: each app's flags bound to a struct, and the checks of their values and
// combinations that need nothing but the command line. main() is `run_app(*<app>_cli(args), ...)`
// and then the run; tests and fuzz/fuzz_cli.cpp call parse_<app>_args alone.
//
// NOTE [ Parsing only reads argv ]
// Building an app's CLI::App, parsing and validating open no file, touch no device and print
// nothing: whatever a command line holds, parsing it ends in the args, in a CLI::ParseError
// (CLI::CallForHelp for --help) or in a UsageError. Everything that needs a file (a run to resume,
// a model's window) or the machine (a GPU, the ranks of mpirun) is checked by the run.
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <mvgpt/nn/lora.h>

namespace mvgpt::apps {

// Flags given on the command line, by long name ("--lr"), filled once the parse succeeds.
struct GivenFlags {
  std::set<std::string> names;
  bool has(const std::string& flag) const { return names.count(flag) > 0; }
};

struct PrepareArgs {
  std::string data_dir, train_path, valid_path, out_dir = "data", tokenizer_path;
  size_t vocab_size = 10000;
  double tokenizer_mb = 0;
  // Derived: the tokenizer trains on the first tokenizer_bytes of the stories (0: all of them).
  size_t tokenizer_bytes = 0;
};

// The schedule's span before the clock is known: about ten minutes of the series' model at batch
// 16 x 256 on this repository's 2-core reference machine. With --minutes (and no --schedule-steps)
// the span is then fitted to the measured step time (apps/common/schedule_fit.h).
constexpr int64_t kDefaultScheduleSteps = 220;

// What defines a pretraining run: kept in state.json and reused by --resume.
struct PretrainSettings {
  int64_t batch_size = 16;
  double lr = 1e-3, min_lr = -1;
  int64_t warmup_steps = -1, schedule_steps = 0;
  double weight_decay = 0.1, grad_clip = 1.0, beta1 = 0.9, beta2 = 0.95;
  uint64_t seed = 1337;
  int64_t eval_interval = 25, eval_windows = 32;
  int64_t grad_accum_steps = 1;  // micro-batches of batch_size / N whose gradients add up to one step's
  bool fit_schedule = false;     // schedule_steps follows the clock (--minutes without --schedule-steps)
};

// The schedule's defaults where a flag left them unset (the span: --steps, else
// kDefaultScheduleSteps; the warm-up: 5% of it, at least min(10, a quarter); the final rate: lr / 10),
// then UsageError when the warm-up is longer than the schedule.
void complete_schedule(PretrainSettings& s, int64_t steps);

// The flags' checks applied to settings read from a file (state.json): "" when they hold, else what
// is wrong, naming the field and its value ("eval_interval is 0; expected a whole number > 0").
std::string settings_problem(const PretrainSettings& s);

struct PretrainArgs {
  PretrainSettings settings;
  bool rope = false, resume = false, overwrite = false, skip_nonfinite = false;
  int64_t inject_nan_step = -1;
  int64_t kill_after_save_step = -1;  // testing aid: SIGKILL right after this step's checkpoint
  double debug_step_seconds = 0;  // testing aid: a clock on which each step takes this long
  double dropout = -1;            // -1: the config's
  int64_t block_size = -1;        // -1: the config's
  std::string init_from;          // start a new run from this checkpoint's weights
  std::string rope_scaling;       // "": the config's (none for a preset); none, linear:F or ntk:F
  nn::LoRAOptions lora{.rank = 0};  // rank 0: no adapters (full training)
  std::string lora_targets;         // --lora-targets as given, split into lora.targets
  double minutes = 10;
  int64_t steps = 0, log_interval = 1;
  std::string preset = "series", config_path, device_flag = "auto", data_dir = "data", out_dir;
  std::string precision = "fp32";  // fp32, bf16 or auto (NOTE [ Precision policy ])
  GivenFlags given;  // on --resume, the run-defining flags given must agree with the run's
};

struct EvaluateArgs {
  std::vector<std::string> ckpts;
  std::string adapter;
  std::string rope_scaling;  // load-time override of rotary models ("": the checkpoint's)
  int64_t block_size = -1;   // load-time window of rotary models (-1: the checkpoint's)
  std::string tokens_path = "data/valid.bin", device_flag = "auto", precision = "fp32";
  int64_t batch_size = 8, max_windows = -1;
  bool as_json = false;
};

struct ContextArgs {
  std::vector<std::string> ckpts, method_names;
  std::string adapter;
  std::string rope_scaling;  // load-time override of rotary models ("": the checkpoint's)
  int64_t block_size = -1;   // load-time window of rotary models (-1: the checkpoint's)
  std::string tokens_path = "data/valid.bin", device_flag = "auto", out_dir = "runs/context", precision = "fp32";
  int64_t length = 768, streams = 8;
  bool as_json = false, no_plot = false;
  // Derived: length * streams, the tokens the streams read (INT64_MAX when that overflows).
  int64_t tokens_needed = 0;
};

struct GenerateArgs {
  std::string ckpt, prompt, prompt_file, tokenizer_path, device_flag = "auto", adapter, precision = "fp32";
  std::string rope_scaling;  // load-time override ("": the checkpoint's)
  int64_t block_size = -1;   // load-time window of a rotary model (-1: the checkpoint's)
  int64_t max_new_tokens = 200, num_samples = 1;
  double temperature = 0.8, top_p = 1.0;
  int64_t top_k = 200;
  uint64_t seed = 1337;
  bool no_cache = false, stop_at_end = false;
};

struct MergeArgs {
  std::string ckpt, adapter, out_dir;
};

// export: a checkpoint as another ecosystem's folder; import: such a folder as a checkpoint.
struct ExportArgs {
  std::string ckpt, format = "hf", out_dir, tokenizer_path;
};
struct ImportArgs {
  std::string from, format = "hf", out_dir;
  std::string tokenizer_path;  // llama2c: its tokenizer.bin
};

// Each app's CLI::App with its flags bound to `args` (which must outlive it); parsing it fills
// `args` and runs the app's checks (UsageError), derived fields included.
std::unique_ptr<CLI::App> prepare_cli(PrepareArgs& args);
std::unique_ptr<CLI::App> pretrain_cli(PretrainArgs& args);
std::unique_ptr<CLI::App> evaluate_cli(EvaluateArgs& args);
std::unique_ptr<CLI::App> context_cli(ContextArgs& args);
std::unique_ptr<CLI::App> generate_cli(GenerateArgs& args);
std::unique_ptr<CLI::App> merge_cli(MergeArgs& args);
std::unique_ptr<CLI::App> export_cli(ExportArgs& args);
std::unique_ptr<CLI::App> import_cli(ImportArgs& args);

// Parse + validate without running (argv[0] is the program's name). Throws CLI::ParseError
// (CLI::Success and its subclasses for --help) or UsageError.
PrepareArgs parse_prepare_args(int argc, const char* const* argv);
PretrainArgs parse_pretrain_args(int argc, const char* const* argv);
EvaluateArgs parse_evaluate_args(int argc, const char* const* argv);
ContextArgs parse_context_args(int argc, const char* const* argv);
GenerateArgs parse_generate_args(int argc, const char* const* argv);
MergeArgs parse_merge_args(int argc, const char* const* argv);
ExportArgs parse_export_args(int argc, const char* const* argv);
ImportArgs parse_import_args(int argc, const char* const* argv);

// UsageError "--device <flag>: expected cpu, cuda, cuda:N or auto" unless the text names a device
// (whether that device exists is resolve_device's question, at run time).
void check_device_flag(const std::string& flag);

}  // namespace mvgpt::apps
