#include "apps/common/cli.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "apps/common/app.h"
#include <mvgpt/gpt/config.h>
#include <mvgpt/tensor/device.h>

namespace mvgpt::apps {

namespace {

// CLI11's PositiveNumber and NonNegativeNumber let "nan" through (every comparison with it is false):
// a NaN learning rate or temperature would poison the whole run. No description, so --help is unchanged.
const CLI::Validator kFinite(
    [](std::string& text) {
      double v = 0;
      if (CLI::detail::lexical_cast(text, v) && std::isfinite(v)) return std::string();
      return text + " is not a finite number";
    },
    "");

// The range checks of number flags, in one short line: CLI11's own print the largest double in full
// ("Value 0 not in range 0.000000 to 17976931348623157...") and claim 0 is outside [0, ...].
// Each refuses NaN and infinities too. No description, so --help is unchanged.
CLI::Validator number_check(double lo, double hi, bool lo_open, bool whole) {
  const auto number = [](double v) { return std::to_string(v).find('.') == std::string::npos ? std::to_string(v) : format("%g", v); };
  std::string allowed = whole ? "a whole number" : "a number";
  if (std::isfinite(hi)) allowed += (lo_open ? " above " + number(lo) + " and at most " : " from " + number(lo) + " to ") + number(hi);
  else allowed += lo_open ? " above " + number(lo) : " of at least " + number(lo);
  return CLI::Validator(
      [=](std::string& text) {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return text + " is not a number; expected " + allowed;
        if (!std::isfinite(v)) return text + " is not a finite number";
        if (v < lo || (lo_open && v == lo) || v > hi) return text + " is not allowed; expected " + allowed;
        return std::string();
      },
      "");
}
constexpr double kNoLimit = std::numeric_limits<double>::infinity();
// Counts (steps, batches, ranks): 1 or more; or 0 or more.
const CLI::Validator kCount = number_check(1, kNoLimit, false, true);
const CLI::Validator kCountOrZero = number_check(0, kNoLimit, false, true);
// Rates, times, scales: above 0; or 0 or more.
const CLI::Validator kPositive = number_check(0, kNoLimit, true, false);
const CLI::Validator kNonNegative = number_check(0, kNoLimit, false, false);
CLI::Validator between(double lo, double hi) { return number_check(lo, hi, false, false); }
CLI::Validator whole_between(double lo, double hi) { return number_check(lo, hi, false, true); }

// "a,b,c" as its names; UsageError for an empty one ("", ",", "a,,b"), with `example` to follow.
std::vector<std::string> split_names(const std::string& flag, const std::string& text, const std::string& example) {
  std::vector<std::string> names;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    std::string name = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (name.empty())
      throw UsageError(flag + " '" + text + "' names an empty layer; give names separated by commas, such as " + example);
    names.push_back(std::move(name));
    if (comma == std::string::npos) return names;
    start = comma + 1;
  }
}

void record_given(const CLI::App& app, GivenFlags& given) {
  given.names.clear();
  for (const CLI::Option* opt : app.get_options())
    if (opt->count() > 0) given.names.insert(opt->get_name());
}

// --rope-scaling none|linear:F|ntk:F, checked while parsing (RopeScaling::parse's message).
CLI::Option* add_rope_scaling(CLI::App& app, std::string& spec, const std::string& what) {
  return app
      .add_option("--rope-scaling", spec,
                  what + ": none, linear:F (position interpolation, positions / F) or ntk:F (NTK-aware, base grows with F); "
                         "docs/rope.md")
      ->check(CLI::Validator(
          [](std::string& text) {
            try {
              (void)gpt::RopeScaling::parse(text);
              return std::string();
            } catch (const std::invalid_argument& e) {
              return std::string(e.what());
            }
          },
          "SPEC"));
}

// The load-time --rope-scaling and --block-size of evaluate, context and generate.
void add_position_flags(CLI::App& app, std::string& rope_scaling, int64_t& block_size) {
  add_rope_scaling(app, rope_scaling, "rotate a rotary model's positions this way instead of its config's (no retraining)");
  app.add_option("--block-size", block_size, "run a rotary model with this context window instead of its config's")
      ->check(kCount);
}

// --precision fp32|bf16|auto (NOTE [ Precision policy ] in autograd/precision.h).
void add_precision_flag(CLI::App& app, std::string& precision) {
  app.add_option("--precision", precision,
                 "products in fp32, or in bf16 summed in fp32 (weights, optimizer state and everything else stay "
                 "fp32), or auto: bf16 where the device computes it natively (AMX or AVX512-BF16, CUDA sm_80+)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "bf16", "auto"}));
}

// --version and the examples every --help ends with.
void add_version_and_examples(CLI::App& app, const std::string& examples) {
  app.set_version_flag("--version", std::string("mvgpt ") + MVGPT_VERSION, "print the version and exit");
  app.footer("\nExamples:\n" + examples);
}

// Parses into a fresh T through its app's CLI (which validates it).
template <typename T>
T parse_with(std::unique_ptr<CLI::App> (*make)(T&), int argc, const char* const* argv) {
  T args;
  make(args)->parse(argc, argv);
  return args;
}

}  // namespace

void check_device_flag(const std::string& flag) {
  if (flag.empty() || flag == "auto") return;
  try {
    (void)Device::parse(flag);
  } catch (const std::exception&) {
    throw UsageError("--device " + flag + ": expected cpu, cuda, cuda:N or auto");
  }
}

void complete_schedule(PretrainSettings& s, int64_t steps) {
  if (s.schedule_steps <= 0) s.schedule_steps = steps > 0 ? steps : kDefaultScheduleSteps;
  // 5% of the schedule, but at least a few steps (a short run at full rate from step 0 diverges).
  if (s.warmup_steps < 0) s.warmup_steps = std::max(s.schedule_steps / 20, std::min<int64_t>(10, s.schedule_steps / 4));
  if (s.min_lr < 0) s.min_lr = s.lr / 10;
  if (s.warmup_steps > s.schedule_steps) {
    // A schedule fitted to the clock starts from a placeholder span: it grows to the warm-up at least.
    if (!s.fit_schedule)
      throw UsageError("--warmup-steps " + std::to_string(s.warmup_steps) + " is longer than the schedule (" +
                       std::to_string(s.schedule_steps) + " steps)");
    s.schedule_steps = s.warmup_steps;
  }
}

std::string settings_problem(const PretrainSettings& s) {
  auto whole = [](const char* name, int64_t v, int64_t min) {
    return v >= min ? std::string() : format("%s is %lld; expected a whole number >= %lld", name, (long long)v, (long long)min);
  };
  auto real = [](const char* name, double v, double min, double below) {
    return std::isfinite(v) && v >= min && v < below ? std::string()
                                                     : format("%s is %g; expected a number in [%g, %g)", name, v, min, below);
  };
  const double inf = std::numeric_limits<double>::infinity();
  for (const std::string& why :
       {whole("batch_size", s.batch_size, 1), real("lr", s.lr, 1e-300, inf), real("min_lr", s.min_lr, 0, inf),
        whole("warmup_steps", s.warmup_steps, 0), whole("schedule_steps", s.schedule_steps, 1),
        real("weight_decay", s.weight_decay, 0, inf), real("grad_clip", s.grad_clip, 0, inf), real("beta1", s.beta1, 0, 1),
        real("beta2", s.beta2, 0, 1), whole("eval_interval", s.eval_interval, 1), whole("eval_windows", s.eval_windows, 1),
        whole("grad_accum_steps", s.grad_accum_steps, 1)})
    if (!why.empty()) return why;
  if (s.batch_size % s.grad_accum_steps != 0)
    return format("batch_size is %lld, not a multiple of grad_accum_steps (%lld)", (long long)s.batch_size,
                  (long long)s.grad_accum_steps);
  if (s.warmup_steps > s.schedule_steps)
    return format("warmup_steps is %lld, longer than schedule_steps (%lld)", (long long)s.warmup_steps, (long long)s.schedule_steps);
  return "";
}

std::unique_ptr<CLI::App> prepare_cli(PrepareArgs& a) {
  auto app = std::make_unique<CLI::App>(
      "Trains the byte-level BPE tokenizer on the training stories and encodes the training and\n"
      "held-out stories into llm.c token files (tokenizer.json, train.bin, valid.bin).",
      "prepare");
  app->add_option("--data-dir", a.data_dir,
                  "folder with train.txt and valid.txt (stories separated by <|endoftext|> lines); default "
                  "$MVGPT_DATA_DIR, else ../shared/data/tinystories from the repository root");
  app->add_option("--train", a.train_path, "training stories (default <data-dir>/train.txt)");
  app->add_option("--valid", a.valid_path, "held-out stories (default <data-dir>/valid.txt)");
  app->add_option("--out", a.out_dir, "output folder")->capture_default_str();
  app->add_option("--vocab-size", a.vocab_size, "tokens in the vocabulary: 256 bytes + merges + <|endoftext|>")
      ->capture_default_str()
      ->check(whole_between(257, 65536));
  app->add_option("--tokenizer", a.tokenizer_path, "use this tokenizer.json instead of training one");
  app->add_option("--tokenizer-mb", a.tokenizer_mb,
                  "train the tokenizer on the first N MB of the training stories (0: all of them)")
      ->capture_default_str()
      ->check(kNonNegative)
      ->check(kFinite);
  app->final_callback([&a] {
    // Past what a size_t holds the limit is no limit (and the cast would be undefined).
    const double bytes = a.tokenizer_mb * 1e6;
    a.tokenizer_bytes = bytes < 1e18 ? size_t(bytes) : 0;
  });
  add_version_and_examples(*app,
      "  prepare                                   # ../shared/data/tinystories -> data/ (vocabulary 10000)\n"
      "  prepare --train ~/TinyStories/TinyStories-train.txt --valid ~/TinyStories/TinyStories-valid.txt --tokenizer-mb 50\n"
      "  prepare --train a.txt --valid b.txt --tokenizer data/tokenizer.json --out data-b\n");
  return app;
}

std::unique_ptr<CLI::App> pretrain_cli(PretrainArgs& a) {
  auto app = std::make_unique<CLI::App>(
      "Pretrains the GPT on data/train.bin, measuring held-out loss on data/valid.bin.\n"
      "Runs go to checkpoints/pretrain (learned positions) or checkpoints/pretrain-rope (--rope).\n"
      "Under mpirun -np N it trains data-parallel, N shares of each --batch-size (docs/distributed.md).",
      "pretrain");
  PretrainSettings& s = a.settings;
  app->add_flag("--rope", a.rope, "rotary position embeddings instead of a learned table (sets rope in the config)");
  auto* preset_opt = app->add_option("--preset", a.preset, "model shape")
                         ->capture_default_str()
                         ->check(CLI::IsMember(gpt::GPTConfig::preset_names()));
  auto* config_opt = app->add_option("--config", a.config_path, "model shape from a config.json instead of a preset")->excludes(preset_opt);
  auto* minutes_opt = app->add_option("--minutes", a.minutes, "train until the run has used this many minutes")
                          ->capture_default_str()
                          ->check(kPositive)
                          ->check(kFinite);
  app->add_option("--steps", a.steps, "train until this step instead of by the clock")
      ->check(kCount)
      ->excludes(minutes_opt);
  app->add_option("--schedule-steps", s.schedule_steps,
                  "steps the cosine schedule spans (default: --steps, else " + std::to_string(kDefaultScheduleSteps) + ")")
      ->check(kCount);
  app->add_option("--warmup-steps", s.warmup_steps, "linear warm-up steps (default: 5% of the schedule, at least min(10, a quarter of it))")
      ->check(kCountOrZero);
  app->add_option("--batch-size", s.batch_size, "sequences per step")->capture_default_str()->check(kCount);
  app->add_option("--lr", s.lr, "peak learning rate")->capture_default_str()->check(kPositive)->check(kFinite);
  app->add_option("--min-lr", s.min_lr, "final learning rate (default: lr / 10)")->check(kNonNegative)->check(kFinite);
  app->add_option("--weight-decay", s.weight_decay, "AdamW weight decay of the matrices and embeddings")
      ->capture_default_str()
      ->check(kNonNegative)
      ->check(kFinite);
  app->add_option("--grad-clip", s.grad_clip, "clip the gradients' global norm to this (0: off)")
      ->capture_default_str()
      ->check(kNonNegative)
      ->check(kFinite);
  app->add_option("--beta1", s.beta1, "AdamW's first-moment decay")->capture_default_str()->check(between(0, 0.999999))->check(kFinite);
  app->add_option("--beta2", s.beta2, "AdamW's second-moment decay")->capture_default_str()->check(between(0, 0.999999))->check(kFinite);
  app->add_option("--dropout", a.dropout, "dropout probability in training (default: the preset's or config's, 0 for the presets)")
      ->check(between(0, 0.99))
      ->check(kFinite);
  auto* init_opt = app->add_option("--init-from", a.init_from,
                                   "start a new run (step 0, a fresh optimizer) from this checkpoint's weights: fine-tuning")
                       ->excludes(preset_opt)
                       ->excludes(config_opt);
  app->add_option("--block-size", a.block_size, "context length (a new run; with --init-from, rotary models only)")
      ->check(kCount);
  add_rope_scaling(*app, a.rope_scaling,
                   "RoPE scaling saved in the run's config (a new run; with --init-from, e.g. linear:4 with --block-size 1024)");
  auto* rank_opt = app->add_option("--lora-rank", a.lora.rank,
                                   "with --init-from: train LoRA adapters of this rank instead of the weights (frozen)")
                       ->check(kCount)
                       ->needs(init_opt);
  app->add_option("--lora-alpha", a.lora.alpha, "the adapters' update is scaled by alpha / rank (default: 2 x rank)")
      ->check(kPositive)
      ->check(kFinite)
      ->needs(rank_opt);
  app->add_option("--lora-dropout", a.lora.dropout, "dropout on the adapters' input")->check(between(0, 0.99))->needs(rank_opt);
  // One value split here, not CLI11's delimiter: "--lora-targets ," left it wanting values and
  // taking the next flags as layer names.
  app->add_option("--lora-targets", a.lora_targets,
                  "linear layers that get adapters, by name (default c_attn,attn.c_proj: attention; add c_fc,mlp.c_proj for the MLP)")
      ->needs(rank_opt);
  app->add_option("--grad-accum-steps", s.grad_accum_steps,
                  "split each batch into this many micro-batches, one forward/backward each, for one update (less memory)")
      ->capture_default_str()
      ->check(kCount);
  app->add_option("--seed", s.seed, "seed of the weights and the batches")->capture_default_str();
  app->add_option("--eval-interval", s.eval_interval, "steps between held-out measurements and checkpoints")
      ->capture_default_str()
      ->check(kCount);
  app->add_option("--eval-windows", s.eval_windows, "held-out windows measured each time (the first N of valid.bin)")
      ->capture_default_str()
      ->check(kCount);
  app->add_option("--log-interval", a.log_interval, "steps between progress lines")->capture_default_str()->check(kCount);
  app->add_option("--device", a.device_flag, "cpu, cuda[:N] or auto (the GPU when there is one)")->capture_default_str();
  add_precision_flag(*app, a.precision);
  app->add_option("--data", a.data_dir, "folder with train.bin, valid.bin and tokenizer.json (from prepare)")->capture_default_str();
  app->add_option("--out", a.out_dir,
                  "run folder, locked while training; TensorBoard events in <out>/tensorboard (default "
                  "checkpoints/pretrain, or checkpoints/pretrain-rope with --rope)");
  auto* resume_opt = app->add_flag("--resume", a.resume, "continue the run in the run folder where its last checkpoint left it");
  app->add_flag("--overwrite", a.overwrite, "start over, replacing a run that is already in the run folder")->excludes(resume_opt);
  app->add_flag("--skip-nonfinite", a.skip_nonfinite,
                "skip a step whose loss or gradients hold a NaN or an infinity (default: stop the run there)");
  app->add_option("--debug-inject-nan-at-step", a.inject_nan_step,
                  "testing aid: write NaN into the last parameter's gradient at this step (counted as the progress lines count)")
      ->check(kCount)
      ->group("Testing");
  app->add_option("--debug-kill-after-save", a.kill_after_save_step,
                  "testing aid: SIGKILL the run right after the checkpoint of this step is saved")
      ->check(kCount)
      ->group("Testing");
  app->add_option("--debug-step-seconds", a.debug_step_seconds,
                  "testing aid: time the run on a clock where each step takes this many seconds")
      ->check(kPositive)
      ->check(kFinite)
      ->group("Testing");

  app->final_callback([&a, self = app.get()] {
    record_given(*self, a.given);
    check_device_flag(a.device_flag);
    if (a.out_dir.empty()) a.out_dir = a.rope ? "checkpoints/pretrain-rope" : "checkpoints/pretrain";
    if (a.out_dir.empty() || a.out_dir == "." || a.out_dir == ".." || a.out_dir == "/")  // the rest is checked at run time
      throw UsageError("--out " + a.out_dir + " cannot be a run folder; name a folder of the run's own, such as checkpoints/my-run");
    if (a.lora.rank > 0 && !a.given.has("--lora-alpha")) a.lora.alpha = 2.0 * double(a.lora.rank);
    if (a.given.has("--lora-targets")) a.lora.targets = split_names("--lora-targets", a.lora_targets, "c_attn,attn.c_proj");
    if (a.resume && !a.init_from.empty()) throw UsageError("--init-from starts a new run; --resume continues one: choose one");
    if (!a.resume) {  // a resumed run's settings come from its state.json (the run checks that given ones agree)
      a.settings.fit_schedule = a.steps == 0 && !a.given.has("--schedule-steps");
      complete_schedule(a.settings, a.steps);
      if (std::string why = settings_problem(a.settings); !why.empty()) {
        std::replace(why.begin(), why.end(), '_', '-');  // the flags' spelling of the fields
        throw UsageError("--" + why);
      }
    }
  });
  add_version_and_examples(*app,
      "  pretrain --minutes 10                     # the series' model, learned positions -> checkpoints/pretrain\n"
      "  pretrain --rope --minutes 10              # rotary positions -> checkpoints/pretrain-rope\n"
      "  pretrain --rope --minutes 10 --resume     # continue a stopped run\n"
      "  pretrain --steps 2000 --batch-size 64 --grad-accum-steps 4 --dropout 0.1 --out checkpoints/big\n"
      "  mpirun -np 2 pretrain --rope --minutes 10 # data-parallel over 2 processes\n"
      "  pretrain --init-from checkpoints/pretrain-rope --block-size 1024 --rope-scaling linear:4 --steps 10 \\\n"
      "           --batch-size 2 --out checkpoints/rope-pi4  # a longer context, position interpolation\n");
  return app;
}

std::unique_ptr<CLI::App> evaluate_cli(EvaluateArgs& a) {
  auto app = std::make_unique<CLI::App>("Held-out loss, perplexity and top-1 accuracy of checkpoints on a token file.", "evaluate");
  app->add_option("--ckpt", a.ckpts, "checkpoint or run folder (repeat for several)")->required();
  app->add_option("--tokens", a.tokens_path, "llm.c token file")->capture_default_str();
  app->add_option("--adapter", a.adapter, "a LoRA adapter file (pretrain --lora-rank) put on every --ckpt");
  app->add_option("--batch-size", a.batch_size, "windows per forward pass")->capture_default_str()->check(kCount);
  add_position_flags(*app, a.rope_scaling, a.block_size);
  app->add_option("--max-windows", a.max_windows, "measure at most this many windows (default: the whole file)")
      ->check(kCount);
  app->add_option("--device", a.device_flag, "cpu, cuda[:N] or auto")->capture_default_str();
  add_precision_flag(*app, a.precision);
  app->add_flag("--json", a.as_json, "print only a JSON list of {model, loss, perplexity, top1}");
  app->final_callback([&a] { check_device_flag(a.device_flag); });
  add_version_and_examples(*app,
      "  evaluate --ckpt checkpoints/pretrain --ckpt checkpoints/pretrain-rope\n"
      "  evaluate --ckpt checkpoints/pretrain-rope/last --max-windows 64 --json\n");
  return app;
}

std::unique_ptr<CLI::App> context_cli(ContextArgs& a) {
  auto app = std::make_unique<CLI::App>(
      "Loss and milliseconds per token past the context window: the whole window again for each\n"
      "token (window), the sliding KV cache (cache, RoPE only), all of the stream at once (full, RoPE only).",
      "context");
  app->add_option("--ckpt", a.ckpts, "checkpoint or run folder (repeat for several)")->required();
  app->add_option("--tokens", a.tokens_path, "llm.c token file of held-out text")->capture_default_str();
  app->add_option("--adapter", a.adapter, "a LoRA adapter file (pretrain --lora-rank) put on every --ckpt");
  app->add_option("--length", a.length, "tokens per stream (must exceed each model's window)")
      ->capture_default_str()
      ->check(kCount);
  app->add_option("--streams", a.streams, "streams, one after another from the start of the file")
      ->capture_default_str()
      ->check(kCount);
  add_position_flags(*app, a.rope_scaling, a.block_size);
  app->add_option("--methods", a.method_names, "only these methods (window, cache, full); default: all a model supports")
      ->delimiter(',')
      ->check(CLI::IsMember({"window", "cache", "full"}));
  app->add_option("--device", a.device_flag, "cpu, cuda[:N] or auto")->capture_default_str();
  add_precision_flag(*app, a.precision);
  app->add_option("--out-dir", a.out_dir, "folder for context_losses.csv and context_losses.png")->capture_default_str();
  app->add_flag("--json", a.as_json,
                "print only a JSON list of {model, method, loss, ms_per_token} on stdout (progress goes to stderr)");
  app->add_flag("--no-plot", a.no_plot, "skip the PNG");
  app->final_callback([&a] {
    check_device_flag(a.device_flag);
    // Saturates: a file never holds INT64_MAX tokens, so the run's "too few tokens" message still reads right.
    if (__builtin_mul_overflow(a.length, a.streams, &a.tokens_needed)) a.tokens_needed = std::numeric_limits<int64_t>::max();
  });
  add_version_and_examples(*app,
      "  context --ckpt checkpoints/pretrain --ckpt checkpoints/pretrain-rope\n"
      "  context --ckpt checkpoints/pretrain-rope --methods cache,full --length 1024 --streams 2 --json\n"
      "  context --ckpt checkpoints/pretrain-rope --rope-scaling ntk:4 --methods full --length 1024\n");
  return app;
}

std::unique_ptr<CLI::App> generate_cli(GenerateArgs& a) {
  auto app = std::make_unique<CLI::App>("Generates text from a checkpoint, streaming it as it is produced.", "generate");
  app->add_option("--ckpt", a.ckpt, "checkpoint or run folder")->required();
  app->add_option("--adapter", a.adapter, "a LoRA adapter file (pretrain --lora-rank) put on the model");
  auto* prompt_opt = app->add_option("--prompt", a.prompt, "text to continue (empty: start a new story)");
  app->add_option("--prompt-file", a.prompt_file, "read the prompt from this file (- for standard input)")->excludes(prompt_opt);
  app->add_option("--max-new-tokens", a.max_new_tokens, "tokens to generate")->capture_default_str()->check(kCountOrZero);
  app->add_option("--temperature", a.temperature, "0: always the likeliest token")
      ->capture_default_str()
      ->check(kNonNegative)
      ->check(kFinite);
  app->add_option("--top-k", a.top_k, "draw among the k likeliest tokens (0: all)")
      ->capture_default_str()
      ->check(kCountOrZero);
  app->add_option("--top-p", a.top_p, "draw among the likeliest tokens whose probability adds up to p (1: all)")
      ->capture_default_str()
      ->check(number_check(0, 1, true, false))
      ->check(kFinite);
  app->add_option("--num-samples", a.num_samples, "samples to write, each its own draws (seed, seed + 1, ...), separated by a line of dashes")
      ->capture_default_str()
      ->check(kCount);
  app->add_option("--seed", a.seed, "seed of the draws")->capture_default_str();
  app->add_option("--tokenizer", a.tokenizer_path, "tokenizer.json (default: the checkpoint's, else data/tokenizer.json)");
  add_position_flags(*app, a.rope_scaling, a.block_size);
  app->add_option("--device", a.device_flag, "cpu, cuda[:N] or auto")->capture_default_str();
  add_precision_flag(*app, a.precision);
  app->add_flag("--no-cache", a.no_cache, "run the whole window again for each token");
  app->add_flag("--stop-at-end", a.stop_at_end, "stop at the end of the story (<|endoftext|>, or BOS with llama2.c's tokenizer, as run.c does)");
  app->final_callback([&a] { check_device_flag(a.device_flag); });
  add_version_and_examples(*app,
      "  generate --ckpt checkpoints/pretrain-rope --prompt \"Once upon a time\"\n"
      "  generate --ckpt checkpoints/pretrain-rope --max-new-tokens 1000 --temperature 0.7 --top-k 50\n"
      "  generate --ckpt checkpoints/pretrain-rope --top-p 0.9 --num-samples 3 --stop-at-end\n"
      "  generate --ckpt checkpoints/pretrain-rope --rope-scaling ntk:4 --block-size 1024 --max-new-tokens 1000\n"
      "  echo \"The dog\" | generate --ckpt checkpoints/pretrain-rope --prompt-file -\n");
  return app;
}

std::unique_ptr<CLI::App> merge_cli(MergeArgs& a) {
  auto app = std::make_unique<CLI::App>(
      "Folds LoRA adapters into the weights (W += alpha / r B A) and writes an ordinary checkpoint.", "merge");
  app->add_option("--ckpt", a.ckpt, "checkpoint or run folder (a LoRA run's, or the base model with --adapter)")->required();
  app->add_option("--adapter", a.adapter, "a LoRA adapter file to put on the checkpoint first");
  app->add_option("--out", a.out_dir, "the new checkpoint folder (must not exist yet)")->required();
  add_version_and_examples(*app,
      "  merge --ckpt checkpoints/shakespeare-lora --out checkpoints/shakespeare-merged\n"
      "  merge --ckpt checkpoints/pretrain-rope --adapter checkpoints/shakespeare-lora/best/adapter.safetensors --out merged\n");
  return app;
}

std::unique_ptr<CLI::App> export_cli(ExportArgs& a) {
  auto app = std::make_unique<CLI::App>(
      "Writes a checkpoint as a Hugging Face folder that transformers loads (AutoModelForCausalLM.from_pretrained):\n"
      "learned positions as GPT2LMHeadModel, RoPE as GPTNeoXForCausalLM, the Llama style as LlamaForCausalLM,\n"
      "with the tokenizer as tokenizer.json for PreTrainedTokenizerFast (docs/checkpoints.md).", "export");
  app->add_option("--ckpt", a.ckpt, "checkpoint or run folder")->required();
  app->add_option("--format", a.format, "the folder's format")->check(CLI::IsMember({"hf"}))->capture_default_str();
  app->add_option("--out", a.out_dir, "the new folder (must not exist yet, or be empty)")->required();
  app->add_option("--tokenizer", a.tokenizer_path, "tokenizer.json to include (default: the checkpoint's own)");
  add_version_and_examples(*app,
      "  export --ckpt checkpoints/pretrain-rope --format hf --out hf/pretrain-rope\n"
      "  python3 -c \"import transformers as t; t.AutoModelForCausalLM.from_pretrained('hf/pretrain-rope')\"\n");
  return app;
}

std::unique_ptr<CLI::App> import_cli(ImportArgs& a) {
  auto app = std::make_unique<CLI::App>(
      "Reads another ecosystem's model into a checkpoint: a Hugging Face folder (gpt2, gpt_neox or llama that computes\n"
      "our model, such as export writes; weights bit for bit; evaluate, context and generate also load one directly), or\n"
      "a llama2.c .bin (legacy or export.py --version 1) with its tokenizer.bin.", "import");
  app->add_option("--from", a.from, "the Hugging Face folder, or the llama2.c .bin file")->required();
  app->add_option("--format", a.format, "hf or llama2c")->check(CLI::IsMember({"hf", "llama2c"}))->capture_default_str();
  app->add_option("--out", a.out_dir, "the new checkpoint folder (must not exist yet, or be empty)")->required();
  app->add_option("--tokenizer", a.tokenizer_path,
                  "llama2c: the model's tokenizer.bin, saved with the checkpoint as tokenizer.json");
  add_version_and_examples(*app,
      "  import --from hf/pretrain-rope --out checkpoints/from-hf\n"
      "  import --format llama2c --from stories15M.bin --tokenizer tokenizer.bin --out checkpoints/stories15M\n");
  app->final_callback([&a] {
    if (!a.tokenizer_path.empty() && a.format != "llama2c")
      throw UsageError("--tokenizer is for --format llama2c; a Hugging Face folder brings its own tokenizer.json");
  });
  return app;
}

PrepareArgs parse_prepare_args(int argc, const char* const* argv) { return parse_with(prepare_cli, argc, argv); }
PretrainArgs parse_pretrain_args(int argc, const char* const* argv) { return parse_with(pretrain_cli, argc, argv); }
EvaluateArgs parse_evaluate_args(int argc, const char* const* argv) { return parse_with(evaluate_cli, argc, argv); }
ContextArgs parse_context_args(int argc, const char* const* argv) { return parse_with(context_cli, argc, argv); }
GenerateArgs parse_generate_args(int argc, const char* const* argv) { return parse_with(generate_cli, argc, argv); }
MergeArgs parse_merge_args(int argc, const char* const* argv) { return parse_with(merge_cli, argc, argv); }
ExportArgs parse_export_args(int argc, const char* const* argv) { return parse_with(export_cli, argc, argv); }
ImportArgs parse_import_args(int argc, const char* const* argv) { return parse_with(import_cli, argc, argv); }

}  // namespace mvgpt::apps
