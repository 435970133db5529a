#pragma once
// generate's flags: the checkpoint, the prompt, sampling. The checks of their values and combinations that need
// nothing but the command line run while parsing (NOTE [ Parsing only reads argv ], apps/common/cli.h).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/common/cli.h"

namespace mvgpt::apps {

struct GenerateArgs {
  std::string ckpt, prompt, prompt_file, tokenizer_path, device_flag = "auto", adapter, precision = "fp32";
  std::string rope_scaling;  // load-time override ("": the checkpoint's)
  int64_t block_size = -1;   // load-time window of a rotary model (-1: the checkpoint's)
  int64_t max_new_tokens = 200, num_samples = 1;
  double temperature = 0.8, top_p = 1.0;
  int64_t top_k = 200;
  uint64_t seed = 1337;
  bool no_cache = false, stop_at_end = false;
};

// The CLI::App with the flags bound to `args` (which must outlive it); parsing it fills `args` and
// runs the checks (UsageError), derived fields included.
std::unique_ptr<CLI::App> generate_cli(GenerateArgs& args);
// Parse + validate without running (argv[0] is the program's name): CLI::ParseError (CLI::Success
// and its subclasses for --help) or UsageError.
GenerateArgs parse_generate_args(int argc, const char* const* argv);

}  // namespace mvgpt::apps
