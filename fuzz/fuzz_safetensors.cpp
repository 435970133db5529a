// safetensors: parse_header on arbitrary JSON text, and load() (mapped and read) on arbitrary files;
// every tensor that loads is read end to end, so a header that points outside the file shows up.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>

#include "fuzz/fuzz_input_file.h"
#include <mvgpt/nn/safetensors.h>

using namespace mvgpt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The header alone, with a data section size taken from the first byte.
  const uint64_t data_size = size ? data[0] * 4 : 0;
  try {
    safetensors::parse_header(std::string_view(reinterpret_cast<const char*>(data), size), data_size, "fuzz");
  } catch (const std::exception&) {
  }
  // The whole input as a file.
  const std::string path = fuzz::write_input(data, size, ".safetensors");
  for (bool mmap : {true, false}) {
    try {
      safetensors::File f = safetensors::load(path, {.mmap = mmap});
      double sum = 0;
      for (const auto& [name, t] : f.tensors) {
        const auto* bytes = static_cast<const unsigned char*>(t.raw_data());
        for (int64_t i = 0; i < t.numel() * int64_t(dtype_size(t.dtype())); ++i) sum += bytes[i];
      }
      if (sum < 0) std::abort();
    } catch (const std::exception&) {
    }
  }
  std::remove(path.c_str());
  return 0;
}
