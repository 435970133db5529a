#pragma once
// pretrain's flags: the model, the run's settings (kept in state.json), the run folder, resuming
// and fine-tuning (--init-from, LoRA), and the testing aids. The checks of their values and combinations that need
// nothing but the command line run while parsing (NOTE [ Parsing only reads argv ], apps/common/cli.h).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/common/cli.h"
#include <mvgpt/nn/lora.h>

namespace mvgpt::apps {

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
  // adamw, or muon: Muon for the hidden matrices at muon_lr (no weight decay), AdamW at lr for the
  // embeddings, head, norms and biases (nn/muon.h).
  std::string optimizer = "adamw";
  double muon_lr = 0.02;
  int64_t muon_ns_steps = 5;                 // Newton-Schulz steps a Muon update
  std::string muon_coefficients = "jordan";  // or polar_express (nn::MuonOptions::Coefficients)
  // The AdamW rate of the embeddings (the token table, which the tied head shares, and the learned
  // positions), where it differs from lr; 0: lr. It follows the schedule in proportion.
  double embedding_lr = 0;
  // cosine (over the whole run after the warm-up), or wsd: the peak rate, then a linear decay to
  // min_lr over the run's last decay_fraction.
  std::string schedule = "cosine";
  double decay_fraction = 0.4;
};

// The schedule's defaults where a flag left them unset (the span: --steps, else
// kDefaultScheduleSteps; the warm-up: 5% of it, at least min(10, a quarter); the final rate: lr / 10),
// then UsageError when the warm-up is longer than the schedule.
void complete_schedule(PretrainSettings& s, int64_t steps);

// --recipe speedrun's settings, each where its flag was not given: Muon for the hidden matrices
// (--muon-lr 0.02, 3 Newton-Schulz steps with Polar Express's coefficients), --schedule wsd over the
// last 40%, --batch-size 8, --embedding-lr 3e-3, and QK-norm in a new run's model (--no-qk-norm
// keeps it out). Chosen on 2-minute runs of the series' RoPE model on stories held out of
// train.txt (scripts/recipe_search.sh; docs/apps.md, "Recipes").
struct PretrainArgs;
void apply_recipe(PretrainArgs& args);

// The flags' checks applied to settings read from a file (state.json): "" when they hold, else what
// is wrong, naming the field and its value ("eval_interval is 0; expected a whole number > 0").
std::string settings_problem(const PretrainSettings& s);

struct PretrainArgs {
  PretrainSettings settings;
  bool rope = false, resume = false, overwrite = false, skip_nonfinite = false;
  int qk_norm = 0;  // --qk-norm 1, --no-qk-norm -1; 0: the preset's or config's (--recipe speedrun: on)
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
  // series: the series' recipe (AdamW, cosine, batch 16); speedrun: Muon, warm-up-stable-decay,
  // batch 8, the embeddings' own rate and QK-norm (apply_recipe). Flags given override either.
  std::string recipe = "series";
  std::string precision = "fp32";  // fp32, bf16 or auto (NOTE [ Precision policy ])
  GivenFlags given;  // on --resume, the run-defining flags given must agree with the run's
};

// The CLI::App with the flags bound to `args` (which must outlive it); parsing it fills `args` and
// runs the checks (UsageError), derived fields included.
std::unique_ptr<CLI::App> pretrain_cli(PretrainArgs& args);
// Parse + validate without running (argv[0] is the program's name): CLI::ParseError (CLI::Success
// and its subclasses for --help) or UsageError.
PretrainArgs parse_pretrain_args(int argc, const char* const* argv);

}  // namespace mvgpt::apps
