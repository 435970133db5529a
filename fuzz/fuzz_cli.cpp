// The apps' command lines (apps/flags/<app>.h): parse and validate, as each app does before it runs,
// arbitrary argv words. Input format and checks: fuzz/cli_input.h. Nothing here opens a file, trains
// or exits: --help ends in CLI::CallForHelp, which the harness catches.
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string_view>

#include "fuzz/cli_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const mvgpt::fuzz::CommandLine cl =
      mvgpt::fuzz::split_command_line(std::string_view(reinterpret_cast<const char*>(data), size));
  mvgpt::fuzz::CliOutcome outcome{};
  const std::string broken = mvgpt::fuzz::check_command_line(cl, outcome);
  if (!broken.empty()) {
    std::fprintf(stderr, "fuzz_cli: %s: %s\n", cl.app.c_str(), broken.c_str());
    std::abort();
  }
  return 0;
}
