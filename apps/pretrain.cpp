// pretrain: trains a GPT on the prepared token files (data/train.bin, data/valid.bin).
//
// NOTE [ Two runs that differ only in their positions ]
// The run folder follows from the position embedding: checkpoints/pretrain (learned table) or
// checkpoints/pretrain-rope (--rope). Everything else is a function of the seed and the step:
// the initial weights come from the seed, the batch of step s is RandomBatches.at(s), and the
// learning rate of step s comes from a warm-up + cosine schedule over a fixed --schedule-steps,
// never from the clock. With --minutes the run stops on the clock, but two runs see the same data
// and the same learning rates step for step, and a resumed run continues exactly (the optimizer
// state, the step and the RNG are saved in last/).
//
// Folder layout: <out>/last (config.json, model.safetensors, optimizer.safetensors, state.json,
// tokenizer.json), <out>/best (the lowest held-out loss so far, without the optimizer state),
// <out>/log.csv, TensorBoard events in <out>/tensorboard/; the folder is marked, locked and replaced
// as apps/common/run_folder.h says.
//
// main() is the run's settings and setup (a new model, last/ resumed, or --init-from's weights with
// optional LoRA adapters, checked against the data and the flags); the loop itself, with its
// checkpoints and logs, is apps/common/trainer.h's Trainer.
//
// Under `mpirun -np N` the run is data-parallel (docs/distributed.md): the same weights on every
// rank, rank r trains on rows [r B/N, (r+1) B/N) of each global batch of B, the gradients are
// averaged before clipping, and rank 0 alone prints, evaluates and writes files.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "apps/common/app.h"
#include "apps/common/checkpoints.h"
#include "apps/flags/pretrain.h"
#include "apps/common/data_folder.h"
#include "apps/common/evaluation.h"
#include "apps/common/resources.h"
#include "apps/common/run_folder.h"
#include "apps/common/trainer.h"
#include <mvgpt/backends/cpu/openblas_core.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/dist/data_parallel.h>
#include <mvgpt/dist/world.h>
#include <mvgpt/gpt/batches.h>
#include <mvgpt/gpt/checkpoint.h>
#include <mvgpt/gpt/model.h>
#include <mvgpt/nn/lora.h>
#include <mvgpt/tensor/generator.h>
#include <mvgpt/util/atomic_file.h>

namespace fs = std::filesystem;

using namespace mvgpt;
using namespace mvgpt::apps;

namespace {

// The files a run reads and writes.
struct RunPaths {
  std::string last_dir, best_dir, state_path;  // the run folder's
  std::string train, valid, tokenizer;         // prepare's
  explicit RunPaths(const PretrainArgs& args)
      : last_dir((fs::path(args.out_dir) / "last").string()),
        best_dir((fs::path(args.out_dir) / "best").string()),
        state_path((fs::path(last_dir) / "state.json").string()),
        train((fs::path(args.data_dir) / "train.bin").string()),
        valid((fs::path(args.data_dir) / "valid.bin").string()),
        tokenizer((fs::path(args.data_dir) / "tokenizer.json").string()) {}
};

// Where a run starts: its state, its model's shape and, unless the run is new, the weights.
struct RunStart {
  TrainState state;
  gpt::GPTConfig config;
  std::shared_ptr<gpt::GPT> model;  // null for a new run: built from the seed once the data is checked
};

// The model the flags describe: --preset or --config, with --rope, --block-size and --dropout.
gpt::GPTConfig config_from_flags(const PretrainArgs& args) {
  gpt::GPTConfig config = args.config_path.empty() ? gpt::GPTConfig::preset(args.preset)
                                                   : gpt::GPTConfig::from_json(util::read_file(args.config_path), args.config_path);
  if (args.rope) config.rope = true;
  if (args.qk_norm != 0) config.qk_norm = args.qk_norm > 0;
  if (args.dropout >= 0) config.dropout = args.dropout;
  if (args.block_size > 0) config.block_size = args.block_size;
  if (!args.rope_scaling.empty()) {
    config.rope_scaling = gpt::RopeScaling::parse(args.rope_scaling);
    if (config.rope_scaling.enabled() && !config.rope)
      throw UsageError("--rope-scaling needs rotary positions: add --rope (or a rotary --preset or --config)");
  }
  return config;
}

// --resume: the run in last/, checked whole before any of it is believed; the settings become the
// run's (flags that define the run must agree with it, or be left out).
RunStart resume_run(PretrainArgs& args, const RunPaths& paths, Device device) {
  const std::string& last_dir = paths.last_dir;
  if (!fs::exists(paths.state_path))
    throw AppError("nothing to resume: " + paths.state_path + " does not exist; " +
                   (fs::exists(paths.best_dir) ? "the run's best/ can be evaluated, or start over with --overwrite (best/ is kept until "
                                                 "the new run's first checkpoint)"
                                               : "start the run without --resume"));
  // Every file of last/ is the one the run wrote (checksums.json), before any of it is believed.
  try {
    gpt::verify_checkpoint_files(last_dir);
  } catch (const std::exception& e) {
    throw AppError(std::string(e.what()) + "; the checkpoint is damaged: start over with --overwrite (best/ is kept until the new run saves)");
  }
  RunStart run;
  PretrainSettings saved;
  run.state = read_state(paths.state_path, saved);
  if (const std::string why = settings_problem(saved); !why.empty())
    throw AppError(paths.state_path + ": settings." + why + "; the file was edited or damaged: start over with --overwrite");
  check_resume_flags(args.given, args.settings, saved);
  args.settings = saved;
  if (!same_tokenizer(paths.tokenizer, (fs::path(last_dir) / "tokenizer.json").string()))
    throw AppError(paths.tokenizer + " is not the tokenizer this run was trained with (" + last_dir +
                   "/tokenizer.json); re-run prepare with --tokenizer " + last_dir + "/tokenizer.json, or start over with --overwrite");
  run.model = load_model(last_dir, device).model;
  const gpt::GPTConfig& config = run.config = run.model->config();
  if (args.rope != config.rope && args.given.has("--rope"))
    throw UsageError(std::string("--rope: the resumed run has ") + (config.rope ? "rotary" : "learned") + " positions");
  if (args.given.has("--preset") || args.given.has("--config")) {  // the same command again: the same model
    gpt::GPTConfig given = config_from_flags(args);
    given.rope_scaling = args.rope_scaling.empty() ? config.rope_scaling : gpt::RopeScaling::parse(args.rope_scaling);
    given.dropout = config.dropout;  // --dropout is checked on its own below
    if (args.config_path.empty()) given.vocab_size = config.vocab_size;  // presets follow the (same) tokenizer
    if (args.qk_norm == 0) given.qk_norm = config.qk_norm;  // --recipe speedrun may have set it; --qk-norm is checked below
    if (given.to_json() != config.to_json())
      throw UsageError((args.config_path.empty() ? "--preset " + args.preset : "--config " + args.config_path) +
                       " describes another model than the resumed run's (" + last_dir + "/config.json); leave it out");
  }
  if (args.qk_norm != 0 && (args.qk_norm > 0) != config.qk_norm)
    throw UsageError(std::string(args.qk_norm > 0 ? "--qk-norm" : "--no-qk-norm") + " differs from the resumed run's model (" +
                     last_dir + "/config.json); leave it out");
  if (args.block_size > 0 && args.block_size != config.block_size)
    throw UsageError(format("--block-size %lld differs from the resumed run's (%lld); leave it out", (long long)args.block_size,
                            (long long)config.block_size));
  if (!args.rope_scaling.empty() && gpt::RopeScaling::parse(args.rope_scaling) != config.rope_scaling)
    throw UsageError("--rope-scaling " + args.rope_scaling + " differs from the resumed run's (" +
                     config.rope_scaling.to_string() + "); leave it out");
  if (args.given.has("--dropout") && args.dropout != config.dropout)
    throw UsageError(format("--dropout differs from the resumed run's (%g); leave it out to keep it", config.dropout));
  return run;
}

// --init-from: a new run from another run's weights (fine-tuning): its own folder, step 0, a fresh
// optimizer, the same weights in a model of the new settings (dropout, context).
RunStart init_from_run(const PretrainArgs& args, const RunPaths& paths, Device device) {
  RunStart run;
  const std::string init_dir = run.state.init_from = resolve_checkpoint(args.init_from);
  // A run never writes over what it reads: --out holding the base would move it aside (--overwrite)
  // and delete it at the new run's first save.
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(fs::absolute(init_dir), ec), out = fs::weakly_canonical(fs::absolute(args.out_dir), ec);
  if (std::mismatch(out.begin(), out.end(), base.begin(), base.end()).first == out.end())
    throw UsageError("--out " + args.out_dir + " holds the checkpoint --init-from reads (" + init_dir +
                     "); the new run needs a folder of its own, such as " + args.out_dir + "-ft");
  const std::string own_tok = checkpoint_tokenizer(init_dir);
  if (!own_tok.empty() && !same_tokenizer(paths.tokenizer, own_tok))
    throw AppError(paths.tokenizer + " is not the tokenizer " + init_dir + " was trained with; encode the new text with it: "
                   "prepare --tokenizer " + own_tok + " --train FILE --valid FILE --out DIR, then --data DIR");
  auto loaded = load_model(init_dir, device);
  run.state.init_step = loaded.metadata.count("step") ? loaded.metadata.at("step") : "";
  nn::merge_lora(*loaded.model);  // a fine-tuned checkpoint's adapters become part of the weights
  gpt::GPTConfig& config = run.config = loaded.model->config();
  if (args.given.has("--rope") && !config.rope)
    throw UsageError("--rope: " + init_dir + " has learned positions, which cannot become rotary");
  if (args.dropout >= 0) config.dropout = args.dropout;
  if (args.block_size > 0 && args.block_size != config.block_size) {
    if (!config.rope)
      throw UsageError(format("--block-size %lld: %s has a learned table of %lld positions; only a rotary model's "
                              "context can change", (long long)args.block_size, init_dir.c_str(), (long long)config.block_size));
    config.block_size = args.block_size;
  }
  if (!args.rope_scaling.empty()) {
    const gpt::RopeScaling scaling = gpt::RopeScaling::parse(args.rope_scaling);
    if (scaling.enabled() && !config.rope)
      throw UsageError("--rope-scaling: " + init_dir + " has learned positions; only rotary positions can be scaled");
    config.rope_scaling = scaling;  // saved in the new run's config.json
  }
  // Only the config differs.
  run.model = std::make_shared<gpt::GPT>(config);
  run.model->load_state_dict(loaded.model->state_dict());
  run.model->to(device);
  return run;
}

// The lines that describe the run before it starts.
void print_run(const PretrainArgs& args, const std::string& run_name, const gpt::GPT& model, Device device,
               const PrecisionChoice& precision, const Trainer& trainer, const text::TokenFile& train,
               const text::TokenFile& valid) {
  const gpt::GPTConfig& config = model.config();
  const PretrainSettings& s = trainer.settings();
  const TrainState& st = trainer.state();
  std::printf("%s: %s parameters (%s positions, %lld layers, %lld heads, width %lld, context %lld, vocabulary %lld) on %s\n",
              run_name.c_str(), format_count(model.num_parameters()).c_str(),
              !config.rope                    ? "learned"
              : config.rope_scaling.enabled() ? ("rotary " + config.rope_scaling.to_string()).c_str()
                                              : "rotary",
              (long long)config.n_layer, (long long)config.n_head, (long long)config.n_embd,
              (long long)config.block_size, (long long)config.vocab_size, device.str().c_str());
  if (config.qk_norm)
    std::printf("QK-norm: each head's queries and keys RMS-normalised (no export format holds it: export refuses this model)\n");
  if (const std::string note = device_note(); !note.empty()) std::printf("%s\n", note.c_str());
  std::printf("%s\n", cpu::openblas_core_report().c_str());
  std::printf("precision: %s\n", precision.reason.c_str());
  if (!st.init_from.empty())
    std::printf("initialised from %s%s\n", st.init_from.c_str(), st.init_step.empty() ? "" : (" (step " + st.init_step + ")").c_str());
  if (const nn::LoRAOptions lora = nn::lora_options(model); lora.rank > 0) {
    int64_t trained = 0;
    for (const auto& [name, p] : trainer.trainable()) trained += p.numel();
    std::printf("LoRA: rank %lld, alpha %g%s on %zu layers; %s parameters trained (%.2f%% of %s), the rest frozen\n",
                (long long)lora.rank, lora.alpha, lora.dropout > 0 ? format(", dropout %g", lora.dropout).c_str() : "",
                lora.targets.size(), format_count(trained).c_str(), 100.0 * double(trained) / double(model.num_parameters()),
                format_count(model.num_parameters()).c_str());
  }
  if (dist::size() > 1)
    std::printf("data parallel: %d ranks over %s, %lld sequences each; %s bytes of gradients all-reduced a step\n",
                dist::size(), dist::transport().c_str(), (long long)(s.batch_size / dist::size()),
                format_count(dist::gradient_bytes(trainer.parameters())).c_str());
  std::printf("data: %s tokens to train on, %s held out; batch %lld x %lld = %s tokens a step\n",
              format_count(int64_t(train.size())).c_str(), format_count(int64_t(valid.size())).c_str(),
              (long long)s.batch_size, (long long)config.block_size,
              format_count(s.batch_size * config.block_size).c_str());
  if (s.grad_accum_steps > 1)
    std::printf("gradient accumulation: %lld micro-batches of %lld sequences a step\n", (long long)s.grad_accum_steps,
                (long long)(s.batch_size / dist::size() / s.grad_accum_steps));
  if (s.optimizer == "muon")
    std::printf("Muon for the hidden matrices: lr %.3g -> %.3g, momentum 0.95 (Nesterov), %lld Newton-Schulz steps (%s); the rest:\n",
                s.muon_lr, s.muon_lr * s.min_lr / s.lr, (long long)s.muon_ns_steps, s.muon_coefficients.c_str());
  const std::string shape = s.schedule == "wsd" ? format("the peak, then a linear decay over the last %.0f%% of", 100 * s.decay_fraction)
                                                : std::string("cosine over");
  std::printf("AdamW lr %.3g -> %.3g (warm-up %lld, %s %s), betas %.3g %.3g, weight decay %.3g, clip %.3g, seed %llu%s\n",
              s.lr, s.min_lr, (long long)s.warmup_steps, shape.c_str(),
              s.fit_schedule ? format("the steps --minutes allows, fitted to the clock from %lld", (long long)s.schedule_steps).c_str()
                             : format("%lld steps", (long long)s.schedule_steps).c_str(),
              s.beta1, s.beta2, s.weight_decay, s.grad_clip, (unsigned long long)s.seed,
              config.dropout > 0 ? format(", dropout %.3g", config.dropout).c_str() : "");
  if (s.embedding_lr > 0)
    std::printf("the embeddings at their own rate: %.3g -> %.3g\n", s.embedding_lr, s.embedding_lr * s.min_lr / s.lr);
}

// The command line that continues this run: this one, --overwrite and --recipe (a new run's
// choice, refused on a resume) left out, --resume added.
std::string resume_command(int argc, char** argv) {
  std::string cmd = fs::path(argv[0]).filename().string();
  bool has_resume = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--overwrite" || arg.starts_with("--recipe=")) continue;
    if (arg == "--recipe") {
      ++i;  // and its value
      continue;
    }
    has_resume |= arg == "--resume";
    cmd += arg.find_first_of(" \t'\"$") == std::string::npos ? " " + arg : " '" + arg + "'";
  }
  return has_resume ? cmd : cmd + " --resume";
}

}  // namespace

int main(int argc, char** argv) {
  PretrainArgs args;
  const auto app = pretrain_cli(args);
  return dist::finalize(run_app(*app, argc, argv, [&] {
    PretrainSettings& s = args.settings;
    dist::init();  // joins an mpirun launch; a world of one otherwise
    if (!dist::is_root() && !std::freopen("/dev/null", "w", stdout))  // rank 0 alone prints
      throw AppError("cannot silence the output of rank " + std::to_string(dist::rank()));
    const Device device = dist::local_device(resolve_device(args.device_flag));  // cuda:<local rank> under mpirun
    const PrecisionChoice precision_choice = choose_precision(args.precision, device);
    const PrecisionGuard precision(precision_choice.precision);  // the steps and the held-out measurements
    const std::string run_name = checkpoint_name(args.out_dir);
    const RunPaths paths(args);
    const std::string prep_hint = "run prepare first, or pass --data DIR";
    require_file(paths.train, "training tokens", prep_hint);
    require_file(paths.valid, "held-out tokens", prep_hint);
    require_file(paths.tokenizer, "tokenizer", prep_hint);
    for (const std::string& path : {paths.train, paths.valid, paths.tokenizer}) verify_prepared_file(path);  // one prepare's three files
    std::optional<RunFolder> folder;  // rank 0 alone writes files
    if (dist::is_root()) folder.emplace(args.out_dir);

    // --- the run: new, resumed from last/, or new from another run's weights (--init-from) ---
    if (!args.resume && folder) folder->check_fresh(args.overwrite);
    RunStart run;
    if (args.resume) {
      run = resume_run(args, paths, device);
      // Without --steps or --minutes a resumed run ends where it was started to end.
      if (!args.given.has("--steps") && !args.given.has("--minutes")) {
        if (run.state.until_steps > 0) args.steps = run.state.until_steps;
        else if (run.state.until_minutes > 0) args.minutes = run.state.until_minutes;
      }
    }
    else if (!args.init_from.empty()) run = init_from_run(args, paths, device);
    else run.config = config_from_flags(args);
    gpt::GPTConfig& config = run.config;
    complete_schedule(s, args.steps);  // done while parsing for a new run; a resumed one checks its state.json

    if (s.batch_size % (dist::size() * s.grad_accum_steps) != 0)
      throw UsageError(format("--batch-size %lld does not split over %d rank%s%s; use a multiple of %lld", (long long)s.batch_size,
                              dist::size(), dist::size() == 1 ? "" : "s",
                              s.grad_accum_steps > 1 ? format(" x %lld micro-batches", (long long)s.grad_accum_steps).c_str() : "",
                              (long long)(dist::size() * s.grad_accum_steps)));
    const int64_t micro_batch = s.batch_size / dist::size() / s.grad_accum_steps;  // sequences a forward pass holds

    // --- data and tokenizer ---
    text::Tokenizer tok = text::Tokenizer::load(paths.tokenizer);
    if (!args.resume && args.init_from.empty() && args.config_path.empty())
      config.vocab_size = int64_t(tok.vocab_size());  // presets follow the tokenizer
    check_tokenizer_fits(tok, paths.tokenizer, config, run_name);
    config.validate();
    check_training_fits(config, micro_batch, device);  // before anything big is allocated
    text::TokenFile train(paths.train), valid(paths.valid);
    check_tokens_fit(train, config, run_name);
    check_tokens_fit(valid, config, run_name);
    if (int64_t(valid.size()) < config.block_size + 1)
      throw AppError(paths.valid + ": " + std::to_string(valid.size()) + " tokens, too few for one held-out window of " +
                     std::to_string(config.block_size + 1) + "; prepare more held-out text");
    gpt::RandomBatches batches(train, s.batch_size, config.block_size, s.seed);
    const std::vector<int32_t> byte_lengths = token_byte_lengths(tok);  // for bits per byte

    if (!run.model) {
      Generator init_gen(s.seed);
      run.model = std::make_shared<gpt::GPT>(config, &init_gen);
      run.model->to(device);
    }
    gpt::GPT& model = *run.model;
    if (args.lora.rank > 0) {
      if (args.resume) throw UsageError("--lora-rank: a resumed run keeps its adapters (from last/); leave it out");
      // Past the width the rank adds no expressiveness, only memory (1e9 asked for terabytes).
      if (args.lora.rank > config.n_embd)
        throw UsageError(format("--lora-rank %lld is larger than the model's width (%lld), the smaller side of the layers it "
                                "adapts; adapters use a few (8, 16)", (long long)args.lora.rank, (long long)config.n_embd));
      Generator lora_gen(s.seed);
      nn::add_lora(model, args.lora, {.gen = &lora_gen});
    }
    model.train();  // a loaded checkpoint comes in eval mode; dropout (when configured) must apply
    Trainer trainer(model, s, run.state, batches, valid, byte_lengths,
                    {.out_dir = args.out_dir,
                     .run_name = run_name,
                     .tokenizer_json = util::read_file(paths.tokenizer),  // beside each checkpoint, for generate and evaluate
                     .device = device,
                     .steps = args.steps,
                     .minutes = args.minutes,
                     .log_interval = args.log_interval,
                     .skip_nonfinite = args.skip_nonfinite,
                     .inject_nan_step = args.inject_nan_step,
                     .kill_after_save_step = args.kill_after_save_step,
                     .debug_step_seconds = args.debug_step_seconds});
    if (args.resume) trainer.resume();

    print_run(args, run_name, model, device, precision_choice, trainer, train, valid);
    const TrainState& st = trainer.state();
    const double budget_s = args.minutes * 60;
    if (args.resume) {
      std::printf("resuming %s at step %lld (%s used)\n", args.out_dir.c_str(), (long long)st.step,
                  format_duration(st.elapsed_s).c_str());
      const bool own_end = !args.given.has("--steps") && !args.given.has("--minutes");
      if (args.steps > 0 && st.step >= args.steps)
        throw AppError(own_end ? format("the run is complete: it was trained to --steps %lld, and last/ holds step %lld; "
                                        "to train it further, pass a larger --steps with --resume (past its schedule of "
                                        "%lld steps the rate stays at --min-lr)",
                                        (long long)args.steps, (long long)st.step, (long long)s.schedule_steps)
                               : "the run is already at step " + std::to_string(st.step) + "; pass a larger --steps to train further");
      if (args.steps == 0 && st.elapsed_s >= budget_s)
        throw AppError((own_end ? "the run is complete: it used its " + format_duration(st.elapsed_s) + " of --minutes " +
                                      format("%g", args.minutes)
                                : "the run already used its " + format_duration(st.elapsed_s)) +
                       "; pass a larger --minutes (the run's total) or --steps N with --resume to train further");
    }
    std::fflush(stdout);

    if (folder) {
      for (const std::string& note : folder->notes()) std::printf("%s\n", note.c_str());
      if (args.resume) {
        folder->start_resumed();
      } else {
        folder->start_fresh(args.overwrite);  // the old run moves aside, deleted at this run's first checkpoint
        if (folder->replacing())
          std::printf("replacing the run in %s: it is kept until this run's first checkpoint is saved\n", args.out_dir.c_str());
      }
    }
    const int sig = trainer.run(folder ? &*folder : nullptr);
    if (sig != 0) {
      std::printf("stopped by %s: continue with the same command and --resume: %s\n",
                  sig == SIGINT ? "Ctrl-C (SIGINT)" : sig == SIGTERM ? "SIGTERM" : "SIGHUP", resume_command(argc, argv).c_str());
      return 128 + sig;
    }
    return 0;
  }));
}
