#include "apps/common/training_output.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include <mvgpt/dist/world.h>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace mvgpt::apps {

namespace {

std::string csv_number(double v, const char* fmt = "%.6g") { return std::isfinite(v) ? format(fmt, v) : ""; }

// One "| key | value |" row per field of a JSON object, nested objects flattened ("model.n_layer").
void markdown_rows(const json& j, const std::string& prefix, std::string& out) {
  for (const auto& [key, value] : j.items()) {
    if (value.is_object()) markdown_rows(value, prefix + key + ".", out);
    else out += "| " + prefix + key + " | " + (value.is_string() ? value.get<std::string>() : value.dump()) + " |\n";
  }
}

std::string log_path(const Trainer& t) { return (fs::path(t.options().out_dir) / "log.csv").string(); }
std::string tensorboard_dir(const Trainer& t) { return (fs::path(t.options().out_dir) / "tensorboard").string(); }

}  // namespace

void ProgressLines::on_step(const Trainer& t, const StepReport& r) {
  const TrainerOptions& o = t.options();
  if (r.step % o.log_interval != 0 && !r.done) return;
  std::printf("step %5lld%s | loss %.4f | lr %.2e | norm %6.3f | %s tok/s | %s | ETA %s\n", (long long)r.step,
              o.steps > 0 ? format("/%lld", (long long)o.steps).c_str() : "", r.loss, r.lr, r.grad_norm,
              format_count(int64_t(r.tokens_per_s)).c_str(), format_duration(t.state().elapsed_s).c_str(),
              format_duration(r.eta_s).c_str());
  std::fflush(stdout);
}

void ProgressLines::on_saved(const Trainer& t, const StepReport& report, bool improved) {
  const EvalResult& r = *report.eval;
  const std::string bpb = r.bytes > 0 ? format(", %.3f bits/byte", r.bits_per_byte()) : "";  // none without a tokenizer
  std::printf("step %5lld | held-out loss %.4f (perplexity %.2f%s, top-1 %.1f%%, %s tokens)%s | saved %s%s\n",
              (long long)report.step, r.loss, r.perplexity(), bpb.c_str(), 100 * r.top1, format_count(r.tokens).c_str(),
              improved ? " best so far" : "", t.last_dir().c_str(), improved ? (" and " + t.best_dir()).c_str() : "");
  std::fflush(stdout);
}

void ProgressLines::on_end(const Trainer& t) {
  const TrainState& st = t.state();
  const double session_s = t.session_seconds();
  const int64_t session_tokens = (st.step - t.session_first_step()) * t.tokens_per_step();
  std::printf("done: step %lld, %s tokens in %s (%s tok/s this session), best held-out loss %.4f at step %lld\n",
              (long long)st.step, format_count(st.tokens_seen).c_str(), format_duration(st.elapsed_s).c_str(),
              format_count(int64_t(double(session_tokens) / std::max(session_s, 1e-9))).c_str(), st.best_val_loss,
              (long long)st.best_step);
  std::printf("checkpoints: %s, %s; log: %s; TensorBoard: tensorboard --logdir %s\n", t.last_dir().c_str(),
              t.best_dir().c_str(), log_path(t).c_str(), tensorboard_dir(t).c_str());
}

void CsvListener::on_start(const Trainer& t) {
  csv_.emplace(log_path(t),
               std::vector<std::string>{"step", "train_loss", "val_loss", "lr", "tokens_per_s", "elapsed_s"},
               t.resumed() ? t.state().step : -1);
}

void CsvListener::on_step(const Trainer& t, const StepReport& r) {
  csv_->row({std::to_string(r.step), csv_number(r.loss), csv_number(r.eval ? r.eval->loss : NAN),
             csv_number(r.lr, "%.6e"), csv_number(r.tokens_per_s, "%.1f"), csv_number(t.state().elapsed_s, "%.3f")});
}

std::string settings_markdown(const Trainer& t) {
  int64_t trainable = 0;
  for (const auto& p : t.parameters()) trainable += p.numel();
  json j = {{"run", t.options().run_name},
            {"device", t.options().device.str()},
            {"tokens_per_step", t.tokens_per_step()},
            {"parameters", t.model().num_parameters()},
            {"trainable_parameters", trainable},
            {"settings", json::parse(settings_json(t.settings()))},
            {"model", json::parse(t.model().config_json())}};
  if (!t.state().init_from.empty()) j["init_from"] = t.state().init_from;
  std::string out = "| setting | value |\n| --- | --- |\n";
  markdown_rows(j, "", out);
  return out;
}

void TensorBoardListener::on_start(const Trainer& t) {
  tb_.emplace(tensorboard_dir(t));
  tb_->add_text("settings", settings_markdown(t), t.state().step);
}

void TensorBoardListener::on_step(const Trainer&, const StepReport& r) {
  tb_->add_scalar("loss/train", r.loss, r.step);
  tb_->add_scalar("lr", r.lr, r.step);
  if (std::isfinite(r.grad_norm)) tb_->add_scalar("grad_norm", r.grad_norm, r.step);  // NaN: no clipping
  tb_->add_scalar("tokens_per_s", r.tokens_per_s, r.step);
  if (r.eval && std::isfinite(r.eval->loss)) {
    tb_->add_scalar("loss/val", r.eval->loss, r.step);
    tb_->add_scalar("perplexity/val", r.eval->perplexity(), r.step);
    tb_->add_scalar("top1/val", r.eval->top1, r.step);
    if (r.eval->bytes > 0) tb_->add_scalar("bits_per_byte/val", r.eval->bits_per_byte(), r.step);
  }
  tb_->flush();
}

std::vector<std::shared_ptr<TrainerListener>> standard_listeners() {
  std::vector<std::shared_ptr<TrainerListener>> listeners{std::make_shared<ProgressLines>()};
  if (dist::is_root()) {
    listeners.push_back(std::make_shared<CsvListener>());
    listeners.push_back(std::make_shared<TensorBoardListener>());
  }
  return listeners;
}

}  // namespace mvgpt::apps
