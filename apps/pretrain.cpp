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
// <out>/log.csv; TensorBoard events in runs/<out's name>/.
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
#include "apps/common/evaluation.h"
#include "apps/common/numerics.h"
#include "apps/common/resources.h"
#include "apps/common/tensorboard.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "backends/cpu/openblas_core.h"
#include "dist/data_parallel.h"
#include "dist/world.h"
#include "mvgpt/batches.h"
#include "mvgpt/checkpoint.h"
#include "mvgpt/model.h"
#include "nn/lr_schedule.h"
#include "nn/optim.h"
#include "tensor/generator.h"
#include "util/atomic_file.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace mvgpt::apps {
// The settings that define a run, as state.json keeps them (--resume reads them back; a missing
// key is an error).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(PretrainSettings, batch_size, lr, min_lr, warmup_steps, schedule_steps,
                                   weight_decay, grad_clip, beta1, beta2, seed, eval_interval, eval_windows)
}  // namespace mvgpt::apps
using namespace mvgpt;
using namespace mvgpt::apps;

namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) {
  g_interrupted = true;
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C stops at once
}


// Where a run stands: state.json in last/.
struct State {
  int64_t step = 0;  // steps done
  double elapsed_s = 0;
  int64_t tokens_seen = 0;
  double best_val_loss = INFINITY;
  int64_t best_step = -1;
  uint64_t rng_seed = 0, rng_offset = 0;
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
  } catch (const json::exception& e) {
    throw AppError(path + ": not a pretrain state file (" + e.what() + "); start a new run with --overwrite");
  }
  return st;
}

std::string csv_number(double v, const char* fmt = "%.6g") { return std::isfinite(v) ? format(fmt, v) : ""; }

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

    // --- the run: new, or resumed from last/ ---
    State st;
    gpt::GPTConfig config;
    std::shared_ptr<gpt::GPT> model;
    if (args.resume) {
      if (!fs::exists(state_path))
        throw AppError("nothing to resume: " + state_path + " does not exist; start the run without --resume");
      PretrainSettings saved;
      st = read_state(state_path, saved);
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
      s = saved;
      if (!same_tokenizer(tok_path, (fs::path(last_dir) / "tokenizer.json").string()))
        throw AppError(tok_path + " is not the tokenizer this run was trained with (" + last_dir +
                       "/tokenizer.json); re-run prepare with --tokenizer " + last_dir + "/tokenizer.json, or start over with --overwrite");
      model = load_model(last_dir, device).model;
      config = model->config();
      if (args.rope != config.rope && args.given.has("--rope"))
        throw UsageError(std::string("--rope: the resumed run has ") + (config.rope ? "rotary" : "learned") + " positions");
    } else {
      if (fs::exists(state_path) && !args.overwrite)
        throw AppError(args.out_dir + " already holds a run (at step " + std::to_string(read_state(state_path, s).step) +
                       "); continue it with --resume, start over with --overwrite, or choose another --out");
      config = args.config_path.empty() ? gpt::GPTConfig::preset(args.preset)
                                   : gpt::GPTConfig::from_json(util::read_file(args.config_path), args.config_path);
      if (args.rope) config.rope = true;
    }
    complete_schedule(s, args.steps);  // done while parsing for a new run; a resumed one checks its state.json

    if (s.batch_size % dist::size() != 0)
      throw UsageError(format("--batch-size %lld does not split over %d ranks; use a multiple of %d",
                              (long long)s.batch_size, dist::size(), dist::size()));

    // --- data and tokenizer ---
    text::Tokenizer tok = text::Tokenizer::load(tok_path);
    if (!args.resume && args.config_path.empty()) config.vocab_size = int64_t(tok.vocab_size());  // presets follow the tokenizer
    check_tokenizer_fits(tok, tok_path, config, run_name);
    config.validate();
    check_training_fits(config, s.batch_size, device);  // before anything big is allocated
    text::TokenFile train(train_path), valid(valid_path);
    check_tokens_fit(train, config, run_name);
    check_tokens_fit(valid, config, run_name);
    if (int64_t(valid.size()) < config.block_size + 1)
      throw AppError(valid_path + ": " + std::to_string(valid.size()) + " tokens, too few for one held-out window of " +
                     std::to_string(config.block_size + 1) + "; prepare more held-out text");
    gpt::RandomBatches batches(train, s.batch_size, config.block_size, s.seed);

    if (!model) {
      Generator init_gen(s.seed);
      model = std::make_shared<gpt::GPT>(config, &init_gen);
      model->to(device);
    }
    manual_seed(s.seed);  // dropout's stream
    dist::shard_generator(default_generator());  // rank r draws its rows' share of each mask
    if (args.resume) default_generator().offset = st.rng_offset;
    model->train();  // a loaded checkpoint comes in eval mode; dropout (when configured) must apply

    auto groups = nn::weight_decay_groups(model->named_parameters(), s.weight_decay);
    nn::AdamW opt(groups, {.lr = s.lr, .beta1 = s.beta1, .beta2 = s.beta2, .eps = 1e-8, .weight_decay = s.weight_decay});
    if (args.resume) opt.load((fs::path(last_dir) / "optimizer.safetensors").string());
    const nn::WarmupCosineSchedule schedule{s.lr, s.min_lr, s.warmup_steps, s.schedule_steps};
    const std::vector<Tensor> params = model->parameters();
    dist::broadcast_tensors(params);  // rank 0's weights everywhere (built from the seed or loaded, they agree already)
    const nn::NamedTensors named_params = model->named_parameters();

    std::printf("%s: %s parameters (%s positions, %lld layers, %lld heads, width %lld, context %lld, vocabulary %lld) on %s\n",
                run_name.c_str(), format_count(model->num_parameters()).c_str(), config.rope ? "rotary" : "learned",
                (long long)config.n_layer, (long long)config.n_head, (long long)config.n_embd,
                (long long)config.block_size, (long long)config.vocab_size, device.str().c_str());
    if (const std::string note = device_note(); !note.empty()) std::printf("%s\n", note.c_str());
    std::printf("%s\n", cpu::openblas_core_report().c_str());
    if (dist::size() > 1)
      std::printf("data parallel: %d ranks over %s, %lld sequences each; %s bytes of gradients all-reduced a step\n",
                  dist::size(), dist::transport().c_str(), (long long)(s.batch_size / dist::size()),
                  format_count(dist::gradient_bytes(params)).c_str());
    std::printf("data: %s tokens to train on, %s held out; batch %lld x %lld = %s tokens a step\n",
                format_count(int64_t(train.size())).c_str(), format_count(int64_t(valid.size())).c_str(),
                (long long)s.batch_size, (long long)config.block_size,
                format_count(s.batch_size * config.block_size).c_str());
    std::printf("AdamW lr %.3g -> %.3g (warm-up %lld, cosine over %lld steps), weight decay %.3g, clip %.3g, seed %llu\n",
                s.lr, s.min_lr, (long long)s.warmup_steps, (long long)s.schedule_steps, s.weight_decay, s.grad_clip,
                (unsigned long long)s.seed);
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

    fs::create_directories(args.out_dir);
    // A run killed while saving left its temporary folder (a whole checkpoint) behind.
    if (const int n = remove_stale_checkpoint_temps(args.out_dir))
      std::printf("removed %d unfinished checkpoint folder%s of a killed run\n", n, n == 1 ? "" : "s");
    std::optional<CsvLog> csv;  // rank 0 alone writes files
    if (dist::is_root())
      csv.emplace((fs::path(args.out_dir) / "log.csv").string(),
                  std::vector<std::string>{"step", "train_loss", "val_loss", "lr", "tokens_per_s", "elapsed_s"},
                  args.resume ? st.step : -1);
    if (!args.resume && dist::is_root()) {
      // A fresh run: drop the previous run's TensorBoard events and checkpoints.
      fs::remove_all(fs::path(args.runs_dir) / run_name);
      fs::remove_all(best_dir);
      fs::remove_all(last_dir);
    }
    std::optional<TensorBoardWriter> tb;
    if (dist::is_root()) tb.emplace((fs::path(args.runs_dir) / run_name).string());
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

    std::signal(SIGINT, on_sigint);
    const auto t_session = Clock::now();
    const double elapsed_before = st.elapsed_s;
    const int64_t first_step = st.step;
    const int64_t tokens_per_step = s.batch_size * config.block_size;
    int64_t saved_step = args.resume ? st.step : -1;  // what last/ holds
    int64_t skipped_in_a_row = 0;
    constexpr int64_t kMaxSkippedInARow = 10;  // past this, skipping is hiding a diverged run

    while (true) {
      const auto t0 = Clock::now();
      const double lr = schedule(st.step);
      opt.set_lr(lr);
      gpt::Batch batch = batches.at(st.step);
      if (dist::size() > 1)  // this rank's share of the global batch
        batch = {dist::shard_rows(batch.inputs, dist::rank(), dist::size()),
                 dist::shard_rows(batch.targets, dist::rank(), dist::size())};
      Tensor loss = model->loss(ops::to(batch.inputs, device), ops::to(batch.targets, device));
      backward(loss);
      dist::average_gradients(params);  // the global batch's gradient on every rank, before clipping
      if (st.step == args.inject_nan_step) {
        poison_gradient(named_params.back().second);
        std::printf("debug: wrote NaN into the gradient of %s at step %lld\n", named_params.back().first.c_str(),
                    (long long)st.step);
      }
      // clip_grad_norm_ leaves the gradients alone when their norm is not finite, so the culprit can
      // still be named; without clipping every gradient is checked.
      const double grad_norm = s.grad_clip > 0 ? nn::clip_grad_norm_(params, s.grad_clip) : NAN;
      const double train_loss = dist::mean_over_ranks(host_scalar(loss));  // the global batch's mean
      const std::string bad_grad =
          s.grad_clip > 0 && std::isfinite(grad_norm) ? "" : first_nonfinite_gradient(named_params);
      const bool skipped = !std::isfinite(train_loss) || !bad_grad.empty();
      if (skipped) {
        std::string what = format("step %lld: ", (long long)st.step) +
                           (std::isfinite(train_loss) ? format("the gradient of %s is not finite (loss %.4f)", bad_grad.c_str(), train_loss)
                                                      : format("the loss is %g", train_loss) +
                                                            (bad_grad.empty() ? "" : ", first non-finite gradient " + bad_grad));
        const std::string saved = saved_step < 0 ? "no checkpoint saved yet" : format("last/ holds step %lld", (long long)saved_step);
        if (!args.skip_nonfinite)
          throw AppError(what + "; stopped without saving (" + saved + "); lower --lr or --grad-clip and --resume, "
                         "or pass --skip-nonfinite to skip such steps");
        if (++skipped_in_a_row > kMaxSkippedInARow)
          throw AppError(what + format("; %lld steps in a row were not finite, stopped (", (long long)skipped_in_a_row) + saved +
                         "); lower --lr or --grad-clip");
        std::printf("%s; skipped (--skip-nonfinite)\n", what.c_str());
      } else {
        skipped_in_a_row = 0;
        opt.step();
      }
      opt.zero_grad();
      synchronize(device);
      const double step_s = seconds_since(t0);
      st.step += 1;
      st.tokens_seen += tokens_per_step;
      st.elapsed_s = elapsed_before + seconds_since(t_session);
      const double tok_s = double(tokens_per_step) / std::max(step_s, 1e-9);

      // Rank 0's clock decides, so that every rank stops at the same step.
      const bool done = dist::from_root((args.steps > 0 ? st.step >= args.steps : st.elapsed_s >= budget_s) || g_interrupted);
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
        EvalResult r = dist::is_root() ? evaluate_windows(*model, valid, s.batch_size, s.eval_windows, device) : EvalResult{};
        dist::broadcast(&r.loss, sizeof r.loss);  // the other ranks wait for rank 0's measure
        model->train();
        val_loss = r.loss;
        if (!std::isfinite(val_loss))
          throw AppError(format("step %lld: the held-out loss is %g; stopped without saving (", (long long)st.step, val_loss) +
                         (saved_step < 0 ? std::string("no checkpoint saved yet") : format("last/ holds step %lld", (long long)saved_step)) +
                         "); lower --lr or --grad-clip");
        if (tb) tb->add_scalar("loss/val", val_loss, st.step);
        const bool improved = val_loss < st.best_val_loss;
        if (improved) {
          st.best_val_loss = val_loss;
          st.best_step = st.step;
          save(best_dir, false);
        }
        save(last_dir, true);
        saved_step = st.step;
        std::printf("step %5lld | held-out loss %.4f (perplexity %.2f, top-1 %.1f%%, %s tokens)%s | saved %s%s\n",
                    (long long)st.step, r.loss, r.perplexity(), 100 * r.top1, format_count(r.tokens).c_str(),
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
                (csv ? csv->path() : std::string()).c_str(), args.runs_dir.c_str());
    if (g_interrupted) {
      std::printf("interrupted: continue with the same command and --resume\n");
      return 130;
    }
    return 0;
  }));
}
