#include "apps/flags/pretrain.h"

#include <algorithm>

#include "apps/common/app.h"
#include <mvgpt/gpt/config.h>

namespace mvgpt::apps {

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
        whole("grad_accum_steps", s.grad_accum_steps, 1), real("muon_lr", s.muon_lr, 1e-300, inf),
        real("decay_fraction", s.decay_fraction, 1e-300, 1 + 1e-12), whole("muon_ns_steps", s.muon_ns_steps, 1),
        real("embedding_lr", s.embedding_lr, 0, inf)})
    if (!why.empty()) return why;
  if (s.optimizer != "adamw" && s.optimizer != "muon")
    return "optimizer is \"" + s.optimizer + "\"; expected adamw or muon";
  if (s.muon_coefficients != "jordan" && s.muon_coefficients != "polar_express")
    return "muon_coefficients is \"" + s.muon_coefficients + "\"; expected jordan or polar_express";
  if (s.muon_ns_steps > 100) return format("muon_ns_steps is %lld; expected at most 100", (long long)s.muon_ns_steps);
  if (s.schedule != "cosine" && s.schedule != "wsd") return "schedule is \"" + s.schedule + "\"; expected cosine or wsd";
  if (s.batch_size % s.grad_accum_steps != 0)
    return format("batch_size is %lld, not a multiple of grad_accum_steps (%lld)", (long long)s.batch_size,
                  (long long)s.grad_accum_steps);
  if (s.warmup_steps > s.schedule_steps)
    return format("warmup_steps is %lld, longer than schedule_steps (%lld)", (long long)s.warmup_steps, (long long)s.schedule_steps);
  return "";
}

void apply_recipe(PretrainArgs& a) {
  if (a.recipe != "speedrun") return;
  PretrainSettings& s = a.settings;
  if (!a.given.has("--optimizer")) s.optimizer = "muon";
  if (!a.given.has("--schedule")) s.schedule = "wsd";
  if (!a.given.has("--batch-size")) s.batch_size = 8;
  if (!a.given.has("--embedding-lr")) s.embedding_lr = 3e-3;
  if (!a.given.has("--muon-coefficients")) s.muon_coefficients = "polar_express";
  if (!a.given.has("--muon-ns-steps")) s.muon_ns_steps = 3;
  if (!a.given.has("--qk-norm") && a.init_from.empty()) a.qk_norm = 1;  // the model of a new run only
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
                          ->check(kPositive);
  app->add_option("--steps", a.steps, "train until this step instead of by the clock")
      ->check(kCount)
      ->excludes(minutes_opt);
  app->add_option("--schedule-steps", s.schedule_steps,
                  "steps the cosine schedule spans (default: --steps, else " + std::to_string(kDefaultScheduleSteps) + ")")
      ->check(kCount);
  app->add_option("--warmup-steps", s.warmup_steps, "linear warm-up steps (default: 5% of the schedule, at least min(10, a quarter of it))")
      ->check(kCountOrZero);
  app->add_option("--batch-size", s.batch_size, "sequences per step")->capture_default_str()->check(kCount);
  app->add_option("--lr", s.lr, "peak learning rate")->capture_default_str()->check(kPositive);
  app->add_option("--min-lr", s.min_lr, "final learning rate (default: lr / 10)")->check(kNonNegative);
  app->add_option("--weight-decay", s.weight_decay, "AdamW weight decay of the matrices and embeddings")
      ->capture_default_str()
      ->check(kNonNegative);
  app->add_option("--grad-clip", s.grad_clip, "clip the gradients' global norm to this (0: off)")
      ->capture_default_str()
      ->check(kNonNegative);
  app->add_option("--beta1", s.beta1, "AdamW's first-moment decay")->capture_default_str()->check(between(0, 0.999999));
  app->add_option("--beta2", s.beta2, "AdamW's second-moment decay")->capture_default_str()->check(between(0, 0.999999));
  app->add_option("--recipe", a.recipe,
                  "series (AdamW, cosine, batch 16: the series' recipe) or speedrun (Muon with 3 Polar Express steps, "
                  "warm-up-stable-decay, batch 8, --embedding-lr 3e-3, QK-norm: more learned in a fixed time); flags "
                  "given override it")
      ->capture_default_str()
      ->check(CLI::IsMember({"series", "speedrun"}));
  app->add_option("--optimizer", s.optimizer,
                  "adamw, or muon: Muon (Newton-Schulz orthogonalised momentum) for the hidden matrices at --muon-lr, "
                  "AdamW at --lr for the embeddings, head, norms and biases")
      ->capture_default_str()
      ->check(CLI::IsMember({"adamw", "muon"}));
  app->add_option("--muon-lr", s.muon_lr, "Muon's peak rate for the hidden matrices (with --optimizer muon)")
      ->capture_default_str()
      ->check(kPositive);
  app->add_option("--muon-ns-steps", s.muon_ns_steps, "Newton-Schulz steps of each Muon update (fewer: a cheaper step, a rougher orthogonalisation)")
      ->capture_default_str()
      ->check(whole_between(1, 100));
  app->add_option("--muon-coefficients", s.muon_coefficients,
                  "the Newton-Schulz polynomial: jordan (one quintic for every step) or polar_express (one fitted to "
                  "each step, closer to orthogonal in fewer steps)")
      ->capture_default_str()
      ->check(CLI::IsMember({"jordan", "polar_express"}));
  app->add_option("--embedding-lr", s.embedding_lr,
                  "AdamW's peak rate for the embeddings (the token table, which the tied head shares, and the learned "
                  "positions), following the schedule in proportion (0: --lr)")
      ->capture_default_str()
      ->check(kNonNegative);
  app->add_option("--schedule", s.schedule,
                  "cosine (decay over the whole run after the warm-up), or wsd (warm-up, the peak rate, then a linear "
                  "decay over the last --decay-fraction of the run)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cosine", "wsd"}));
  app->add_option("--decay-fraction", s.decay_fraction, "with --schedule wsd, the part of the run the rate decays over")
      ->capture_default_str()
      ->check(between(1e-6, 1));
  app->add_option("--dropout", a.dropout, "dropout probability in training (default: the preset's or config's, 0 for the presets)")
      ->check(between(0, 0.99));
  auto* init_opt = app->add_option("--init-from", a.init_from,
                                   "start a new run (step 0, a fresh optimizer) from this checkpoint's weights: fine-tuning")
                       ->excludes(preset_opt)
                       ->excludes(config_opt);
  app->add_flag("--qk-norm,!--no-qk-norm", a.qk_norm,
                "RMS-normalise each head's queries and keys before the attention (a new run's model; sets qk_norm in its "
                "config; no export format holds it); --no-qk-norm keeps it off under --recipe speedrun")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)  // the last spelling wins, as for any repeated flag
      ->excludes(init_opt);
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
    if (a.resume && a.given.has("--recipe"))
      throw UsageError("--recipe chooses a new run's settings; a resumed run keeps its own: leave it out");
    if (!a.resume) {  // a resumed run's settings come from its state.json (the run checks that given ones agree)
      apply_recipe(a);
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
      "  pretrain --rope --minutes 10 --recipe speedrun  # Muon, warm-up-stable-decay, batch 8, QK-norm\n"
      "  pretrain --steps 2000 --batch-size 64 --grad-accum-steps 4 --dropout 0.1 --out checkpoints/big\n"
      "  mpirun -np 2 pretrain --rope --minutes 10 # data-parallel over 2 processes\n"
      "  pretrain --init-from checkpoints/pretrain-rope --block-size 1024 --rope-scaling linear:4 --steps 10 \\\n"
      "           --batch-size 2 --out checkpoints/rope-pi4  # a longer context, position interpolation\n");
  return app;
}

PretrainArgs parse_pretrain_args(int argc, const char* const* argv) { return parse_with(pretrain_cli, argc, argv); }

}  // namespace mvgpt::apps
