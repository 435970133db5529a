#include <mvgpt/gpt/model.h>

#include <cmath>
#include <stdexcept>

#include <mvgpt/autograd/ops.h>
#include <mvgpt/fused/cross_entropy.h>
#include <mvgpt/nn/layer_norm.h>
#include <mvgpt/nn/mlp.h>
#include <mvgpt/nn/rms_norm.h>

namespace mvgpt::gpt {

namespace {

std::shared_ptr<nn::Module> make_norm(const GPTConfig& c, const nn::Init& init) {
  if (c.norm == NormKind::layernorm)
    return std::make_shared<nn::LayerNorm>(c.n_embd, c.norm_eps, /*affine=*/true, c.bias, init);
  return std::make_shared<nn::RMSNorm>(c.n_embd, c.norm_eps, /*affine=*/true, init);
}

// Redraws a residual projection's weight with the smaller GPT-2 scale, or zeros it (zero_init_proj).
// The draw happens either way, so the other weights of a seed are the same with and without zeros.
void reinit_weight(const Tensor& weight, const nn::Init& init, bool zero) {
  NoGradGuard no_grad;
  const Tensor drawn = nn::normal(weight.shape(), init.std, init);
  mvgpt::copy_(weight, zero ? nn::zeros(weight.shape(), init) : drawn);
}

}  // namespace

Block::Block(const GPTConfig& config, const nn::Init& init, const nn::Init& residual_init) : config_(config) {
  ln_1 = register_module("ln_1", make_norm(config, init));
  nn::AttentionConfig ac;
  ac.n_embd = config.n_embd;
  ac.n_head = config.n_head;
  ac.n_kv_head = config.kv_heads();
  ac.rope = config.rope;
  ac.rope_base = config.rope_effective_base();  // with rope_scaling applied
  ac.rope_layout = config.rope_layout;
  ac.rope_position_scale = config.rope_position_scale();
  ac.bias = config.bias;
  ac.dropout = config.dropout;
  ac.qk_norm = config.qk_norm;
  ac.qk_norm_eps = config.norm_eps;
  attn = register_module("attn", std::make_shared<nn::CausalSelfAttention>(ac, init));
  reinit_weight(attn->c_proj->weight, residual_init, config.zero_init_proj);
  ln_2 = register_module("ln_2", make_norm(config, init));
  if (config.mlp != MlpKind::swiglu) {
    auto m = std::make_shared<nn::MLP>(config.n_embd, config.hidden_size(), config.bias, init);
    m->activation = config.mlp == MlpKind::relu2 ? nn::Activation::relu2
                    : config.exact_gelu          ? nn::Activation::gelu_erf
                                                 : nn::Activation::gelu;
    reinit_weight(m->c_proj->weight, residual_init, config.zero_init_proj);
    mlp = register_module("mlp", m);
  } else {
    auto m = std::make_shared<nn::SwiGLU>(config.n_embd, config.hidden_size(), config.bias, init);
    reinit_weight(m->w2->weight, residual_init, config.zero_init_proj);
    mlp = register_module("mlp", m);
  }
}

Tensor Block::forward(const Tensor& x, const Tensor& positions, nn::KVCacheLayer* cache) const {
  // A norm hands its branch x as the branch's one product multiplies it, where that product is all
  // that reads it (NOTE [ Norms made for products ]): not beside an adapter, not SwiGLU's two.
  auto normed = [](const nn::Module& norm, const nn::Module& branch, const Tensor& in) {
    return branch.input_feeds_one_product() ? norm.forward_for_product(in) : norm.forward(in);
  };
  Tensor y = x + attn->forward(normed(*ln_1, *attn, x), positions, cache);  // (B, T, C)
  return y + dropout(mlp->forward(normed(*ln_2, *mlp, y)), config_.dropout, nullptr, is_training());
}

GPT::GPT(const GPTConfig& config, Generator* gen) : config_(config) {
  config.validate();
  nn::Init init;
  init.gen = gen;
  nn::Init residual_init = init;
  residual_init.std = init.std / std::sqrt(2.0 * double(config.n_layer));

  transformer = register_module("transformer", std::make_shared<nn::Module>());
  wte = transformer->register_module("wte", std::make_shared<nn::Embedding>(config.vocab_size, config.n_embd, init));
  if (!config.rope)
    wpe = transformer->register_module("wpe", std::make_shared<nn::Embedding>(config.block_size, config.n_embd, init));
  h = transformer->register_module("h", std::make_shared<nn::ModuleListOf<Block>>());
  for (int64_t i = 0; i < config.n_layer; ++i) h->push_back(std::make_shared<Block>(config, init, residual_init));
  ln_f = transformer->register_module("ln_f", make_norm(config, init));
  if (!config.tie_embeddings)
    lm_head = register_module("lm_head", std::make_shared<nn::Linear>(config.n_embd, config.vocab_size, false, init));
}

void GPT::set_rope_scaling(const RopeScaling& scaling) {
  GPTConfig c = config_;
  c.rope_scaling = scaling;
  c.validate();
  config_ = c;
  for (size_t i = 0; i < h->size(); ++i) {
    nn::AttentionConfig& ac = (*h)[i].attn->config;
    ac.rope_base = c.rope_effective_base();
    ac.rope_position_scale = c.rope_position_scale();
  }
}

void GPT::set_block_size(int64_t block_size) {
  if (block_size == config_.block_size) return;
  if (!config_.rope)
    throw std::invalid_argument("GPT::set_block_size: a learned-position model's block_size is the size of its table (" +
                                std::to_string(config_.block_size) + ")");
  GPTConfig c = config_;
  c.block_size = block_size;
  c.validate();
  config_ = c;
}

Tensor GPT::hidden(const Tensor& idx, KVCache* cache) const {
  if (idx.dim() != 2)
    throw std::invalid_argument("GPT::forward: expected token ids of shape (B, T), found " + mvgpt::to_string(idx.shape()));
  const int64_t T = idx.size(1);
  const int64_t start = cache ? cache->position : 0;
  if (cache && cache->num_layers() != size_t(config_.n_layer))
    throw std::invalid_argument("GPT::forward: the cache has " + std::to_string(cache->num_layers()) +
                                " layers, the model " + std::to_string(config_.n_layer));
  if (!config_.rope && start + T > config_.block_size)
    throw std::invalid_argument(
        "GPT::forward: positions " + std::to_string(start) + ".." + std::to_string(start + T - 1) +
        " are past the learned position table (block_size " + std::to_string(config_.block_size) +
        "); a learned-position model must re-run the last window instead of extending its cache");

  Tensor x = wte->forward(idx);  // (B, T, C)
  Tensor positions;
  // (T) on the model's device: rope() wants its positions where the activations are.
  if (config_.rope) positions = arange(double(start), double(start + T), 1, DType::i64, x.device());
  else x = x + narrow(wpe->weight, 0, start, T);                                               // (T, C) broadcast
  x = dropout(x, config_.dropout, nullptr, is_training());
  for (size_t i = 0; i < h->size(); ++i)
    x = (*h)[i].forward(x, positions, cache ? &cache->layer(i) : nullptr);
  if (cache) cache->position += T;
  return ln_f->forward(x);
}

Tensor GPT::head(const Tensor& x) const {
  if (lm_head) return lm_head->forward(x);
  // The tied head: x (B, T, C) @ wte (V, C)^T. As a linear of the parameter itself (not of a
  // transposed view), bf16 products reuse the weight's cached copy (NOTE [ Precision policy ]).
  return linear(x, wte->weight, Tensor());
}

Tensor GPT::forward(const Tensor& idx, KVCache* cache, bool last_only) const {
  Tensor x = hidden(idx, cache);
  if (last_only) x = narrow(x, 1, x.size(1) - 1, 1);
  return head(x);
}

Tensor GPT::loss(const Tensor& idx, const Tensor& targets) const {
  if (lm_head && lm_head->lora_A) return nn::CausalLM::loss(idx, targets);  // the adapter's path is Linear's
  const Tensor x = hidden(idx, nullptr);  // (B, T, C)
  if (lm_head) lm_head->check_input(x);
  // Rows against targets as the composition pairs them: any targets of B T ids.
  return linear_cross_entropy(reshape(x, {-1, x.size(-1)}), lm_head ? lm_head->weight : wte->weight,
                              reshape(targets, {-1}));
}

Tensor GPT::token_losses(const Tensor& idx, const Tensor& targets, KVCache* cache) const {
  Tensor logits = forward(idx, cache);
  Tensor losses = cross_entropy(reshape(logits, {-1, config_.vocab_size}), reshape(targets, {-1}), -100,
                                Reduction::none);
  return reshape(losses, targets.shape());
}

}  // namespace mvgpt::gpt
