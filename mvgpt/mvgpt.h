// The umbrella header: everything a program that builds and trains models needs, in one include.
// Link mvgpt::mvgpt (or the narrowest module you use: mvgpt::nn for models of your own).
// Data-parallel training is separate: <mvgpt/dist/data_parallel.h> with mvgpt::dist.
#pragma once

#include <mvgpt/tensor/tensor.h>     // Tensor, DType, Device, Generator
#include <mvgpt/autograd/ops.h>      // the differentiable ops models call
#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/autograd/precision.h>  // PrecisionGuard: bf16 products (docs/precision.md)
#include <mvgpt/autograd/gradcheck.h>
#include <mvgpt/fused/adamw.h>         // the fused ops, one unit each
#include <mvgpt/fused/attention.h>
#include <mvgpt/fused/cross_entropy.h>
#include <mvgpt/fused/norms.h>
#include <mvgpt/fused/rope.h>

#include <mvgpt/nn/module.h>         // Module, Sequential, ModuleList
#include <mvgpt/nn/causal_lm.h>      // CausalLM: what training, evaluation and generation take
#include <mvgpt/nn/checkpoint.h>     // any module saved and loaded
#include <mvgpt/nn/linear.h>
#include <mvgpt/nn/embedding.h>
#include <mvgpt/nn/layer_norm.h>
#include <mvgpt/nn/rms_norm.h>
#include <mvgpt/nn/dropout.h>
#include <mvgpt/nn/mlp.h>
#include <mvgpt/nn/attention.h>
#include <mvgpt/nn/kv_cache.h>
#include <mvgpt/nn/lora.h>
#include <mvgpt/nn/init.h>
#include <mvgpt/nn/loss.h>
#include <mvgpt/nn/optim.h>
#include <mvgpt/nn/lr_schedule.h>
#include <mvgpt/nn/safetensors.h>
#include <mvgpt/nn/gguf.h>           // GGUF files (llama.cpp's format)

#include <mvgpt/text/tokenizer.h>    // byte-level BPE, and llama2.c's SentencePiece BPE
#include <mvgpt/text/token_file.h>

#include <mvgpt/gpt/config.h>        // the series' GPT
#include <mvgpt/gpt/model.h>
#include <mvgpt/gpt/kv_cache.h>
#include <mvgpt/gpt/generate.h>
#include <mvgpt/gpt/checkpoint.h>
#include <mvgpt/gpt/hf.h>            // Hugging Face folders, out and in
#include <mvgpt/gpt/gguf.h>          // GGUF models for llama.cpp, out and in
#include <mvgpt/gpt/llama2c.h>       // llama2.c model files in
#include <mvgpt/gpt/batches.h>
