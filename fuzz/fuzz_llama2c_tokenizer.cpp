// Tokenizer::load on arbitrary files: llama2.c's tokenizer.bin (a file that is no JSON; JSON goes to
// fuzz_tokenizer). A tokenizer that loads must round-trip a fixed story from BOS, and encodes and
// decodes its own input.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "fuzz/fuzz_input_file.h"
#include <mvgpt/text/tokenizer.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mvgpt::fuzz::write_input(data, size, ".tokenizer.bin");
  try {
    auto tok = mvgpt::text::Tokenizer::load(path);
    const std::string sample = "Once upon a time, there was a cat. \xc3\xa9\xff\xf0\x9f\xa6\x99";
    if (tok.decode(tok.encode_prompt(sample)) != sample) std::abort();
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    (void)tok.decode(tok.encode(text.substr(0, 256)));
  } catch (const std::exception&) {
  }
  std::remove(path.c_str());
  return 0;
}
