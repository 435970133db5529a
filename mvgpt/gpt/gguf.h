#pragma once
// GGUF files, out and back in: the GPT as a model llama.cpp runs (llama-cli, llama-server, Ollama,
// LM Studio, llama-cpp-python), with its tokenizer, and such a file read back as our model.
//
// NOTE [ GGUF models ]
// Each variant goes to the llama.cpp architecture that computes the same function
// (NOTE [ One table of tensor names per architecture ] names the tensors):
//   learned positions (LayerNorm, tanh GELU, biases) -> "gpt2": our layouts as they are (qkv fused as
//     [all q, all k, all v]; llama.cpp's weights are (out, in) like ours).
//   RoPE with LayerNorm, tanh GELU, biases          -> "gptneox": rotary on every channel of a head
//     (rope.dimension_count = head_dim) in split halves (llama.cpp's NEOX rope, ours), sequential
//     residuals (use_parallel_residual false). llama.cpp's GPT-NeoX needs a head, so a tied one is
//     written as output.weight too.
//   RoPE with RMSNorm and SwiGLU (Llama preset, llama2.c) -> "llama": q, k, v split by rows; llama.cpp
//     rotates neighbouring pairs (llama2.c's order), so a split-half model's q and k rows are
//     reordered per head (exact), and mvgpt.rope_layout says so for reading back. A tied head is
//     left out (llama.cpp reuses token_embd).
// Norm weights and biases stay F32 (as llama.cpp's converter writes them); the matrices are F32,
// F16, BF16 or Q8_0 (a matrix whose rows are not a multiple of 32 falls back to F16). The context
// length is block_size. The exact GELU, ReLU^2, grouped KV heads with LayerNorm, NTK rope scaling and
// LoRA adapters (merge them first) have no llama.cpp equivalent and are refused, naming what does not
// map. The tokenizer goes in GGUF's own keys (NOTE [ GGUF vocabulary ] in text/tokenizer.h).
// Reading takes the three architectures when their metadata and tensors describe our model (every
// file written here does) and gives back F32 files bit for bit; a vocabulary in a layout other than
// the two written here (NOTE [ GGUF vocabulary ]) is left out, saying why.
#include <map>
#include <optional>
#include <string>

#include <mvgpt/gpt/checkpoint.h>
#include <mvgpt/gpt/model.h>
#include <mvgpt/nn/gguf.h>
#include <mvgpt/text/tokenizer.h>

namespace mvgpt::gpt {

// "gpt2", "gptneox" or "llama"; std::invalid_argument naming what llama.cpp cannot compute.
std::string gguf_architecture(const GPTConfig& config);

// Writes the model and its tokenizer (required: llama.cpp runs no model without one) to a new file
// `path` (never replaced: std::runtime_error when it exists). `type` is the matrices' type.
// `metadata` goes in as "mvgpt.<key>" strings. Everything that can refuse runs before the file is
// touched.
void save_gguf(const std::string& path, const GPT& model, const text::Tokenizer& tokenizer, gguf::TensorType type,
               const std::map<std::string, std::string>& metadata = {});

struct LoadedGguf {
  LoadedCheckpoint checkpoint;               // metadata: the file's mvgpt.* keys, and "gguf_type"
  std::string architecture;                  // the file's: gpt2, gptneox or llama
  std::optional<text::Tokenizer> tokenizer;  // when the file has one mvgpt reads
  std::string tokenizer_note;                // else why not, when it has one
};
// std::runtime_error naming the file and what does not fit.
LoadedGguf load_gguf(const std::string& path, Device device = Device::cpu());

}  // namespace mvgpt::gpt
