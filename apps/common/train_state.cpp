#include "apps/common/train_state.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include <mvgpt/util/atomic_file.h>

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
  REQUIRED(beta1) REQUIRED(beta2) OPTIONAL(grad_accum_steps, int64_t(1)) OPTIONAL(fit_schedule, false)           \
  OPTIONAL(optimizer, std::string("adamw")) OPTIONAL(muon_lr, 0.02) OPTIONAL(schedule, std::string("cosine"))      \
  OPTIONAL(decay_fraction, 0.4) OPTIONAL(muon_ns_steps, int64_t(5))                                             \
  OPTIONAL(muon_coefficients, std::string("jordan")) OPTIONAL(embedding_lr, 0.0)

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

std::string settings_json(const PretrainSettings& s) { return json(s).dump(); }

std::string state_file_text(const TrainState& st, const PretrainSettings& s, const std::string& run) {
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
  return j.dump(2) + "\n";
}


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

}  // namespace mvgpt::apps
