// GPTConfig::from_json (config.json) and validate() on arbitrary text.
#include <exception>
#include <string>

#include <mvgpt/gpt/config.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto config = mvgpt::gpt::GPTConfig::from_json(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    config.validate();
    (void)config.to_json();
  } catch (const std::exception&) {
  }
  return 0;
}
