#include "apps/common/trainer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <unordered_set>

#include "apps/common/numerics.h"
#include "apps/common/schedule_fit.h"
#include "apps/common/training_output.h"
#include <mvgpt/autograd/engine.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/dist/data_parallel.h>
#include <mvgpt/dist/world.h>
#include <mvgpt/nn/checkpoint.h>
#include <mvgpt/nn/embedding.h>
#include <mvgpt/nn/muon.h>
#include <mvgpt/tensor/generator.h>
#include <mvgpt/util/atomic_file.h>

namespace fs = std::filesystem;

namespace mvgpt::apps {

namespace {

// Ctrl-C (SIGINT), and SIGTERM and SIGHUP (what kill, timeout, systemd and batch schedulers send):
// finish the step, save, exit 128 + the signal. A second one stops at once.
std::atomic<int> g_signal{0};
extern "C" void on_stop_signal(int sig) {
  g_signal = sig;
  std::signal(sig, SIG_DFL);
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

// What trains: every parameter, or with LoRA the adapters alone (the base is frozen: no gradient,
// no optimizer state).
nn::NamedTensors trainable_parameters(nn::Module& model) {
  nn::NamedTensors trainable;
  for (auto& [name, p] : model.named_parameters())
    if (p.requires_grad()) trainable.emplace_back(name, p);
  return trainable;
}

// AdamW on every trainable parameter (weight decay on the matrices and embeddings), or Muon on the
// hidden matrices (no weight decay: at these run lengths it only slowed them) with AdamW on the rest.
std::unique_ptr<nn::Optimizer> make_optimizer(nn::Module& model, const nn::NamedTensors& trainable,
                                              const PretrainSettings& s) {
  const nn::AdamWOptions adamw{.lr = s.lr, .beta1 = s.beta1, .beta2 = s.beta2, .eps = 1e-8, .weight_decay = s.weight_decay};
  // The embeddings at --embedding-lr: their own groups, at that rate over --lr.
  std::unordered_set<const TensorImpl*> embeddings;
  for (auto& [name, m] : model.named_modules())
    if (auto* e = dynamic_cast<nn::Embedding*>(m)) embeddings.insert(e->weight.impl());
  auto embeddings_at_own_rate = [&](std::vector<nn::ParamGroup> groups) {
    if (s.embedding_lr == 0) return groups;
    return nn::with_lr_scale(std::move(groups), embeddings, s.embedding_lr / s.lr);
  };
  if (s.optimizer != "muon")
    return std::make_unique<nn::AdamW>(embeddings_at_own_rate(nn::weight_decay_groups(trainable, s.weight_decay)), adamw);
  nn::MuonSplit split = nn::muon_split(model, 0.0, s.weight_decay);
  return std::make_unique<nn::Muon>(std::move(split.matrices), embeddings_at_own_rate(std::move(split.others)),
                                    nn::MuonOptions{.lr = s.muon_lr,
                                                    .ns_steps = int(s.muon_ns_steps),
                                                    .coefficients = nn::muon_coefficients_from_string(s.muon_coefficients),
                                                    .adamw = adamw});
}

std::vector<Tensor> tensors_of(const nn::NamedTensors& named) {
  std::vector<Tensor> tensors;
  for (const auto& [name, p] : named) tensors.push_back(p);
  return tensors;
}

}  // namespace


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
      opt_(make_optimizer(model, trainable_, s_)),
      opt_lr_ratio_(s_.optimizer == "muon" ? s_.muon_lr / s_.lr : 1.0),
      schedule_{.max_lr = s_.lr,
                .min_lr = s_.min_lr,
                .warmup_steps = s_.warmup_steps,
                .decay_steps = s_.schedule_steps,
                .shape = s_.schedule == "wsd" ? nn::DecayShape::linear : nn::DecayShape::cosine,
                .decay_fraction = s_.schedule == "wsd" ? s_.decay_fraction : 1.0},
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
  opt_->load((fs::path(last_dir_) / "optimizer.safetensors").string());
  resumed_ = true;
  saved_step_ = st_.step;
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

std::vector<Tensor> Trainer::host_batch(int64_t step) const {
  gpt::Batch batch = batches_.at(step);
  if (dist::size() > 1)  // this rank's share of the global batch
    batch = {dist::shard_rows(batch.inputs, dist::rank(), dist::size()),
             dist::shard_rows(batch.targets, dist::rank(), dist::size())};
  const int n = int(s_.grad_accum_steps);
  std::vector<Tensor> parts;
  for (int micro = 0; micro < n; ++micro) {
    parts.push_back(n > 1 ? dist::shard_rows(batch.inputs, micro, n) : batch.inputs);
    parts.push_back(n > 1 ? dist::shard_rows(batch.targets, micro, n) : batch.targets);
  }
  return parts;
}

std::vector<Tensor> Trainer::step_batch(int64_t step) {
  Backend& device = backend_for(opts_.device);
  if (!prefetched_ || prefetched_step_ != step) {
    prefetched_.reset();
    prefetched_ = device.upload_async(host_batch(step));
  }
  device.wait_upload(*prefetched_);
  std::vector<Tensor> tensors = std::move(prefetched_->tensors);
  prefetched_.reset();  // waited for: dropping its ticket costs nothing
  prefetched_step_ = -1;
  return tensors;
}

void Trainer::prefetch_batch(int64_t step) {
  prefetched_ = backend_for(opts_.device).upload_async(host_batch(step));
  prefetched_step_ = step;
}

Trainer::StepResult Trainer::step() {
  const auto t0 = Clock::now();
  fit_schedule();
  StepResult result;
  result.lr = schedule_(st_.step);
  opt_->set_lr(result.lr * opt_lr_ratio_);
  const std::vector<Tensor> batch = step_batch(st_.step);  // inputs and targets of each micro-batch
  // Gradient accumulation: each micro-batch's mean loss, scaled by 1/N, so the summed gradients
  // are the whole batch's mean (every micro-batch holds as many tokens).
  double local_loss = 0;
  for (int64_t micro = 0; micro < s_.grad_accum_steps; ++micro) {
    const int n = int(s_.grad_accum_steps);
    Tensor loss = model_.loss(batch[size_t(2 * micro)], batch[size_t(2 * micro + 1)]);
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
  // The next step's batch, uploaded without a host wait: the copy starts after the work queued so
  // far and runs beside the optimizer's kernels (Backend::upload_async).
  prefetch_batch(st_.step + 1);
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
    opt_->step();
  }
  opt_->zero_grad();
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
                                                 state_file_text(st_, s_, opts_.run_name));
                         if (with_optimizer) opt_->save((fs::path(tmp) / "optimizer.safetensors").string());
                       });
}

// A finite held-out loss is saved: last/ always, best/ when it improved.
void Trainer::save_evaluated(const StepReport& report, RunFolder* folder) {
  const EvalResult& r = *report.eval;
  if (!std::isfinite(r.loss))
    throw AppError(format("step %lld: the held-out loss is %g; stopped without saving (", (long long)st_.step, r.loss) +
                   what_was_saved(saved_step_) + "); " + what_to_do(saved_step_, ""));
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
  for (const auto& l : listeners_) l->on_saved(*this, report, improved);
}

int Trainer::run(RunFolder* folder) {
  if (listeners_.empty()) listeners_ = standard_listeners();
  for (const auto& l : listeners_) l->on_start(*this);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, on_stop_signal);
  begin_session();
  const double budget_s = opts_.minutes * 60;
  while (true) {
    const StepResult r = step();
    StepReport report{.step = st_.step, .loss = r.loss, .lr = r.lr, .grad_norm = r.grad_norm, .seconds = r.seconds};
    report.tokens_per_s = double(tokens_per_step_) / std::max(r.seconds, 1e-9);
    // Rank 0's clock decides, so that every rank stops at the same step.
    report.done =
        dist::from_root((opts_.steps > 0 ? st_.step >= opts_.steps : st_.elapsed_s >= budget_s) || g_signal != 0);
    const double per_step = (st_.elapsed_s - elapsed_before_) / double(st_.step - first_step_);
    report.eta_s = opts_.steps > 0 ? per_step * double(opts_.steps - st_.step) : budget_s - st_.elapsed_s;
    if (report.done || st_.step % s_.eval_interval == 0) report.eval = evaluate();
    // Told before the checkpoint: a kill right after the save must not lose the step's log row
    // (resume keeps the rows up to last/'s step and drops later ones, which it logs again).
    for (const auto& l : listeners_) l->on_step(*this, report);
    if (report.eval) save_evaluated(report, folder);
    if (report.done) break;
  }
  for (const auto& l : listeners_) l->on_end(*this);
  return g_signal;
}

}  // namespace mvgpt::apps
