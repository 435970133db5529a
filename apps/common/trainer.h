#pragma once
// The training loop of a run folder, for a new run, a resumed one and fine-tuning (pretrain
// --init-from, --lora-rank) alike. Its pieces:
// - step(): one optimizer step of the global batch: the rate from the schedule (fitted to the clock
//   with --minutes), gradient accumulation, the gradients averaged over the ranks, clipping, and the
//   numerical guards (a step whose loss or gradient is not finite stops the run or is skipped);
// - evaluate(): the held-out loss, measured on rank 0 and known on every rank;
// - save(): a checkpoint folder with the tokenizer, state.json and (in last/) the optimizer;
// - resume(): the optimizer and the random stream back from last/ (state.json: read_state);
// - run(): steps until --steps, --minutes or a stop signal, an evaluation and checkpoints (last/,
//   and best/ when the loss improved) every eval_interval steps and at the end, told to listeners:
//   the progress lines, log.csv and TensorBoard are three (apps/common/training_output.h).
// Under mpirun every rank runs it; rank 0 alone writes files (pretrain silences the others' output).
// It trains any nn::CausalLM: the GPT (pretrain), or another model (tests/train trains the Llama of
// examples/llama through it).
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/common/app.h"
#include "apps/flags/pretrain.h"
#include "apps/common/evaluation.h"
#include "apps/common/run_folder.h"
#include "apps/common/train_state.h"
#include <mvgpt/backends/backend.h>
#include <mvgpt/gpt/batches.h>
#include <mvgpt/nn/causal_lm.h>
#include <mvgpt/nn/lr_schedule.h>
#include <mvgpt/nn/optim.h>
#include <mvgpt/nn/muon.h>

namespace mvgpt::apps {

// What the loop needs besides the model, the data and the run's settings.
struct TrainerOptions {
  std::string out_dir;         // the run folder: last/, best/, log.csv, tensorboard/
  std::string run_name;        // in the checkpoints' metadata and state.json
  std::string tokenizer_json;  // the tokenizer file's text, saved beside each checkpoint
  Device device = Device::cpu();
  int64_t steps = 0;        // stop after this step; 0: when the run has used `minutes`
  double minutes = 10;      // the run's total, sessions before this one included
  int64_t log_interval = 1;  // a progress line every this many steps
  bool skip_nonfinite = false;    // skip a step whose loss or gradient is not finite, instead of stopping
  int64_t inject_nan_step = -1;   // testing aid: NaN in a gradient at this step
  int64_t kill_after_save_step = -1;  // testing aid: SIGKILL right after this step's checkpoint
  double debug_step_seconds = 0;  // testing aid: a clock on which each step takes this long
};

class Trainer;

// One step as the listeners see it.
struct StepReport {
  int64_t step = 0;  // the step just done (state().step)
  double loss = 0, lr = 0, grad_norm = NAN, seconds = 0;  // Trainer::StepResult's
  double tokens_per_s = 0;
  double eta_s = 0;   // the time left to the run's end (its steps, or its minutes)
  bool done = false;  // the run's last step
  std::optional<EvalResult> eval = std::nullopt;  // the held-out measure, on the steps that take one
};

// What run() tells, to whoever listens. Every call gets the trainer, for its state and settings.
class TrainerListener {
 public:
  virtual ~TrainerListener() = default;
  virtual void on_start(const Trainer&) {}
  // After each step (and its evaluation), before its checkpoints are saved: what is logged here
  // survives a kill during the save.
  virtual void on_step(const Trainer&, const StepReport&) {}
  // After an evaluated step's checkpoints were saved (best/ too when `improved`).
  virtual void on_saved(const Trainer&, const StepReport&, bool improved) {}
  // After the last step.
  virtual void on_end(const Trainer&) {}
};

class Trainer {
 public:
  // Trains `model`'s parameters that require a gradient (with LoRA, the adapters alone) with AdamW
  // (or Muon and AdamW: settings.optimizer),
  // from `state` (a new run's, or read_state's), on `batches`; evaluates on `valid`, with
  // `byte_lengths` (token_byte_lengths) for bits per byte. Seeds the random stream (dropout's) and
  // gives every rank rank 0's weights. The model, batches and token file must outlive the trainer.
  Trainer(nn::CausalLM& model, const PretrainSettings& settings, const TrainState& state, const gpt::RandomBatches& batches,
          const text::TokenFile& valid, std::vector<int32_t> byte_lengths, TrainerOptions options);

  // Continues the run in last/: the optimizer's state and the random stream's position.
  void resume();

  struct StepResult {
    double loss = 0;   // the global batch's mean (NaN or infinite when the step was skipped for it)
    double lr = 0;
    double grad_norm = NAN;  // before clipping (NaN without clipping)
    double seconds = 0;      // the step's time (the testing clock's with debug_step_seconds)
  };
  // One optimizer step; state().step counts it. AppError when the loss or a gradient is not finite
  // (unless skip_nonfinite, and then after 10 such steps in a row).
  StepResult step();
  // The held-out loss of the current weights on settings().eval_windows windows, measured by rank 0.
  EvalResult evaluate();
  // A checkpoint of the current step in `dir` (rank 0 only): the weights, the tokenizer, state.json,
  // and with `with_optimizer` the optimizer's state.
  void save(const std::string& dir, bool with_optimizer);
  // Trains until the step count or the time runs out or a stop signal (SIGINT, SIGTERM, SIGHUP)
  // comes, telling the listeners (without any: standard_listeners(), the progress lines on every
  // rank, log.csv and TensorBoard on rank 0). `folder` (rank 0's) is told of each checkpoint.
  // Returns the signal that stopped the run, 0 for none.
  int run(RunFolder* folder);
  void add_listener(std::shared_ptr<TrainerListener> listener) { listeners_.push_back(std::move(listener)); }

  const TrainState& state() const { return st_; }
  const PretrainSettings& settings() const { return s_; }
  const nn::NamedTensors& trainable() const { return trainable_; }
  const std::vector<Tensor>& parameters() const { return params_; }
  const std::string& last_dir() const { return last_dir_; }
  const std::string& best_dir() const { return best_dir_; }
  const nn::CausalLM& model() const { return model_; }
  const TrainerOptions& options() const { return opts_; }
  int64_t tokens_per_step() const { return tokens_per_step_; }
  bool resumed() const { return resumed_; }
  // This session (since the trainer was built, or run() began): its first step and its seconds.
  int64_t session_first_step() const { return first_step_; }
  double session_seconds() const;

 private:
  void begin_session();
  void fit_schedule();
  void save_evaluated(const StepReport& report, RunFolder* folder);
  // A step's micro-batches on the host (this rank's share): inputs and targets of each, in turn.
  std::vector<Tensor> host_batch(int64_t step) const;
  // The same on the device: the upload the previous step started when it is this step's, else one
  // made now; ordered before the step's work (Backend::upload_async, wait_upload).
  std::vector<Tensor> step_batch(int64_t step);
  // Starts uploading step's batch while the current step's work still runs on the device.
  void prefetch_batch(int64_t step);

  nn::CausalLM& model_;
  PretrainSettings s_;
  TrainState st_;
  const gpt::RandomBatches& batches_;
  const text::TokenFile& valid_;
  std::vector<int32_t> byte_lengths_;
  TrainerOptions opts_;
  std::string last_dir_, best_dir_;

  nn::NamedTensors trainable_;
  std::vector<Tensor> params_;
  std::unique_ptr<nn::Optimizer> opt_;
  double opt_lr_ratio_;  // the optimizer's rate over the schedule's (AdamW's): muon_lr / lr for Muon
  nn::WarmupDecaySchedule schedule_;
  int64_t tokens_per_step_;
  bool resumed_ = false;
  int64_t saved_step_ = -1;  // the step last/ holds (-1: none yet)
  int64_t skipped_in_a_row_ = 0;
  std::optional<Backend::PendingUpload> prefetched_;  // the next step's batch, on its way
  int64_t prefetched_step_ = -1;

  // This session: since the trainer was built, or since run() began.
  Clock::time_point t_session_;
  int64_t first_step_ = 0;
  double elapsed_before_ = 0;
  int64_t fit_from_step_ = -1, printed_fit_ = -1;  // the rate is measured from the end of start-up
  double fit_from_s_ = 0;

  std::vector<std::shared_ptr<TrainerListener>> listeners_;
};

}  // namespace mvgpt::apps
