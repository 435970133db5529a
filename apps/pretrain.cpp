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
// Under `mpirun -np N` the run is data-parallel (docs/distributed.md): the same weights on every
// rank, rank r trains on rows [r B/N, (r+1) B/N) of each global batch of B, the gradients are
// averaged before clipping, and rank 0 alone prints, evaluates and writes files.
#include <csignal>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "apps/common/app.h"
#include "apps/common/checkpoints.h"
#include "apps/common/cli.h"
#include "apps/common/csv_log.h"
#include "apps/common/data_folder.h"
#include "apps/common/evaluation.h"
#include "apps/common/numerics.h"
#include "apps/common/resources.h"
#include "apps/common/run_folder.h"
#include "apps/common/schedule_fit.h"
#include "apps/common/tensorboard.h"
#include <mvgpt/autograd/engine.h>
#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/backends/cpu/openblas_core.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/dist/data_parallel.h>
#include <mvgpt/dist/world.h>
#include <mvgpt/gpt/batches.h>
#include <mvgpt/gpt/checkpoint.h>
#include <mvgpt/gpt/model.h>
#include <mvgpt/nn/lora.h>
#include <mvgpt/nn/lr_schedule.h>
#include <mvgpt/nn/optim.h>
#include <mvgpt/tensor/generator.h>
#include <mvgpt/util/atomic_file.h>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace mvgpt::apps {
// The settings that define a run, as state.json keeps them (--resume reads them back). One list of
// the keys every state.json has (a missing one is an error); the keys added since runs were first
// saved are optional and take their old meaning.
#define MVGPT_PRETRAIN_SETTINGS(X)                                                                            \
  X(batch_size) X(lr) X(min_lr) X(warmup_steps) X(schedule_steps) X(weight_decay) X(grad_clip) X(beta1) X(beta2) \
  X(seed) X(eval_interval) X(eval_windows)
void to_json(json& j, const PretrainSettings& s) {
#define MVGPT_PUT(field) j[#field] = s.field;
  MVGPT_PRETRAIN_SETTINGS(MVGPT_PUT)
#undef MVGPT_PUT
  j["grad_accum_steps"] = s.grad_accum_steps;
  j["fit_schedule"] = s.fit_schedule;
}
void from_json(const json& j, PretrainSettings& s) {
#define MVGPT_GET(field) j.at(#field).get_to(s.field);
  MVGPT_PRETRAIN_SETTINGS(MVGPT_GET)
#undef MVGPT_GET
  s.grad_accum_steps = j.value("grad_accum_steps", int64_t(1));
  s.fit_schedule = j.value("fit_schedule", false);
}
#undef MVGPT_PRETRAIN_SETTINGS
}  // namespace mvgpt::apps
using namespace mvgpt;
using namespace mvgpt::apps;

namespace {

// Ctrl-C (SIGINT), and SIGTERM and SIGHUP (what kill, timeout, systemd and batch schedulers send):
// finish the step, save, exit 128 + the signal. A second one stops at once.
std::atomic<int> g_signal{0};
extern "C" void on_stop_signal(int sig) {
  g_signal = sig;
  std::signal(sig, SIG_DFL);
}


// Where a run stands: state.json in last/.
struct State {
  int64_t step = 0;  // steps done
  double elapsed_s = 0;
  int64_t tokens_seen = 0;
  double best_val_loss = INFINITY;
  int64_t best_step = -1;
  uint64_t rng_seed = 0, rng_offset = 0;
  std::string init_from, init_step;  // the checkpoint a fine-tuning run started from ("" for none)
};

json state_json(const State& st, const PretrainSettings& s, const std::string& run) {
  json j = {{"run", run},
            {"step", st.step},
            {"elapsed_s", st.elapsed_s},
            {"tokens_seen", st.tokens_seen},
            {"best_step", st.best_step},
            {"rng", {{"seed", st.rng_seed}, {"offset", st.rng_offset}}},
            {"settings", json(s)}};
  j["best_val_loss"] = std::isfinite(st.best_val_loss) ? json(st.best_val_loss) : json(nullptr);
  if (!st.init_from.empty()) j["init_from"] = {{"checkpoint", st.init_from}, {"step", st.init_step}};
  return j;
}

State read_state(const std::string& path, PretrainSettings& settings) {
  State st;
  try {
    json j = json::parse(util::read_file(path));
    st.step = j.at("step");
    st.elapsed_s = j.at("elapsed_s");
    st.tokens_seen = j.at("tokens_seen");
    st.best_step = j.at("best_step");
    st.best_val_loss = j.at("best_val_loss").is_null() ? INFINITY : double(j.at("best_val_loss"));
    st.rng_seed = j.at("rng").at("seed");
    st.rng_offset = j.at("rng").at("offset");
    settings = j.at("settings").get<PretrainSettings>();
    if (j.contains("init_from")) {
      st.init_from = j.at("init_from").at("checkpoint").get<std::string>();
      st.init_step = j.at("init_from").at("step").get<std::string>();
    }
  } catch (const json::exception& e) {
    throw AppError(path + ": not a pretrain state file (" + e.what() + "); start a new run with --overwrite");
  }
  // Where the run stands must be a place a run can stand (the file was edited or damaged otherwise).
  std::string bad;
  if (st.step < 0) bad = format("step is %lld", (long long)st.step);
  else if (!std::isfinite(st.elapsed_s) || st.elapsed_s < 0) bad = format("elapsed_s is %g", st.elapsed_s);
  else if (st.tokens_seen < 0) bad = format("tokens_seen is %lld", (long long)st.tokens_seen);
  else if (st.best_step < -1 || st.best_step > st.step) bad = format("best_step is %lld at step %lld", (long long)st.best_step, (long long)st.step);
  else if (std::isnan(st.best_val_loss) || st.best_val_loss < 0) bad = format("best_val_loss is %g", st.best_val_loss);
  if (!bad.empty()) throw AppError(path + ": " + bad + "; the file was edited or damaged: start over with --overwrite");
  return st;
}

std::string csv_number(double v, const char* fmt = "%.6g") { return std::isfinite(v) ? format(fmt, v) : ""; }

// The command line that continues this run: this one, --overwrite left out, --resume added.
std::string resume_command(int argc, char** argv) {
  std::string cmd = fs::path(argv[0]).filename().string();
  bool has_resume = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--overwrite") continue;
    has_resume |= arg == "--resume";
    cmd += arg.find_first_of(" \t'\"$") == std::string::npos ? " " + arg : " '" + arg + "'";
  }
  return has_resume ? cmd : cmd + " --resume";
}

std::string what_was_saved(int64_t saved_step) {
  return saved_step < 0 ? "no checkpoint saved yet" : format("last/ holds step %lld", (long long)saved_step);
}

// --resume keeps the run's --lr and --grad-clip, so a lower rate means a new run; `resume_with` is
// what --resume can still change.
std::string what_to_do(int64_t saved_step, const std::string& resume_with) {
  std::string s = "start over with a lower --lr or --grad-clip";
  if (saved_step >= 0) s += " and --overwrite" + (resume_with.empty() ? "" : ", or continue from last/ with " + resume_with);
  else if (!resume_with.empty()) s += ", or pass --skip-nonfinite to skip such steps";
  return s;
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
    const std::string run_name = checkpoint_name(args.out_dir);
    const std::string last_dir = (fs::path(args.out_dir) / "last").string();
    const std::string best_dir = (fs::path(args.out_dir) / "best").string();
    const std::string state_path = (fs::path(last_dir) / "state.json").string();

    const std::string prep_hint = "run prepare first, or pass --data DIR";
    const std::string train_path = (fs::path(args.data_dir) / "train.bin").string();
    const std::string valid_path = (fs::path(args.data_dir) / "valid.bin").string();
    const std::string tok_path = (fs::path(args.data_dir) / "tokenizer.json").string();
    require_file(train_path, "training tokens", prep_hint);
    require_file(valid_path, "held-out tokens", prep_hint);
    require_file(tok_path, "tokenizer", prep_hint);
    for (const std::string& path : {train_path, valid_path, tok_path}) verify_prepared_file(path);  // one prepare's three files
    std::optional<RunFolder> folder;  // rank 0 alone writes files
    if (dist::is_root()) folder.emplace(args.out_dir);

    // --- the run: new, resumed from last/, or new from another run's weights (--init-from) ---
    std::string init_dir, init_step;
    State st;
    gpt::GPTConfig config;
    std::shared_ptr<gpt::GPT> model;
    if (args.resume) {
      if (!fs::exists(state_path))
        throw AppError("nothing to resume: " + state_path + " does not exist; " +
                       (fs::exists(best_dir) ? "the run's best/ can be evaluated, or start over with --overwrite (best/ is kept until "
                                               "the new run's first checkpoint)"
                                             : "start the run without --resume"));
      // Every file of last/ is the one the run wrote (checksums.json), before any of it is believed.
      try {
        gpt::verify_checkpoint_files(last_dir);
      } catch (const std::exception& e) {
        throw AppError(std::string(e.what()) + "; the checkpoint is damaged: start over with --overwrite (best/ is kept until the new run saves)");
      }
      PretrainSettings saved;
      st = read_state(state_path, saved);
      if (const std::string why = settings_problem(saved); !why.empty())
        throw AppError(state_path + ": settings." + why + "; the file was edited or damaged: start over with --overwrite");
      // Flags that define the run must agree with it (or be left out).
      auto same = [&](const char* flag, bool equal) {
        if (args.given.has(flag) && !equal)
          throw UsageError(std::string(flag) + " differs from the resumed run's (" + json(saved).dump() +
                           "); leave it out to keep the run's settings");
      };
      same("--batch-size", s.batch_size == saved.batch_size);
      same("--lr", s.lr == saved.lr);
      same("--min-lr", s.min_lr == saved.min_lr);
      same("--warmup-steps", s.warmup_steps == saved.warmup_steps);
      same("--schedule-steps", s.schedule_steps == saved.schedule_steps);
      same("--weight-decay", s.weight_decay == saved.weight_decay);
      same("--grad-clip", s.grad_clip == saved.grad_clip);
      same("--seed", s.seed == saved.seed);
      same("--eval-interval", s.eval_interval == saved.eval_interval);
      same("--eval-windows", s.eval_windows == saved.eval_windows);
      same("--beta1", s.beta1 == saved.beta1);
      same("--beta2", s.beta2 == saved.beta2);
      same("--grad-accum-steps", s.grad_accum_steps == saved.grad_accum_steps);
      s = saved;
      if (!same_tokenizer(tok_path, (fs::path(last_dir) / "tokenizer.json").string()))
        throw AppError(tok_path + " is not the tokenizer this run was trained with (" + last_dir +
                       "/tokenizer.json); re-run prepare with --tokenizer " + last_dir + "/tokenizer.json, or start over with --overwrite");
      model = load_model(last_dir, device).model;
      config = model->config();
      if (args.rope != config.rope && args.given.has("--rope"))
        throw UsageError(std::string("--rope: the resumed run has ") + (config.rope ? "rotary" : "learned") + " positions");
      if (args.given.has("--preset") || args.given.has("--config")) {  // the same command again: the same model
        gpt::GPTConfig given = args.config_path.empty() ? gpt::GPTConfig::preset(args.preset)
                                                        : gpt::GPTConfig::from_json(util::read_file(args.config_path), args.config_path);
        if (args.rope) given.rope = true;
        if (args.block_size > 0) given.block_size = args.block_size;
        given.rope_scaling = args.rope_scaling.empty() ? config.rope_scaling : gpt::RopeScaling::parse(args.rope_scaling);
        given.dropout = config.dropout;  // --dropout is checked on its own below
        if (args.config_path.empty()) given.vocab_size = config.vocab_size;  // presets follow the (same) tokenizer
        if (given.to_json() != config.to_json())
          throw UsageError((args.config_path.empty() ? "--preset " + args.preset : "--config " + args.config_path) +
                           " describes another model than the resumed run's (" + last_dir + "/config.json); leave it out");
      }
      if (args.block_size > 0 && args.block_size != config.block_size)
        throw UsageError(format("--block-size %lld differs from the resumed run's (%lld); leave it out", (long long)args.block_size,
                                (long long)config.block_size));
      if (!args.rope_scaling.empty() && gpt::RopeScaling::parse(args.rope_scaling) != config.rope_scaling)
        throw UsageError("--rope-scaling " + args.rope_scaling + " differs from the resumed run's (" +
                         config.rope_scaling.to_string() + "); leave it out");
      if (args.given.has("--dropout") && args.dropout != config.dropout)
        throw UsageError(format("--dropout differs from the resumed run's (%g); leave it out to keep it", config.dropout));
    } else if (!args.init_from.empty()) {
      // A new run from another run's weights (fine-tuning): its own folder, step 0, a fresh optimizer.
      if (folder) folder->check_fresh(args.overwrite);
      init_dir = resolve_checkpoint(args.init_from);
      const std::string own_tok = checkpoint_tokenizer(init_dir);
      if (!own_tok.empty() && !same_tokenizer(tok_path, own_tok))
        throw AppError(tok_path + " is not the tokenizer " + init_dir + " was trained with; encode the new text with it: "
                       "prepare --tokenizer " + own_tok + " --train FILE --valid FILE --out DIR, then --data DIR");
      auto loaded = load_model(init_dir, device);
      init_step = loaded.metadata.count("step") ? loaded.metadata.at("step") : "";
      nn::merge_lora(*loaded.model);  // a fine-tuned checkpoint's adapters become part of the weights
      config = loaded.model->config();
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
      // The same weights in a model of the new settings (dropout, context): only the config differs.
      model = std::make_shared<gpt::GPT>(config);
      model->load_state_dict(loaded.model->state_dict());
      model->to(device);
    } else {
      if (folder) folder->check_fresh(args.overwrite);
      config = args.config_path.empty() ? gpt::GPTConfig::preset(args.preset)
                                   : gpt::GPTConfig::from_json(util::read_file(args.config_path), args.config_path);
      if (args.rope) config.rope = true;
      if (args.dropout >= 0) config.dropout = args.dropout;
      if (args.block_size > 0) config.block_size = args.block_size;
      if (!args.rope_scaling.empty()) {
        config.rope_scaling = gpt::RopeScaling::parse(args.rope_scaling);
        if (config.rope_scaling.enabled() && !config.rope)
          throw UsageError("--rope-scaling needs rotary positions: add --rope (or a rotary --preset or --config)");
      }
    }
    complete_schedule(s, args.steps);  // done while parsing for a new run; a resumed one checks its state.json

    if (s.batch_size % (dist::size() * s.grad_accum_steps) != 0)
      throw UsageError(format("--batch-size %lld does not split over %d rank%s%s; use a multiple of %lld", (long long)s.batch_size,
                              dist::size(), dist::size() == 1 ? "" : "s",
                              s.grad_accum_steps > 1 ? format(" x %lld micro-batches", (long long)s.grad_accum_steps).c_str() : "",
                              (long long)(dist::size() * s.grad_accum_steps)));
    const int64_t micro_batch = s.batch_size / dist::size() / s.grad_accum_steps;  // sequences a forward pass holds

    // --- data and tokenizer ---
    text::Tokenizer tok = text::Tokenizer::load(tok_path);
    if (!args.resume && args.init_from.empty() && args.config_path.empty())
      config.vocab_size = int64_t(tok.vocab_size());  // presets follow the tokenizer
    check_tokenizer_fits(tok, tok_path, config, run_name);
    config.validate();
    check_training_fits(config, micro_batch, device);  // before anything big is allocated
    text::TokenFile train(train_path), valid(valid_path);
    check_tokens_fit(train, config, run_name);
    check_tokens_fit(valid, config, run_name);
    if (int64_t(valid.size()) < config.block_size + 1)
      throw AppError(valid_path + ": " + std::to_string(valid.size()) + " tokens, too few for one held-out window of " +
                     std::to_string(config.block_size + 1) + "; prepare more held-out text");
    gpt::RandomBatches batches(train, s.batch_size, config.block_size, s.seed);
    const std::vector<int32_t> byte_lengths = token_byte_lengths(tok);  // for bits per byte

    if (!model) {
      Generator init_gen(s.seed);
      model = std::make_shared<gpt::GPT>(config, &init_gen);
      model->to(device);
    }
    manual_seed(s.seed);  // dropout's stream
    dist::shard_generator(default_generator());  // rank r draws its rows' share of each mask
    if (args.resume) default_generator().offset = st.rng_offset;
    if (args.lora.rank > 0) {
      if (args.resume) throw UsageError("--lora-rank: a resumed run keeps its adapters (from last/); leave it out");
      Generator lora_gen(s.seed);
      nn::add_lora(*model, args.lora, {.gen = &lora_gen});
    }
    model->train();  // a loaded checkpoint comes in eval mode; dropout (when configured) must apply

    // What trains: every parameter, or with LoRA the adapters alone (the base is frozen: no
    // gradient, no optimizer state).
    nn::NamedTensors trainable;
    for (auto& [name, p] : model->named_parameters())
      if (p.requires_grad()) trainable.emplace_back(name, p);
    auto groups = nn::weight_decay_groups(trainable, s.weight_decay);
    nn::AdamW opt(groups, {.lr = s.lr, .beta1 = s.beta1, .beta2 = s.beta2, .eps = 1e-8, .weight_decay = s.weight_decay});
    if (args.resume) opt.load((fs::path(last_dir) / "optimizer.safetensors").string());
    nn::WarmupCosineSchedule schedule{s.lr, s.min_lr, s.warmup_steps, s.schedule_steps};
    std::vector<Tensor> params;
    for (auto& [name, p] : trainable) params.push_back(p);
    dist::broadcast_tensors(model->parameters());  // rank 0's weights everywhere (built from the seed or loaded, they agree already)
    const nn::NamedTensors& named_params = trainable;

    std::printf("%s: %s parameters (%s positions, %lld layers, %lld heads, width %lld, context %lld, vocabulary %lld) on %s\n",
                run_name.c_str(), format_count(model->num_parameters()).c_str(),
                !config.rope ? "learned"
                : config.rope_scaling.enabled() ? ("rotary " + config.rope_scaling.to_string()).c_str()
                                                : "rotary",
                (long long)config.n_layer, (long long)config.n_head, (long long)config.n_embd,
                (long long)config.block_size, (long long)config.vocab_size, device.str().c_str());
    if (const std::string note = device_note(); !note.empty()) std::printf("%s\n", note.c_str());
    std::printf("%s\n", cpu::openblas_core_report().c_str());
    if (!init_dir.empty()) {
      st.init_from = init_dir;
      st.init_step = init_step;
    }
    if (!st.init_from.empty())
      std::printf("initialised from %s%s\n", st.init_from.c_str(), st.init_step.empty() ? "" : (" (step " + st.init_step + ")").c_str());
    if (const nn::LoRAOptions lora = nn::lora_options(*model); lora.rank > 0) {
      int64_t trained = 0;
      for (const auto& [name, p] : trainable) trained += p.numel();
      std::printf("LoRA: rank %lld, alpha %g%s on %zu layers; %s parameters trained (%.2f%% of %s), the rest frozen\n",
                  (long long)lora.rank, lora.alpha, lora.dropout > 0 ? format(", dropout %g", lora.dropout).c_str() : "",
                  lora.targets.size(), format_count(trained).c_str(), 100.0 * double(trained) / double(model->num_parameters()),
                  format_count(model->num_parameters()).c_str());
    }
    if (dist::size() > 1)
      std::printf("data parallel: %d ranks over %s, %lld sequences each; %s bytes of gradients all-reduced a step\n",
                  dist::size(), dist::transport().c_str(), (long long)(s.batch_size / dist::size()),
                  format_count(dist::gradient_bytes(params)).c_str());
    std::printf("data: %s tokens to train on, %s held out; batch %lld x %lld = %s tokens a step\n",
                format_count(int64_t(train.size())).c_str(), format_count(int64_t(valid.size())).c_str(),
                (long long)s.batch_size, (long long)config.block_size,
                format_count(s.batch_size * config.block_size).c_str());
    if (s.grad_accum_steps > 1)
      std::printf("gradient accumulation: %lld micro-batches of %lld sequences a step\n", (long long)s.grad_accum_steps,
                  (long long)micro_batch);
    std::printf("AdamW lr %.3g -> %.3g (warm-up %lld, cosine over %s), betas %.3g %.3g, weight decay %.3g, clip %.3g, seed %llu%s\n",
                s.lr, s.min_lr, (long long)s.warmup_steps,
                s.fit_schedule ? format("the steps --minutes allows, fitted to the clock from %lld", (long long)s.schedule_steps).c_str()
                               : format("%lld steps", (long long)s.schedule_steps).c_str(),
                s.beta1, s.beta2, s.weight_decay, s.grad_clip, (unsigned long long)s.seed,
                config.dropout > 0 ? format(", dropout %.3g", config.dropout).c_str() : "");
    const double budget_s = args.minutes * 60;
    if (args.resume) {
      std::printf("resuming %s at step %lld (%s used)\n", args.out_dir.c_str(), (long long)st.step,
                  format_duration(st.elapsed_s).c_str());
      if (args.steps > 0 && st.step >= args.steps)
        throw AppError("the run is already at step " + std::to_string(st.step) + "; pass a larger --steps to train further");
      if (args.steps == 0 && st.elapsed_s >= budget_s)
        throw AppError("the run already used its " + format_duration(st.elapsed_s) +
                       "; pass a larger --minutes (the run's total) or --steps N to train further");
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
    std::optional<CsvLog> csv;
    if (dist::is_root())
      csv.emplace((fs::path(args.out_dir) / "log.csv").string(),
                  std::vector<std::string>{"step", "train_loss", "val_loss", "lr", "tokens_per_s", "elapsed_s"},
                  args.resume ? st.step : -1);
    const std::string tb_dir = (fs::path(args.out_dir) / "tensorboard").string();
    std::optional<TensorBoardWriter> tb;
    if (dist::is_root()) tb.emplace(tb_dir);
    // Copies the tokenizer beside the checkpoints, so generate and evaluate find it there.
    const std::string tok_json = util::read_file(tok_path);

    auto save = [&](const std::string& dir, bool with_optimizer) {
      if (!dist::is_root()) return;
      st.rng_seed = default_generator().seed;
      st.rng_offset = default_generator().offset;
      gpt::save_checkpoint(dir, *model, {{"step", std::to_string(st.step)}, {"run", run_name}},
                           [&](const std::string& tmp) {
                             util::write_file_atomic((fs::path(tmp) / "tokenizer.json").string(), tok_json);
                             util::write_file_atomic((fs::path(tmp) / "state.json").string(),
                                                     state_json(st, s, run_name).dump(2) + "\n");
                             if (with_optimizer) opt.save((fs::path(tmp) / "optimizer.safetensors").string());
                           });
    };

    for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, on_stop_signal);
    const int64_t first_step = st.step;
    const auto t_session = Clock::now();
    // This session's seconds: the real clock, or the testing aid's where each step takes the same.
    auto session_seconds = [&] {
      return args.debug_step_seconds > 0 ? double(st.step - first_step) * args.debug_step_seconds : seconds_since(t_session);
    };
    const double elapsed_before = st.elapsed_s;
    const bool fitting = s.fit_schedule && args.steps == 0;
    int64_t fit_from_step = -1, printed_fit = -1;  // the rate is measured from the end of start-up
    double fit_from_s = 0;
    const int64_t tokens_per_step = s.batch_size * config.block_size;
    int64_t saved_step = args.resume ? st.step : -1;  // what last/ holds
    int64_t skipped_in_a_row = 0;
    constexpr int64_t kMaxSkippedInARow = 10;  // past this, skipping is hiding a diverged run

    while (true) {
      const auto t0 = Clock::now();
      if (fitting && st.step - first_step == kStepsBeforeFitting) {
        fit_from_step = st.step;
        fit_from_s = session_seconds();
      }
      if (fitting && fit_from_step >= 0 && st.step > fit_from_step) {
        const double measured_s = session_seconds() - fit_from_s;
        int64_t fitted = fitted_decay_steps(st.step, st.elapsed_s, budget_s, st.step - fit_from_step, measured_s, s.warmup_steps);
        dist::broadcast(&fitted, sizeof fitted);  // rank 0's clock decides, as for stopping
        s.schedule_steps = schedule.decay_steps = fitted;
        if (printed_fit < 0 || std::abs(double(fitted - printed_fit)) > 0.05 * double(printed_fit)) {
          std::printf("schedule: %.3g s a step so far; the rate reaches %.3g at step %lld, when --minutes ends\n",
                      measured_s / double(st.step - fit_from_step), s.min_lr, (long long)fitted);
          printed_fit = fitted;
        }
      }
      const double lr = schedule(st.step);
      opt.set_lr(lr);
      gpt::Batch batch = batches.at(st.step);
      if (dist::size() > 1)  // this rank's share of the global batch
        batch = {dist::shard_rows(batch.inputs, dist::rank(), dist::size()),
                 dist::shard_rows(batch.targets, dist::rank(), dist::size())};
      // Gradient accumulation: each micro-batch's mean loss, scaled by 1/N, so the summed gradients
      // are the whole batch's mean (every micro-batch holds as many tokens).
      double local_loss = 0;
      for (int64_t micro = 0; micro < s.grad_accum_steps; ++micro) {
        const int n = int(s.grad_accum_steps);
        Tensor inputs = n > 1 ? dist::shard_rows(batch.inputs, int(micro), n) : batch.inputs;
        Tensor targets = n > 1 ? dist::shard_rows(batch.targets, int(micro), n) : batch.targets;
        Tensor loss = model->loss(ops::to(inputs, device), ops::to(targets, device));
        backward(n > 1 ? mul(loss, 1.0 / double(n)) : loss);
        local_loss += host_scalar(loss) / double(n);
      }
      dist::average_gradients(params);  // the global batch's gradient on every rank, before clipping
      // Steps are named as the progress lines count them: this is step st.step + 1.
      if (st.step + 1 == args.inject_nan_step) {
        poison_gradient(named_params.back().second);
        std::printf("debug: wrote NaN into the gradient of %s at step %lld\n", named_params.back().first.c_str(),
                    (long long)st.step + 1);
      }
      // clip_grad_norm_ leaves the gradients alone when their norm is not finite, so the culprit can
      // still be named; without clipping every gradient is checked.
      const double grad_norm = s.grad_clip > 0 ? nn::clip_grad_norm_(params, s.grad_clip) : NAN;
      const double train_loss = dist::mean_over_ranks(local_loss);  // the global batch's mean
      const std::string bad_grad =
          s.grad_clip > 0 && std::isfinite(grad_norm) ? "" : first_nonfinite_gradient(named_params);
      const bool skipped = !std::isfinite(train_loss) || !bad_grad.empty();
      if (skipped) {
        std::string what = format("step %lld: ", (long long)st.step + 1) +
                           (std::isfinite(train_loss) ? format("the gradient of %s is not finite (loss %.4f)", bad_grad.c_str(), train_loss)
                                                      : format("the loss is %g", train_loss) +
                                                            (bad_grad.empty() ? "" : ", first non-finite gradient " + bad_grad));
        if (!args.skip_nonfinite)
          throw AppError(what + "; stopped without saving (" + what_was_saved(saved_step) + "); " +
                         what_to_do(saved_step, "--resume --skip-nonfinite to skip such steps"));
        if (++skipped_in_a_row > kMaxSkippedInARow)
          throw AppError(what + format("; %lld steps in a row were not finite, stopped (", (long long)skipped_in_a_row) +
                         what_was_saved(saved_step) + "); " + what_to_do(saved_step, ""));
        std::printf("%s; skipped (--skip-nonfinite)\n", what.c_str());
      } else {
        skipped_in_a_row = 0;
        opt.step();
      }
      opt.zero_grad();
      synchronize(device);
      const double step_s = args.debug_step_seconds > 0 ? args.debug_step_seconds : seconds_since(t0);
      st.step += 1;
      st.tokens_seen += tokens_per_step;
      st.elapsed_s = elapsed_before + session_seconds();
      const double tok_s = double(tokens_per_step) / std::max(step_s, 1e-9);

      // Rank 0's clock decides, so that every rank stops at the same step.
      const bool done = dist::from_root((args.steps > 0 ? st.step >= args.steps : st.elapsed_s >= budget_s) || g_signal != 0);
      const bool eval_now = done || st.step % s.eval_interval == 0;

      if (st.step % args.log_interval == 0 || done) {
        const double per_step = (st.elapsed_s - elapsed_before) / double(st.step - first_step);
        const double eta = args.steps > 0 ? per_step * double(args.steps - st.step) : budget_s - st.elapsed_s;
        std::printf("step %5lld%s | loss %.4f | lr %.2e | norm %6.3f | %s tok/s | %s | ETA %s\n", (long long)st.step,
                    args.steps > 0 ? format("/%lld", (long long)args.steps).c_str() : "", train_loss, lr, grad_norm,
                    format_count(int64_t(tok_s)).c_str(), format_duration(st.elapsed_s).c_str(),
                    format_duration(eta).c_str());
        std::fflush(stdout);
      }
      if (tb) tb->add_scalar("loss/train", train_loss, st.step);
      if (tb) tb->add_scalar("lr", lr, st.step);
      if (tb) tb->add_scalar("tokens_per_s", tok_s, st.step);

      double val_loss = NAN;
      if (eval_now) {
        model->eval();
        // As many windows a pass as a training micro-batch holds sequences: what fits in memory.
        EvalResult r = dist::is_root() ? evaluate_windows(*model, valid, s.batch_size / s.grad_accum_steps, s.eval_windows, device, &byte_lengths)
                                       : EvalResult{};
        dist::broadcast(&r.loss, sizeof r.loss);  // the other ranks wait for rank 0's measure
        model->train();
        val_loss = r.loss;
        if (!std::isfinite(val_loss))
          throw AppError(format("step %lld: the held-out loss is %g; stopped without saving (", (long long)st.step, val_loss) +
                         what_was_saved(saved_step) + "); " + what_to_do(saved_step, ""));
        if (tb) tb->add_scalar("loss/val", val_loss, st.step);
        if (tb) tb->add_scalar("bits_per_byte/val", r.bits_per_byte(), st.step);
        const bool improved = val_loss < st.best_val_loss;
        if (improved) {
          st.best_val_loss = val_loss;
          st.best_step = st.step;
          save(best_dir, false);
        }
        save(last_dir, true);
        if (folder) folder->checkpoint_saved();  // a run this one replaces goes now
        saved_step = st.step;
        std::printf("step %5lld | held-out loss %.4f (perplexity %.2f, %.3f bits/byte, top-1 %.1f%%, %s tokens)%s | saved %s%s\n",
                    (long long)st.step, r.loss, r.perplexity(), r.bits_per_byte(), 100 * r.top1, format_count(r.tokens).c_str(),
                    improved ? " best so far" : "", last_dir.c_str(), improved ? (" and " + best_dir).c_str() : "");
        std::fflush(stdout);
      }
      if (tb) tb->flush();
      if (csv) csv->row({std::to_string(st.step), csv_number(train_loss), csv_number(val_loss), csv_number(lr, "%.6e"),
               csv_number(tok_s, "%.1f"), csv_number(st.elapsed_s, "%.3f")});
      if (done) break;
    }

    const double session_s = st.elapsed_s - elapsed_before;
    std::printf("done: step %lld, %s tokens in %s (%s tok/s this session), best held-out loss %.4f at step %lld\n",
                (long long)st.step, format_count(st.tokens_seen).c_str(), format_duration(st.elapsed_s).c_str(),
                format_count(int64_t(double((st.step - first_step) * tokens_per_step) / std::max(session_s, 1e-9))).c_str(),
                st.best_val_loss, (long long)st.best_step);
    std::printf("checkpoints: %s, %s; log: %s; TensorBoard: tensorboard --logdir %s\n", last_dir.c_str(), best_dir.c_str(),
                (csv ? csv->path() : std::string()).c_str(), tb_dir.c_str());
    if (const int sig = g_signal) {
      std::printf("stopped by %s: continue with the same command and --resume: %s\n",
                  sig == SIGINT ? "Ctrl-C (SIGINT)" : sig == SIGTERM ? "SIGTERM" : "SIGHUP", resume_command(argc, argv).c_str());
      return 128 + sig;
    }
    return 0;
  }));
}
