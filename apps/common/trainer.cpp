#include "apps/common/trainer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "apps/common/numerics.h"
#include "apps/common/schedule_fit.h"
#include <mvgpt/autograd/engine.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/dist/data_parallel.h>
#include <mvgpt/dist/world.h>
#include <mvgpt/nn/checkpoint.h>
#include <mvgpt/tensor/generator.h>
#include <mvgpt/util/atomic_file.h>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace mvgpt::apps {

// The settings that define a run, as state.json keeps them (--resume reads them back), each set by
// the flag of its name ("--batch-size"). REQUIRED: every state.json has the key (a missing one is an
// error); OPTIONAL: added since runs were first saved, with the value older runs had. fit_schedule
// has no flag of its own (--minutes without --schedule-steps sets it), so no flag is compared for it.
// The order is the order in which differing flags are reported.
#define MVGPT_PRETRAIN_SETTINGS(REQUIRED, OPTIONAL)                                                                 \
  REQUIRED(batch_size) REQUIRED(lr) REQUIRED(min_lr) REQUIRED(warmup_steps) REQUIRED(schedule_steps)               \
  REQUIRED(weight_decay) REQUIRED(grad_clip) REQUIRED(seed) REQUIRED(eval_interval) REQUIRED(eval_windows)         \
  REQUIRED(beta1) REQUIRED(beta2) OPTIONAL(grad_accum_steps, int64_t(1)) OPTIONAL(fit_schedule, false)

void to_json(json& j, const PretrainSettings& s) {
#define MVGPT_PUT(field, ...) j[#field] = s.field;
  MVGPT_PRETRAIN_SETTINGS(MVGPT_PUT, MVGPT_PUT)
#undef MVGPT_PUT
}
void from_json(const json& j, PretrainSettings& s) {
#define MVGPT_GET(field) j.at(#field).get_to(s.field);
#define MVGPT_GET_OR(field, old_value) s.field = j.value(#field, old_value);
  MVGPT_PRETRAIN_SETTINGS(MVGPT_GET, MVGPT_GET_OR)
#undef MVGPT_GET
#undef MVGPT_GET_OR
}

void check_resume_flags(const GivenFlags& given, const PretrainSettings& flags, const PretrainSettings& saved) {
  auto same = [&](std::string field, bool equal) {
    std::replace(field.begin(), field.end(), '_', '-');
    const std::string flag = "--" + field;
    if (given.has(flag) && !equal)
      throw UsageError(flag + " differs from the resumed run's (" + json(saved).dump() +
                       "); leave it out to keep the run's settings");
  };
#define MVGPT_SAME(field, ...) same(#field, flags.field == saved.field);
  MVGPT_PRETRAIN_SETTINGS(MVGPT_SAME, MVGPT_SAME)
#undef MVGPT_SAME
}
#undef MVGPT_PRETRAIN_SETTINGS

namespace {

json state_json(const TrainState& st, const PretrainSettings& s, const std::string& run) {
  json j = {{"run", run},
            {"step", st.step},
            {"elapsed_s", st.elapsed_s},
            {"tokens_seen", st.tokens_seen},
            {"best_step", st.best_step},
            {"rng", {{"seed", st.rng_seed}, {"offset", st.rng_offset}}},
            {"settings", json(s)}};
  j["best_val_loss"] = std::isfinite(st.best_val_loss) ? json(st.best_val_loss) : json(nullptr);
  if (!st.init_from.empty()) j["init_from"] = {{"checkpoint", st.init_from}, {"step", st.init_step}};
  j["until"] = st.until_steps > 0 ? json{{"steps", st.until_steps}} : json{{"minutes", st.until_minutes}};
  return j;
}

// Ctrl-C (SIGINT), and SIGTERM and SIGHUP (what kill, timeout, systemd and batch schedulers send):
// finish the step, save, exit 128 + the signal. A second one stops at once.
std::atomic<int> g_signal{0};
extern "C" void on_stop_signal(int sig) {
  g_signal = sig;
  std::signal(sig, SIG_DFL);
}

std::string csv_number(double v, const char* fmt = "%.6g") { return std::isfinite(v) ? format(fmt, v) : ""; }

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

// One "| key | value |" row per field of a JSON object, nested objects flattened ("model.n_layer").
void markdown_rows(const json& j, const std::string& prefix, std::string& out) {
  for (const auto& [key, value] : j.items()) {
    if (value.is_object()) markdown_rows(value, prefix + key + ".", out);
    else out += "| " + prefix + key + " | " + (value.is_string() ? value.get<std::string>() : value.dump()) + " |\n";
  }
}

// What trains: every parameter, or with LoRA the adapters alone (the base is frozen: no gradient,
// no optimizer state).
nn::NamedTensors trainable_parameters(nn::Module& model) {
  nn::NamedTensors trainable;
  for (auto& [name, p] : model.named_parameters())
    if (p.requires_grad()) trainable.emplace_back(name, p);
  return trainable;
}

std::vector<Tensor> tensors_of(const nn::NamedTensors& named) {
  std::vector<Tensor> tensors;
  for (const auto& [name, p] : named) tensors.push_back(p);
  return tensors;
}

}  // namespace

TrainState read_state(const std::string& path, PretrainSettings& settings) {
  TrainState st;
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
    if (j.contains("until")) {  // since runs said where they end
      const json& until = j.at("until");
      if (until.contains("steps")) st.until_steps = until.at("steps").get<int64_t>();
      else st.until_minutes = until.at("minutes").get<double>();
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
  else if (st.until_steps < 0) bad = format("until.steps is %lld", (long long)st.until_steps);
  else if (!std::isfinite(st.until_minutes) || st.until_minutes < 0) bad = format("until.minutes is %g", st.until_minutes);
  if (!bad.empty()) throw AppError(path + ": " + bad + "; the file was edited or damaged: start over with --overwrite");
  return st;
}

Trainer::Trainer(nn::CausalLM& model, const PretrainSettings& settings, const TrainState& state,
                 const gpt::RandomBatches& batches, const text::TokenFile& valid, std::vector<int32_t> byte_lengths,
                 TrainerOptions options)
    : model_(model),
      s_(settings),
      st_(state),
      batches_(batches),
      valid_(valid),
      byte_lengths_(std::move(byte_lengths)),
      opts_(std::move(options)),
      last_dir_((fs::path(opts_.out_dir) / "last").string()),
      best_dir_((fs::path(opts_.out_dir) / "best").string()),
      trainable_(trainable_parameters(model)),
      params_(tensors_of(trainable_)),
      opt_(nn::weight_decay_groups(trainable_, s_.weight_decay),
           {.lr = s_.lr, .beta1 = s_.beta1, .beta2 = s_.beta2, .eps = 1e-8, .weight_decay = s_.weight_decay}),
      schedule_{s_.lr, s_.min_lr, s_.warmup_steps, s_.schedule_steps},
      tokens_per_step_(s_.batch_size * batches.block_size()) {
  st_.until_steps = opts_.steps;  // saved with each checkpoint: a --resume without flags ends there too
  st_.until_minutes = opts_.steps > 0 ? 0 : opts_.minutes;
  manual_seed(s_.seed);                          // dropout's stream
  dist::shard_generator(default_generator());    // rank r draws its rows' share of each mask
  dist::broadcast_tensors(model_.parameters());  // rank 0's weights everywhere (built from the seed or loaded, they agree already)
  begin_session();
}

void Trainer::resume() {
  default_generator().offset = st_.rng_offset;
  opt_.load((fs::path(last_dir_) / "optimizer.safetensors").string());
  resumed_ = true;
  saved_step_ = st_.step;
}

// The run's settings for TensorBoard's Text tab: the model, the optimizer and schedule, the data.
std::string Trainer::settings_markdown() const {
  json j = {{"run", opts_.run_name},
            {"device", opts_.device.str()},
            {"tokens_per_step", tokens_per_step_},
            {"parameters", model_.num_parameters()},
            {"trainable_parameters", [&] {
               int64_t n = 0;
               for (const auto& p : params_) n += p.numel();
               return n;
             }()},
            {"settings", json(s_)},
            {"model", json::parse(model_.config_json())}};
  if (!st_.init_from.empty()) j["init_from"] = st_.init_from;
  std::string out = "| setting | value |\n| --- | --- |\n";
  markdown_rows(j, "", out);
  return out;
}

void Trainer::begin_session() {
  t_session_ = Clock::now();
  first_step_ = st_.step;
  elapsed_before_ = st_.elapsed_s;
  fit_from_step_ = printed_fit_ = -1;
  fit_from_s_ = 0;
}

// This session's seconds: the real clock, or the testing aid's where each step takes the same.
double Trainer::session_seconds() const {
  return opts_.debug_step_seconds > 0 ? double(st_.step - first_step_) * opts_.debug_step_seconds
                                      : seconds_since(t_session_);
}

// With --minutes (and no --schedule-steps), the schedule's end follows this session's measured
// step time (apps/common/schedule_fit.h).
void Trainer::fit_schedule() {
  if (!s_.fit_schedule || opts_.steps != 0) return;
  if (st_.step - first_step_ == kStepsBeforeFitting) {
    fit_from_step_ = st_.step;
    fit_from_s_ = session_seconds();
  }
  if (fit_from_step_ < 0 || st_.step <= fit_from_step_) return;
  const double measured_s = session_seconds() - fit_from_s_;
  int64_t fitted = fitted_decay_steps(st_.step, st_.elapsed_s, opts_.minutes * 60, st_.step - fit_from_step_, measured_s,
                                      s_.warmup_steps);
  dist::broadcast(&fitted, sizeof fitted);  // rank 0's clock decides, as for stopping
  s_.schedule_steps = schedule_.decay_steps = fitted;
  if (printed_fit_ < 0 || std::abs(double(fitted - printed_fit_)) > 0.05 * double(printed_fit_)) {
    std::printf("schedule: %.3g s a step so far; the rate reaches %.3g at step %lld, when --minutes ends\n",
                measured_s / double(st_.step - fit_from_step_), s_.min_lr, (long long)fitted);
    printed_fit_ = fitted;
  }
}

Trainer::StepResult Trainer::step() {
  const auto t0 = Clock::now();
  fit_schedule();
  StepResult result;
  result.lr = schedule_(st_.step);
  opt_.set_lr(result.lr);
  gpt::Batch batch = batches_.at(st_.step);
  if (dist::size() > 1)  // this rank's share of the global batch
    batch = {dist::shard_rows(batch.inputs, dist::rank(), dist::size()),
             dist::shard_rows(batch.targets, dist::rank(), dist::size())};
  // Gradient accumulation: each micro-batch's mean loss, scaled by 1/N, so the summed gradients
  // are the whole batch's mean (every micro-batch holds as many tokens).
  double local_loss = 0;
  for (int64_t micro = 0; micro < s_.grad_accum_steps; ++micro) {
    const int n = int(s_.grad_accum_steps);
    Tensor inputs = n > 1 ? dist::shard_rows(batch.inputs, int(micro), n) : batch.inputs;
    Tensor targets = n > 1 ? dist::shard_rows(batch.targets, int(micro), n) : batch.targets;
    Tensor loss = model_.loss(to(inputs, opts_.device), to(targets, opts_.device));
    backward(n > 1 ? mul(loss, 1.0 / double(n)) : loss);
    local_loss += host_scalar(loss) / double(n);
  }
  dist::average_gradients(params_);  // the global batch's gradient on every rank, before clipping
  // Steps are named as the progress lines count them: this is step st_.step + 1.
  if (st_.step + 1 == opts_.inject_nan_step) {
    poison_gradient(trainable_.back().second);
    std::printf("debug: wrote NaN into the gradient of %s at step %lld\n", trainable_.back().first.c_str(),
                (long long)st_.step + 1);
  }
  // clip_grad_norm_ leaves the gradients alone when their norm is not finite, so the culprit can
  // still be named; without clipping every gradient is checked.
  result.grad_norm = s_.grad_clip > 0 ? nn::clip_grad_norm_(params_, s_.grad_clip) : NAN;
  result.loss = dist::mean_over_ranks(local_loss);  // the global batch's mean
  const std::string bad_grad =
      s_.grad_clip > 0 && std::isfinite(result.grad_norm) ? "" : first_nonfinite_gradient(trainable_);
  if (!std::isfinite(result.loss) || !bad_grad.empty()) {
    std::string what = format("step %lld: ", (long long)st_.step + 1) +
                       (std::isfinite(result.loss) ? format("the gradient of %s is not finite (loss %.4f)", bad_grad.c_str(), result.loss)
                                                   : format("the loss is %g", result.loss) +
                                                         (bad_grad.empty() ? "" : ", first non-finite gradient " + bad_grad));
    if (!opts_.skip_nonfinite)
      throw AppError(what + "; stopped without saving (" + what_was_saved(saved_step_) + "); " +
                     what_to_do(saved_step_, "--resume --skip-nonfinite to skip such steps"));
    constexpr int64_t kMaxSkippedInARow = 10;  // past this, skipping is hiding a diverged run
    if (++skipped_in_a_row_ > kMaxSkippedInARow)
      throw AppError(what + format("; %lld steps in a row were not finite, stopped (", (long long)skipped_in_a_row_) +
                     what_was_saved(saved_step_) + "); " + what_to_do(saved_step_, ""));
    std::printf("%s; skipped (--skip-nonfinite)\n", what.c_str());
  } else {
    skipped_in_a_row_ = 0;
    opt_.step();
  }
  opt_.zero_grad();
  synchronize(opts_.device);
  result.seconds = opts_.debug_step_seconds > 0 ? opts_.debug_step_seconds : seconds_since(t0);
  st_.step += 1;
  st_.tokens_seen += tokens_per_step_;
  st_.elapsed_s = elapsed_before_ + session_seconds();
  return result;
}

EvalResult Trainer::evaluate() {
  model_.eval();
  // As many windows a pass as a training micro-batch holds sequences: what fits in memory.
  EvalResult r = dist::is_root() ? evaluate_windows(model_, valid_, s_.batch_size / s_.grad_accum_steps, s_.eval_windows,
                                                    opts_.device, &byte_lengths_)
                                 : EvalResult{};
  dist::broadcast(&r.loss, sizeof r.loss);  // the other ranks wait for rank 0's measure
  model_.train();
  return r;
}

void Trainer::save(const std::string& dir, bool with_optimizer) {
  if (!dist::is_root()) return;
  st_.rng_seed = default_generator().seed;
  st_.rng_offset = default_generator().offset;
  nn::save_module_checkpoint(dir, model_, model_.config_json(), {{"step", std::to_string(st_.step)}, {"run", opts_.run_name}},
                       [&](const std::string& tmp) {
                         if (!opts_.tokenizer_json.empty())
                           util::write_file_atomic((fs::path(tmp) / "tokenizer.json").string(), opts_.tokenizer_json);
                         util::write_file_atomic((fs::path(tmp) / "state.json").string(),
                                                 state_json(st_, s_, opts_.run_name).dump(2) + "\n");
                         if (with_optimizer) opt_.save((fs::path(tmp) / "optimizer.safetensors").string());
                       });
}

// A finite held-out loss is logged and saved: last/ always, best/ when it improved.
void Trainer::record_evaluation(const EvalResult& r, RunFolder* folder) {
  if (!std::isfinite(r.loss))
    throw AppError(format("step %lld: the held-out loss is %g; stopped without saving (", (long long)st_.step, r.loss) +
                   what_was_saved(saved_step_) + "); " + what_to_do(saved_step_, ""));
  if (tb_) {
    tb_->add_scalar("loss/val", r.loss, st_.step);
    tb_->add_scalar("perplexity/val", r.perplexity(), st_.step);
    tb_->add_scalar("top1/val", r.top1, st_.step);
    if (r.bytes > 0) tb_->add_scalar("bits_per_byte/val", r.bits_per_byte(), st_.step);  // none without a tokenizer
  }
  const bool improved = r.loss < st_.best_val_loss;
  if (improved) {
    st_.best_val_loss = r.loss;
    st_.best_step = st_.step;
    save(best_dir_, false);
  }
  save(last_dir_, true);
  if (folder) folder->checkpoint_saved();  // a run this one replaces goes now
  saved_step_ = st_.step;
  if (st_.step == opts_.kill_after_save_step) ::raise(SIGKILL);  // the worst moment for what follows a save
  const std::string bpb = r.bytes > 0 ? format(", %.3f bits/byte", r.bits_per_byte()) : "";
  std::printf("step %5lld | held-out loss %.4f (perplexity %.2f%s, top-1 %.1f%%, %s tokens)%s | saved %s%s\n",
              (long long)st_.step, r.loss, r.perplexity(), bpb.c_str(), 100 * r.top1, format_count(r.tokens).c_str(),
              improved ? " best so far" : "", last_dir_.c_str(), improved ? (" and " + best_dir_).c_str() : "");
  std::fflush(stdout);
}

int Trainer::run(RunFolder* folder) {
  if (dist::is_root())
    csv_.emplace((fs::path(opts_.out_dir) / "log.csv").string(),
                 std::vector<std::string>{"step", "train_loss", "val_loss", "lr", "tokens_per_s", "elapsed_s"},
                 resumed_ ? st_.step : -1);
  const std::string tb_dir = (fs::path(opts_.out_dir) / "tensorboard").string();
  if (dist::is_root()) {
    tb_.emplace(tb_dir);
    tb_->add_text("settings", settings_markdown(), st_.step);
  }

  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, on_stop_signal);
  begin_session();
  const double budget_s = opts_.minutes * 60;
  while (true) {
    const StepResult r = step();
    const double tok_s = double(tokens_per_step_) / std::max(r.seconds, 1e-9);

    // Rank 0's clock decides, so that every rank stops at the same step.
    const bool done =
        dist::from_root((opts_.steps > 0 ? st_.step >= opts_.steps : st_.elapsed_s >= budget_s) || g_signal != 0);
    const bool eval_now = done || st_.step % s_.eval_interval == 0;

    if (st_.step % opts_.log_interval == 0 || done) {
      const double per_step = (st_.elapsed_s - elapsed_before_) / double(st_.step - first_step_);
      const double eta = opts_.steps > 0 ? per_step * double(opts_.steps - st_.step) : budget_s - st_.elapsed_s;
      std::printf("step %5lld%s | loss %.4f | lr %.2e | norm %6.3f | %s tok/s | %s | ETA %s\n", (long long)st_.step,
                  opts_.steps > 0 ? format("/%lld", (long long)opts_.steps).c_str() : "", r.loss, r.lr, r.grad_norm,
                  format_count(int64_t(tok_s)).c_str(), format_duration(st_.elapsed_s).c_str(),
                  format_duration(eta).c_str());
      std::fflush(stdout);
    }
    if (tb_) {
      tb_->add_scalar("loss/train", r.loss, st_.step);
      tb_->add_scalar("lr", r.lr, st_.step);
      if (std::isfinite(r.grad_norm)) tb_->add_scalar("grad_norm", r.grad_norm, st_.step);  // NaN: no clipping
      tb_->add_scalar("tokens_per_s", tok_s, st_.step);
    }

    std::optional<EvalResult> eval;
    if (eval_now) eval = evaluate();
    // The step's row before its checkpoint: a kill right after the save must not lose it (resume keeps
    // the rows up to last/'s step and drops later ones, which it logs again).
    if (csv_) csv_->row({std::to_string(st_.step), csv_number(r.loss), csv_number(eval ? eval->loss : NAN),
                         csv_number(r.lr, "%.6e"), csv_number(tok_s, "%.1f"), csv_number(st_.elapsed_s, "%.3f")});
    if (eval) record_evaluation(*eval, folder);
    if (tb_) tb_->flush();
    if (done) break;
  }

  const double session_s = st_.elapsed_s - elapsed_before_;
  std::printf("done: step %lld, %s tokens in %s (%s tok/s this session), best held-out loss %.4f at step %lld\n",
              (long long)st_.step, format_count(st_.tokens_seen).c_str(), format_duration(st_.elapsed_s).c_str(),
              format_count(int64_t(double((st_.step - first_step_) * tokens_per_step_) / std::max(session_s, 1e-9))).c_str(),
              st_.best_val_loss, (long long)st_.best_step);
  std::printf("checkpoints: %s, %s; log: %s; TensorBoard: tensorboard --logdir %s\n", last_dir_.c_str(), best_dir_.c_str(),
              (csv_ ? csv_->path() : std::string()).c_str(), tb_dir.c_str());
  return g_signal;
}

}  // namespace mvgpt::apps
