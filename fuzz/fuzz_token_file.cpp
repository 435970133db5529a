// TokenFile (llm.c's .bin: 256 x int32 header, then uint16 tokens) on arbitrary files; every token
// of a file that opens is read.
#include <exception>

#include "fuzz/fuzz_input_file.h"
#include <mvgpt/text/token_file.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mvgpt::fuzz::write_input(data, size, ".bin");
  try {
    mvgpt::text::TokenFile file(path);
    uint64_t sum = 0;
    for (uint16_t t : file.tokens()) sum += t;
    if (sum == uint64_t(-1)) std::abort();
  } catch (const std::exception&) {
  }
  std::remove(path.c_str());
  return 0;
}
