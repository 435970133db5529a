#pragma once
// prepare's flags: the stories, the tokenizer, the output folder. The checks of their values and combinations that need
// nothing but the command line run while parsing (NOTE [ Parsing only reads argv ], apps/common/cli.h).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/common/cli.h"

namespace mvgpt::apps {

struct PrepareArgs {
  std::string data_dir, train_path, valid_path, out_dir = "data", tokenizer_path;
  size_t vocab_size = 10000;
  double tokenizer_mb = 0;
  // Derived: the tokenizer trains on the first tokenizer_bytes of the stories (0: all of them).
  size_t tokenizer_bytes = 0;
};

// The CLI::App with the flags bound to `args` (which must outlive it); parsing it fills `args` and
// runs the checks (UsageError), derived fields included.
std::unique_ptr<CLI::App> prepare_cli(PrepareArgs& args);
// Parse + validate without running (argv[0] is the program's name): CLI::ParseError (CLI::Success
// and its subclasses for --help) or UsageError.
PrepareArgs parse_prepare_args(int argc, const char* const* argv);

}  // namespace mvgpt::apps
