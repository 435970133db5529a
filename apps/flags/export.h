#pragma once
// export's flags: the checkpoint, the format, the new folder or file. The checks of their values and combinations that need
// nothing but the command line run while parsing (NOTE [ Parsing only reads argv ], apps/common/cli.h).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/common/cli.h"

namespace mvgpt::apps {

// export: a checkpoint as another ecosystem's folder or file (import reads one back).
struct ExportArgs {
  std::string ckpt, format = "hf", out_dir, tokenizer_path;
  std::string outtype = "f32";  // gguf: the matrices' type (f32, f16, bf16, q8_0)
};

// The CLI::App with the flags bound to `args` (which must outlive it); parsing it fills `args` and
// runs the checks (UsageError), derived fields included.
std::unique_ptr<CLI::App> export_cli(ExportArgs& args);
// Parse + validate without running (argv[0] is the program's name): CLI::ParseError (CLI::Success
// and its subclasses for --help) or UsageError.
ExportArgs parse_export_args(int argc, const char* const* argv);

}  // namespace mvgpt::apps
