#pragma once
// CUDA cases skip where no GPU is usable, saying why; on a GPU machine they must run.
// MVGPT_REQUIRE_CUDA=1 (scripts/gpu-check.sh sets it) turns each "no CUDA device" skip into a
// failure. The check cannot tell the skips apart by their messages: GoogleTest 1.12 (Debian 12)
// writes no skip message into its reports.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string_view>

#include <mvgpt/backends/backend.h>

namespace mvgpt::testing {

inline bool cuda_required() {
  const char* v = std::getenv("MVGPT_REQUIRE_CUDA");
  return v && std::string_view(v) == "1";
}

}  // namespace mvgpt::testing

// In a test body or SetUp: when no CUDA device is usable, returns skipped (failed under
// MVGPT_REQUIRE_CUDA=1). `what` (streamed) says what the case checks on a GPU machine.
#define MVGPT_SKIP_WITHOUT_CUDA(what)                                                                  \
  if (!::mvgpt::cuda_available()) {                                                                    \
    if (::mvgpt::testing::cuda_required())                                                             \
      GTEST_FAIL() << "MVGPT_REQUIRE_CUDA=1 but no CUDA device: " << ::mvgpt::cuda_status().reason;    \
    else                                                                                               \
      GTEST_SKIP() << "no CUDA device: " << ::mvgpt::cuda_status().reason << "; " << what;             \
  }
