#pragma once
// LoRA (Hu et al., 2021): fine-tune a model by freezing its weights and training, for chosen linear
// layers, an update of low rank: W x + (alpha / r) B A x, with A (r, in) random and B (out, r) zero,
// so training starts from the unchanged model. The adapters are a few percent of the weights, saved
// in a file of their own with PEFT's tensor names ("<layer>.lora_A.weight", "<layer>.lora_B.weight"),
// and can be merged back into W (W += (alpha / r) B A) to give an ordinary model.
#include <string>
#include <vector>

#include <mvgpt/nn/linear.h>
#include <mvgpt/nn/module.h>

namespace mvgpt::nn {

struct LoRAOptions {
  int64_t rank = 8;
  double alpha = 16;   // the update is scaled by alpha / rank
  double dropout = 0;  // on the adapter's input, in training
  // Linear layers whose name (the last part of the dotted name) is one of these get an adapter. The
  // GPT's attention projections by default; add "c_fc" and "mlp.c_proj" for the MLP.
  std::vector<std::string> targets = {"c_attn", "attn.c_proj"};
};

// The largest alpha / rank an adapter may have: trained ones use 0.5..16, and far past that a merge
// overflows float32.
inline constexpr double kMaxLoRAScale = 1e4;

// Gives every target Linear under `root` an adapter and freezes every other parameter of `root`
// (requires_grad false: no gradient, no optimizer state). A is drawn from `init` (Kaiming-uniform
// scale as PEFT: U(-1/sqrt(in), 1/sqrt(in))), B is zero. Returns the adapters' parameters by dotted
// name, the ones to train. std::invalid_argument when no layer matches or one already has an adapter.
NamedTensors add_lora(Module& root, const LoRAOptions& options, const Init& init = {});

// The adapters' parameters by dotted name (empty without adapters).
NamedTensors lora_parameters(const Module& root);
// Whether a dotted parameter name is an adapter's ("...lora_A.weight", "...lora_B.weight").
bool is_lora_name(const std::string& name);
// The options that rebuild root's adapters: their rank, alpha, dropout, and as targets the full
// dotted names of the adapted layers. rank 0 when root has none.
LoRAOptions lora_options(const Module& root);

// Folds every adapter into its layer's weight (W += scale * B A, in float64 then rounded once) and
// removes it; the model is then an ordinary one, its parameters trainable again.
void merge_lora(Module& root);

// The adapter file: safetensors of lora_parameters with metadata "lora_rank", "lora_alpha",
// "lora_dropout", "lora_targets" (comma-separated).
void save_adapter(const std::string& path, const Module& root, const LoRAOptions& options);
// Reads an adapter file's options and tensors (std::runtime_error naming the file when it is not one).
struct Adapter {
  LoRAOptions options;
  NamedTensors tensors;
  // base_weights_fingerprint of the model it was trained on, 16 hex digits ("" in files saved before
  // adapters recorded it). PEFT names its base; a name says nothing of which weights.
  std::string base_fingerprint;
};
// XXH64 over the names and float32 values of `root`'s parameters that are not adapters, in
// registration order: which base weights an adapter belongs to.
uint64_t base_weights_fingerprint(const Module& root);
Adapter load_adapter(const std::string& path);
// add_lora with the file's options, then its tensors into the adapters (every one must match a layer
// and its shape, or std::invalid_argument naming what differs).
void apply_adapter(Module& root, const Adapter& adapter);

}  // namespace mvgpt::nn
