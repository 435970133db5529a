#pragma once
// Where a training run stands and the settings that define it, as last/state.json keeps them
// (pretrain --resume reads them back).
#include <cmath>
#include <cstdint>
#include <string>

#include "apps/common/app.h"
#include "apps/flags/pretrain.h"

namespace mvgpt::apps {

// Where a run stands: state.json in last/, with the run's settings.
struct TrainState {
  int64_t step = 0;  // steps done
  double elapsed_s = 0;
  int64_t tokens_seen = 0;
  double best_val_loss = INFINITY;
  int64_t best_step = -1;
  uint64_t rng_seed = 0, rng_offset = 0;
  std::string init_from, init_step;  // the checkpoint a fine-tuning run started from ("" for none)
  // Where the run ends: --steps (until_steps > 0), else the minutes it may use in all. A --resume
  // without either continues to the same end; one that has reached it says the run is complete.
  // Both 0 in a state.json from before they were kept.
  int64_t until_steps = 0;
  double until_minutes = 0;
};

// Reads last/state.json: the run's progress, and its settings into `settings`. AppError naming the
// file when it is not a state file or says something no run can have reached.
TrainState read_state(const std::string& path, PretrainSettings& settings);

// --resume: UsageError for the first run-defining flag in `given` whose value (in `flags`) differs
// from the resumed run's `saved` settings.
void check_resume_flags(const GivenFlags& given, const PretrainSettings& flags, const PretrainSettings& saved);

// The settings as a JSON object's text (state.json's "settings").
std::string settings_json(const PretrainSettings& s);
// state.json's text: the state, the settings and the run's name.
std::string state_file_text(const TrainState& st, const PretrainSettings& s, const std::string& run);

}  // namespace mvgpt::apps
