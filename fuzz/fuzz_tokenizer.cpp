// Tokenizer::from_json (tokenizer.json, either kind) on arbitrary text; a tokenizer that loads
// encodes and decodes a fixed text and its own input, and must round-trip the fixed text as a story.
#include <exception>
#include <string>

#include <mvgpt/text/tokenizer.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    auto tok = mvgpt::text::Tokenizer::from_json(text, "fuzz");
    const std::string sample = "Once upon a time, there was a cat.<|endoftext|> \xc3\xa9\xff";
    if (tok.decode(tok.encode_prompt(sample)) != sample) std::abort();  // either kind (a SentencePiece JSON too)
    (void)tok.decode(tok.encode(text.substr(0, 256)));
  } catch (const std::exception&) {
  }
  return 0;
}
