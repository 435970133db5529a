#pragma once
// Embedding: a lookup table, weight (num_embeddings, dim).
#include <mvgpt/nn/init.h>
#include <mvgpt/nn/module.h>

namespace mvgpt::nn {

class Embedding : public Module {
 public:
  // weight ~ N(0, init.std^2).
  Embedding(int64_t num_embeddings, int64_t embedding_dim, const Init& init = {});
  std::string type_name() const override { return "Embedding"; }

  // ids (...) int -> (..., dim); ids out of [0, num_embeddings) throw.
  Tensor forward(const Tensor& ids) const override;

  int64_t num_embeddings, embedding_dim;
  Tensor weight;  // (V, C)
};

}  // namespace mvgpt::nn
