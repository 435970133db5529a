#pragma once
// evaluate's flags: the checkpoints, the token file, the window and precision. The checks of their values and combinations that need
// nothing but the command line run while parsing (NOTE [ Parsing only reads argv ], apps/common/cli.h).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/common/cli.h"

namespace mvgpt::apps {

struct EvaluateArgs {
  std::vector<std::string> ckpts;
  std::string adapter;
  std::string rope_scaling;  // load-time override of rotary models ("": the checkpoint's)
  int64_t block_size = -1;   // load-time window of rotary models (-1: the checkpoint's)
  std::string tokens_path = "data/valid.bin", device_flag = "auto", precision = "fp32";
  int64_t batch_size = 8, max_windows = -1;
  bool as_json = false;
};

// The CLI::App with the flags bound to `args` (which must outlive it); parsing it fills `args` and
// runs the checks (UsageError), derived fields included.
std::unique_ptr<CLI::App> evaluate_cli(EvaluateArgs& args);
// Parse + validate without running (argv[0] is the program's name): CLI::ParseError (CLI::Success
// and its subclasses for --help) or UsageError.
EvaluateArgs parse_evaluate_args(int argc, const char* const* argv);

}  // namespace mvgpt::apps
