#pragma once
// The flag groups the apps share (the range checks of numbers, --device, --precision, the rotary
// flags, --version and the examples); each app's own flags are in apps/flags/<app>.{h,cpp}, bound to
// its Args struct. main() is `run_app(*<app>_cli(args), ...)` and then the run; tests and
// fuzz/fuzz_cli.cpp call parse_<app>_args alone.
//
// NOTE [ Parsing only reads argv ]
// Building an app's CLI::App, parsing and validating open no file, touch no device and print
// nothing: whatever a command line holds, parsing it ends in the args, in a CLI::ParseError
// (CLI::CallForHelp for --help) or in a UsageError. Everything that needs a file (a run to resume,
// a model's window) or the machine (a GPU, the ranks of mpirun) is checked by the run.
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace mvgpt::apps {

// Flags given on the command line, by long name ("--lr"), filled once the parse succeeds.
struct GivenFlags {
  std::set<std::string> names;
  bool has(const std::string& flag) const { return names.count(flag) > 0; }
};

// The flags given on the command line into `given` (by long name), once the parse succeeded.
void record_given(const CLI::App& app, GivenFlags& given);

// The range checks of number flags, in one short line ("--lr: -1 is not allowed; expected a number
// above 0"); each refuses NaN and infinities too.
CLI::Validator number_check(double lo, double hi, bool lo_open, bool whole);
extern const CLI::Validator kCount;         // a whole number >= 1 (steps, batches, streams)
extern const CLI::Validator kCountOrZero;   // a whole number >= 0
extern const CLI::Validator kPositive;      // a number > 0 (rates, times, scales)
extern const CLI::Validator kNonNegative;   // a number >= 0
CLI::Validator between(double lo, double hi);        // a number in [lo, hi]
CLI::Validator whole_between(double lo, double hi);  // a whole number in [lo, hi]

// "a,b,c" as its names; UsageError for an empty one ("", ",", "a,,b"), with `example` to follow.
std::vector<std::string> split_names(const std::string& flag, const std::string& text, const std::string& example);

// --rope-scaling none|linear:F|ntk:F, checked while parsing; `what` is its help text.
CLI::Option* add_rope_scaling(CLI::App& app, std::string& spec, const std::string& what);
// The load-time --rope-scaling and --block-size of evaluate, context and generate.
void add_position_flags(CLI::App& app, std::string& rope_scaling, int64_t& block_size);
// --precision fp32|bf16|auto (NOTE [ Precision policy ] in autograd/precision.h).
void add_precision_flag(CLI::App& app, std::string& precision);
// --version and the examples every --help ends with.
void add_version_and_examples(CLI::App& app, const std::string& examples);

// Parses into a fresh T through its app's CLI (which validates it).
template <typename T>
T parse_with(std::unique_ptr<CLI::App> (*make)(T&), int argc, const char* const* argv) {
  T args;
  make(args)->parse(argc, argv);
  return args;
}

// UsageError "--device <flag>: expected cpu, cuda, cuda:N or auto" unless the text names a device
// (whether that device exists is resolve_device's question, at run time).
void check_device_flag(const std::string& flag);

}  // namespace mvgpt::apps
