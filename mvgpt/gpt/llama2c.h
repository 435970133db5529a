#pragma once
// llama2.c's model files in: the legacy float32 .bin (a header of 7 int32, a negative vocab_size
// for an unshared classifier, then the weights and the RoPE tables) and export.py's version 1
// ("ak42", a 256-byte header with a shared-classifier flag, then the weights, norms first).
//
// NOTE [ llama2.c's rotary pairs ]
// llama2.c (run.c, and Meta's original Llama) rotates interleaved pairs of each head: channels
// (2j, 2j + 1) turn by pos * 10000^(-2j/D); ours by default pairs j with j + D/2 (split-half, as
// Hugging Face's Llama). The imported config says "rope_layout": "interleaved" and the attention
// rotates that way, so the weights stay exactly as the file has them (export --format hf reorders
// the rows of wq and wk for transformers, which rotates split halves). Nothing else differs:
// RMSNorm (eps 1e-5, run.c's), SwiGLU w2(silu(w1 x) * w3 x), grouped KV heads (query head h reads
// KV head h / (H / K)), no biases.
#include <string>

#include <mvgpt/gpt/checkpoint.h>

namespace mvgpt::gpt {

// Reads a llama2.c .bin (either format, told apart by the magic) into a Llama-style model;
// std::runtime_error naming the file, the value and what is wrong (a size that does not match the
// header, a version-2 int8 file, a header out of range).
LoadedCheckpoint load_llama2c(const std::string& path);

}  // namespace mvgpt::gpt
