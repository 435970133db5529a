#pragma once
// context's flags: the checkpoints, the streams past the window, the methods, the plots. The checks of their values and combinations that need
// nothing but the command line run while parsing (NOTE [ Parsing only reads argv ], apps/common/cli.h).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/common/cli.h"

namespace mvgpt::apps {

struct ContextArgs {
  std::vector<std::string> ckpts, method_names;
  std::string adapter;
  std::string rope_scaling;  // load-time override of rotary models ("": the checkpoint's)
  int64_t block_size = -1;   // load-time window of rotary models (-1: the checkpoint's)
  std::string tokens_path = "data/valid.bin", device_flag = "auto", out_dir = "runs/context", precision = "fp32";
  int64_t length = 768, streams = 8;
  bool as_json = false, no_plot = false;
  // Derived: length * streams, the tokens the streams read (INT64_MAX when that overflows).
  int64_t tokens_needed = 0;
};

// The CLI::App with the flags bound to `args` (which must outlive it); parsing it fills `args` and
// runs the checks (UsageError), derived fields included.
std::unique_ptr<CLI::App> context_cli(ContextArgs& args);
// Parse + validate without running (argv[0] is the program's name): CLI::ParseError (CLI::Success
// and its subclasses for --help) or UsageError.
ContextArgs parse_context_args(int argc, const char* const* argv);

}  // namespace mvgpt::apps
