#pragma once
// import's flags: what to read, its format, the new checkpoint folder. The checks of their values and combinations that need
// nothing but the command line run while parsing (NOTE [ Parsing only reads argv ], apps/common/cli.h).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/common/cli.h"

namespace mvgpt::apps {

// import: another ecosystem's folder or file as a checkpoint.
struct ImportArgs {
  std::string from, format = "hf", out_dir;
  std::string tokenizer_path;  // llama2c: its tokenizer.bin
};

// The CLI::App with the flags bound to `args` (which must outlive it); parsing it fills `args` and
// runs the checks (UsageError), derived fields included.
std::unique_ptr<CLI::App> import_cli(ImportArgs& args);
// Parse + validate without running (argv[0] is the program's name): CLI::ParseError (CLI::Success
// and its subclasses for --help) or UsageError.
ImportArgs parse_import_args(int argc, const char* const* argv);

}  // namespace mvgpt::apps
