#include "apps/common/cli.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "apps/common/app.h"
#include <mvgpt/gpt/config.h>
#include <mvgpt/tensor/device.h>

namespace mvgpt::apps {

// The range checks of number flags, in one short line: CLI11's own print the largest double in full
// ("Value 0 not in range 0.000000 to 17976931348623157...") and claim 0 is outside [0, ...].
// Each refuses NaN and infinities too, which CLI11's PositiveNumber and NonNegativeNumber let
// through (every comparison with NaN is false). No description, so --help is unchanged.
CLI::Validator number_check(double lo, double hi, bool lo_open, bool whole) {
  const auto number = [](double v) { return format("%g", v); };
  std::string allowed = whole ? "a whole number" : "a number";
  if (std::isfinite(hi)) allowed += (lo_open ? " above " + number(lo) + " and at most " : " from " + number(lo) + " to ") + number(hi);
  else allowed += lo_open ? " above " + number(lo) : " of at least " + number(lo);
  return CLI::Validator(
      [=](std::string& text) {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return text + " is not a number; expected " + allowed;
        if (!std::isfinite(v)) return text + " is not a finite number";
        if (v < lo || (lo_open && v == lo) || v > hi) return text + " is not allowed; expected " + allowed;
        return std::string();
      },
      "");
}
constexpr double kNoLimit = std::numeric_limits<double>::infinity();
// Counts (steps, batches, ranks): 1 or more; or 0 or more.
const CLI::Validator kCount = number_check(1, kNoLimit, false, true);
const CLI::Validator kCountOrZero = number_check(0, kNoLimit, false, true);
// Rates, times, scales: above 0; or 0 or more.
const CLI::Validator kPositive = number_check(0, kNoLimit, true, false);
const CLI::Validator kNonNegative = number_check(0, kNoLimit, false, false);
CLI::Validator between(double lo, double hi) { return number_check(lo, hi, false, false); }
CLI::Validator whole_between(double lo, double hi) { return number_check(lo, hi, false, true); }

// "a,b,c" as its names; UsageError for an empty one ("", ",", "a,,b"), with `example` to follow.
std::vector<std::string> split_names(const std::string& flag, const std::string& text, const std::string& example) {
  std::vector<std::string> names;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    std::string name = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (name.empty())
      throw UsageError(flag + " '" + text + "' names an empty layer; give names separated by commas, such as " + example);
    names.push_back(std::move(name));
    if (comma == std::string::npos) return names;
    start = comma + 1;
  }
}

void record_given(const CLI::App& app, GivenFlags& given) {
  given.names.clear();
  for (const CLI::Option* opt : app.get_options())
    if (opt->count() > 0) given.names.insert(opt->get_name());
}

// --rope-scaling none|linear:F|ntk:F, checked while parsing (RopeScaling::parse's message).
CLI::Option* add_rope_scaling(CLI::App& app, std::string& spec, const std::string& what) {
  return app
      .add_option("--rope-scaling", spec,
                  what + ": none, linear:F (position interpolation, positions / F) or ntk:F (NTK-aware, base grows with F); "
                         "docs/rope.md")
      ->check(CLI::Validator(
          [](std::string& text) {
            try {
              (void)gpt::RopeScaling::parse(text);
              return std::string();
            } catch (const std::invalid_argument& e) {
              return std::string(e.what());
            }
          },
          "SPEC"));
}

// The load-time --rope-scaling and --block-size of evaluate, context and generate.
void add_position_flags(CLI::App& app, std::string& rope_scaling, int64_t& block_size) {
  add_rope_scaling(app, rope_scaling, "rotate a rotary model's positions this way instead of its config's (no retraining)");
  app.add_option("--block-size", block_size, "run a rotary model with this context window instead of its config's")
      ->check(kCount);
}

// --precision fp32|bf16|auto (NOTE [ Precision policy ] in autograd/precision.h).
void add_precision_flag(CLI::App& app, std::string& precision) {
  app.add_option("--precision", precision,
                 "products in fp32, or in bf16 summed in fp32 (weights, optimizer state and everything else stay "
                 "fp32), or auto: bf16 where the device computes it natively (AMX or AVX512-BF16, CUDA sm_80+)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "bf16", "auto"}));
}

// --version and the examples every --help ends with.
void add_version_and_examples(CLI::App& app, const std::string& examples) {
  app.set_version_flag("--version", std::string("mvgpt ") + MVGPT_VERSION, "print the version and exit");
  app.footer("\nExamples:\n" + examples);
}


void check_device_flag(const std::string& flag) {
  if (flag.empty() || flag == "auto") return;
  try {
    (void)Device::parse(flag);
  } catch (const std::exception&) {
    throw UsageError("--device " + flag + ": expected cpu, cuda, cuda:N or auto");
  }
}

}  // namespace mvgpt::apps
