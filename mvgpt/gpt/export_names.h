#pragma once
// INTERNAL: shared by the Hugging Face (hf.cpp) and GGUF (gguf.cpp) writers and readers.
//
// NOTE [ One table of tensor names per architecture ]
// Our GPT goes out as one of three families, each the other ecosystems' name for a model that
// computes our function: gpt2 (learned positions, LayerNorm, tanh GELU, biases), GPT-NeoX (the same
// with RoPE) and Llama (RoPE, RMSNorm, SwiGLU, grouped KV heads). For each family one table gives,
// for every prefix of our tensor names, its Hugging Face name and its GGUF (llama.cpp) name; Llama's
// fused c_attn goes out as three (q, k, v). The layouts (a transposition for GPT-2's Conv1D,
// GPT-NeoX's per-head qkv, the order of rotary channels) are each format's own and stay beside it.
#include <array>
#include <cstdint>
#include <span>
#include <string>

#include <vector>

#include <mvgpt/gpt/config.h>
#include <mvgpt/gpt/model.h>
#include <mvgpt/tensor/tensor.h>
#include <mvgpt/text/tokenizer.h>

namespace mvgpt::gpt::export_names {

enum class Family { gpt2, neox, llama };

// The family that computes the config's model; std::invalid_argument naming what does not map.
Family family_of(const GPTConfig& c);

struct TensorName {
  const char* ours;                  // a prefix of our names (top level, or within "transformer.h.<i>.")
  std::array<const char*, 3> hf;     // Hugging Face's; three for a qkv split by rows
  std::array<const char*, 3> gguf;   // llama.cpp's
  bool split_qkv() const { return hf[1] != nullptr; }
};

// Where one of our tensors is in the table: its entry, its layer (-1 at the top level) and the rest of
// the name after the prefix ("weight", "bias").
struct Located {
  const TensorName* entry = nullptr;
  int64_t layer = -1;
  std::string rest;
};
// std::logic_error for a name no entry holds (a model this family does not compute).
Located locate(const std::string& ours, Family f);
// Whether `at` is a block's fused attn.c_attn (rows [q, k, v]).
bool is_qkv(const Located& at);
// The rows of q, k and v in a fused c_attn: {H * D, K * D, K * D}.
std::vector<int64_t> qkv_rows(const GPTConfig& c);

// The name of `at` in Hugging Face's or GGUF's model (part k of a split qkv).
std::string hf_name(const Located& at, Family f, int part = 0);
std::string gguf_name(const Located& at, int part = 0);

// A fused qkv weight or bias whose rotary channels are in the order `from`, with the rows of its q
// and k parts reordered per head to the order `to` (NOTE [ llama2.c's rotary pairs ]): interleaved
// (H, D/2, 2) and split halves (H, 2, D/2). v is not rotated; `from` == `to` gives qkv itself. The
// scores q . k do not depend on the order of the channels, so the model computes the same function;
// the reordering is a permutation, exact.
Tensor with_rope_layout(const Tensor& qkv, const GPTConfig& c, RopeLayout from, RopeLayout to);

// What both exports refuse before any work, as std::invalid_argument naming it: LoRA adapters (merge
// them first), a tokenizer with more ids than the model, and rope scaling other than linear (NTK
// changes with the length in `target`, "transformers" or "llama.cpp").
void check_exportable(const GPT& model, const text::Tokenizer* tokenizer, const std::string& target);
void require_linear_rope_scaling(const GPTConfig& c, const std::string& target);

bool bits_equal(const Tensor& a, const Tensor& b);

// "<source> does not fit its <what>: missing a, b; mis-shaped c (...); unexpected d and 3 more"
// (std::invalid_argument); nothing when all three are empty.
void check_tensors_fit(const std::string& source, const std::string& what, const std::vector<std::string>& missing,
                       const std::vector<std::string>& misshaped, const std::vector<std::string>& unexpected);

}  // namespace mvgpt::gpt::export_names
