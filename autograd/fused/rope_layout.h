#pragma once
// Which channels a rotary embedding pairs; its own header so that a model's config can name it
// without the tensor headers.
#include <cstdint>

namespace mvgpt {

// Channel i with i + d/2 (Llama in Hugging Face, GPT-NeoX, our model), or 2i with 2i + 1 (RoFormer,
// llama2.c, Meta's original Llama).
enum class RopeLayout : uint8_t { split_half, interleaved };

}  // namespace mvgpt
