#pragma once
// The parsers that take a path get the fuzzer's bytes through a file of this process's own.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace mvgpt::fuzz {

inline std::string write_input(const uint8_t* data, size_t size, const char* suffix) {
  const std::string path = "/tmp/mvgpt_fuzz_" + std::to_string(::getpid()) + suffix;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace mvgpt::fuzz
