#pragma once
// Hugging Face folders, out and back in: the GPT as a model `transformers` loads with
// AutoModelForCausalLM.from_pretrained, and such a folder read back bit for bit.
//
// NOTE [ Hugging Face folders ]
// Each variant goes to the transformers class that computes the same function:
//   learned positions (LayerNorm, tanh GELU, biases)  -> GPT2LMHeadModel ("gpt2"): our names,
//     with the Conv1D weights (c_attn, c_proj, c_fc) stored transposed, (in, out);
//     activation_function "gelu_new" (GPT-2's tanh GELU), or "gelu" for the exact GELU.
//   RoPE with LayerNorm, GELU, biases               -> GPTNeoXForCausalLM ("gpt_neox"): rotary_pct 1
//     (every channel rotates, split-half like ours), use_parallel_residual false (x + attn, then
//     x + mlp, as ours), hidden_act "gelu_new" (or "gelu"); the fused query_key_value is per head
//     ([q_h, k_h, v_h] for each head h) where ours is [all q, all k, all v].
//   RoPE with RMSNorm and SwiGLU (Llama)             -> LlamaForCausalLM ("llama"): c_attn split by
//     rows into q_proj, k_proj, v_proj (grouped KV heads as num_key_value_heads); w1, w3, w2 are
//     gate_proj, up_proj, down_proj.
// Every change is a transposition, a permutation or a split of rows, so weights cross bit for bit
// both ways. A tied head is not stored (tie_word_embeddings true), as transformers saves it. Other
// combinations (GQA with LayerNorm, no biases with GELU, NTK scaling) have no such class and are
// refused, naming what does not map. Reading back takes only configs that compute our function:
// a tanh GELU, sequential residuals, full rotary, scores scaled by 1/sqrt(D).
#include <map>
#include <string>

#include <mvgpt/gpt/model.h>
#include <mvgpt/text/tokenizer.h>

namespace mvgpt::gpt::hf {

// True when config.json's text is a Hugging Face config (a JSON object with "model_type").
bool is_hf_config(const std::string& config_json);

// The transformers class for the model ("GPT2LMHeadModel", "GPTNeoXForCausalLM",
// "LlamaForCausalLM"); std::invalid_argument saying why none computes this config.
std::string architecture(const GPTConfig& config);

// config.json for transformers; eot_id >= 0 sets bos/eos_token_id (the tokenizer's <|endoftext|>).
std::string config_json(const GPTConfig& config, int64_t eot_id = -1);
// The model's tensors under the class's names and layouts.
nn::NamedTensors to_hf_tensors(const GPT& model);

// A Hugging Face config.json (model_type gpt2, gpt_neox or llama) as our config; std::invalid_argument
// naming `source`, the field, its value and what we need.
GPTConfig config_from_hf(const std::string& config_json, const std::string& source);
// The tensors of a Hugging Face model.safetensors under our names (the inverse of to_hf_tensors);
// std::invalid_argument naming `source` and each missing, unexpected or mis-shaped tensor.
nn::NamedTensors tensors_from_hf(const GPTConfig& config, const nn::NamedTensors& hf_tensors, const std::string& source);

// Writes the folder transformers loads: config.json, model.safetensors (float32, "format": "pt",
// plus `metadata`), generation_config.json and, with a tokenizer, tokenizer.json (Hugging Face's
// form) and tokenizer_config.json. Atomic as a whole (util::write_folder_atomic).
void save_hf(const std::string& dir, const GPT& model, const text::Tokenizer* tokenizer,
             const std::map<std::string, std::string>& metadata = {});

}  // namespace mvgpt::gpt::hf
