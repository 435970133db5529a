#pragma once
// What a training run shows and logs, as listeners of the Trainer (apps/common/trainer.h): the
// progress lines on stdout, log.csv (one row a step) and TensorBoard's event file, each on its own.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/common/csv_log.h"
#include "apps/common/tensorboard.h"
#include "apps/common/trainer.h"

namespace mvgpt::apps {

// "step   10/40 | loss 3.2141 | lr 3.00e-03 | norm  0.888 | 239,776 tok/s | 0:00 | ETA 0:00" every
// log_interval steps and at the end, a line for each evaluation and its checkpoints, and a summary.
class ProgressLines : public TrainerListener {
 public:
  void on_step(const Trainer& t, const StepReport& r) override;
  void on_saved(const Trainer& t, const StepReport& r, bool improved) override;
  void on_end(const Trainer& t) override;
};

// <out_dir>/log.csv: step, train_loss, val_loss, lr, tokens_per_s, elapsed_s. A resumed run keeps the
// rows up to its step and drops the later ones (which it logs again).
class CsvListener : public TrainerListener {
 public:
  void on_start(const Trainer& t) override;
  void on_step(const Trainer& t, const StepReport& r) override;

 private:
  std::optional<CsvLog> csv_;
};

// <out_dir>/tensorboard/: the settings (Text tab) and the scalars of each step and evaluation.
class TensorBoardListener : public TrainerListener {
 public:
  void on_start(const Trainer& t) override;
  void on_step(const Trainer& t, const StepReport& r) override;

 private:
  std::optional<TensorBoardWriter> tb_;
};

// The run's settings as a Markdown table (TensorBoard's Text tab): the model, the optimizer and
// schedule, the data.
std::string settings_markdown(const Trainer& t);

// The progress lines on every rank; log.csv and TensorBoard on rank 0, which alone writes files.
std::vector<std::shared_ptr<TrainerListener>> standard_listeners();

}  // namespace mvgpt::apps
