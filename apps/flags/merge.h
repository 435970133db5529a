#pragma once
// merge's flags: the checkpoint, the adapter, the new folder. The checks of their values and combinations that need
// nothing but the command line run while parsing (NOTE [ Parsing only reads argv ], apps/common/cli.h).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/common/cli.h"

namespace mvgpt::apps {

struct MergeArgs {
  std::string ckpt, adapter, out_dir;
};

// The CLI::App with the flags bound to `args` (which must outlive it); parsing it fills `args` and
// runs the checks (UsageError), derived fields included.
std::unique_ptr<CLI::App> merge_cli(MergeArgs& args);
// Parse + validate without running (argv[0] is the program's name): CLI::ParseError (CLI::Success
// and its subclasses for --help) or UsageError.
MergeArgs parse_merge_args(int argc, const char* const* argv);

}  // namespace mvgpt::apps
