#pragma once
// The command-line fuzzer's input format and checks, shared by fuzz/fuzz_cli.cpp and the test that
// replays its corpus (tests/apps/cli_test.cpp).
//
// An input is lines (split on '\n' or '\0'): the first names the app ("pretrain"; otherwise its first
// byte picks one, byte % 5), the others are argv[1..] (at most kMaxWords). It is parsed and validated
// as the app would (apps/flags/<app>.h), which must end in args, a CLI::ParseError or a UsageError with
// a message; args that parse must hold what the run relies on (finite rates, a warm-up inside its
// schedule, a device that names one, ...): check_command_line returns the first that does not.
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "apps/common/app.h"
#include "apps/flags/context.h"
#include "apps/flags/evaluate.h"
#include "apps/flags/export.h"
#include "apps/flags/generate.h"
#include "apps/flags/import.h"
#include "apps/flags/merge.h"
#include "apps/flags/prepare.h"
#include "apps/flags/pretrain.h"
#include <mvgpt/tensor/device.h>

namespace mvgpt::fuzz {

inline constexpr const char* kApps[] = {"prepare", "pretrain", "evaluate", "context", "generate"};
inline constexpr size_t kMaxWords = 64;

struct CommandLine {
  std::string app;
  std::vector<std::string> words;  // argv[1..]
};

inline CommandLine split_command_line(std::string_view input) {
  std::vector<std::string> lines(1);
  for (char c : input) {
    if (c == '\n' || c == '\0') {
      if (lines.size() > kMaxWords) break;
      lines.emplace_back();
    } else {
      lines.back() += c;
    }
  }
  CommandLine cl;
  for (const char* app : kApps)
    if (lines[0] == app) cl.app = app;
  if (cl.app.empty()) cl.app = kApps[(input.empty() ? 0 : uint8_t(input[0])) % 5];
  cl.words.assign(lines.begin() + 1, lines.end());
  return cl;
}

enum class CliOutcome { parsed, rejected, help };

namespace detail {

inline bool names_a_device(const std::string& flag) {
  if (flag.empty() || flag == "auto") return true;
  try {
    (void)Device::parse(flag);
    return true;
  } catch (const std::invalid_argument&) {
    return false;
  }
}

inline std::string check(const apps::PrepareArgs& a) {
  if (a.vocab_size < 257 || a.vocab_size > 65536) return "vocab_size out of range";
  if (!std::isfinite(a.tokenizer_mb) || a.tokenizer_mb < 0) return "tokenizer_mb not a finite size";
  if (double(a.tokenizer_bytes) > a.tokenizer_mb * 1e6) return "tokenizer_bytes above tokenizer_mb";
  return "";
}

inline std::string check(const apps::PretrainArgs& a) {
  const apps::PretrainSettings& s = a.settings;
  if (s.batch_size <= 0 || s.eval_interval <= 0 || s.eval_windows <= 0 || a.log_interval <= 0) return "a count <= 0";
  if (!std::isfinite(s.lr) || s.lr <= 0) return "lr not finite and positive";
  for (double v : {s.weight_decay, s.grad_clip})
    if (!std::isfinite(v) || v < 0) return "weight decay or clip not finite and >= 0";
  if (!std::isfinite(s.min_lr) || (s.min_lr < 0 && s.min_lr != -1)) return "min_lr not finite";
  if (!std::isfinite(a.minutes) || a.minutes <= 0) return "minutes not finite and positive";
  if (a.steps < 0 || a.inject_nan_step < -1) return "a negative step";
  if (a.out_dir.empty()) return "no run folder";
  if (!names_a_device(a.device_flag)) return "device flag names no device";
  if (a.resume && a.overwrite) return "--resume with --overwrite";
  if (a.given.has("--preset") && a.given.has("--config")) return "--preset with --config";
  if (a.given.has("--steps") && a.given.has("--minutes")) return "--steps with --minutes";
  if (a.resume) {
    if (a.given.has("--preset") || a.given.has("--config")) return "--resume with a model shape";
  } else {
    if (s.schedule_steps <= 0 || s.warmup_steps < 0 || s.warmup_steps > s.schedule_steps) return "schedule incomplete";
    if (s.min_lr < 0) return "min_lr not filled in";
  }
  return "";
}

inline std::string check(const apps::EvaluateArgs& a) {
  if (a.ckpts.empty()) return "no checkpoint";
  if (a.batch_size <= 0 || (a.max_windows != -1 && a.max_windows <= 0)) return "a count <= 0";
  if (!names_a_device(a.device_flag)) return "device flag names no device";
  return "";
}

inline std::string check(const apps::ContextArgs& a) {
  if (a.ckpts.empty()) return "no checkpoint";
  if (a.length <= 0 || a.streams <= 0) return "a count <= 0";
  for (const auto& m : a.method_names)
    if (m != "window" && m != "cache" && m != "full") return "unknown method " + m;
  int64_t product = 0;
  const bool overflow = __builtin_mul_overflow(a.length, a.streams, &product);
  if (a.tokens_needed != (overflow ? std::numeric_limits<int64_t>::max() : product)) return "tokens_needed wrong";
  if (!names_a_device(a.device_flag)) return "device flag names no device";
  return "";
}

inline std::string check(const apps::GenerateArgs& a) {
  if (!std::isfinite(a.temperature) || a.temperature < 0) return "temperature not finite and >= 0";
  if (a.top_k < 0 || a.max_new_tokens < 0) return "a count < 0";
  if (!names_a_device(a.device_flag)) return "device flag names no device";
  return "";
}

template <typename Args>
std::string parse_and_check(std::unique_ptr<CLI::App> (*make)(Args&), const std::vector<const char*>& argv,
                            CliOutcome& outcome) {
  Args args;
  const auto app = make(args);
  try {
    app->parse(int(argv.size()), argv.data());
  } catch (const CLI::Success&) {  // --help: the app prints this and exits 0
    outcome = CliOutcome::help;
    return app->help().empty() ? "empty help" : "";
  } catch (const std::exception& e) {  // CLI::ParseError or UsageError: one line and exit 2
    outcome = CliOutcome::rejected;
    return std::string(e.what()).empty() ? "rejected without a message" : "";
  }
  outcome = CliOutcome::parsed;
  return check(args);
}

}  // namespace detail

// "" when the command line parses into args the run can rely on, or is rejected with a message;
// otherwise what is wrong. Never touches a file.
inline std::string check_command_line(const CommandLine& cl, CliOutcome& outcome) {
  std::vector<const char*> argv{cl.app.c_str()};
  for (const auto& w : cl.words) argv.push_back(w.c_str());
  if (cl.app == "prepare") return detail::parse_and_check(apps::prepare_cli, argv, outcome);
  if (cl.app == "pretrain") return detail::parse_and_check(apps::pretrain_cli, argv, outcome);
  if (cl.app == "evaluate") return detail::parse_and_check(apps::evaluate_cli, argv, outcome);
  if (cl.app == "context") return detail::parse_and_check(apps::context_cli, argv, outcome);
  return detail::parse_and_check(apps::generate_cli, argv, outcome);
}

}  // namespace mvgpt::fuzz
