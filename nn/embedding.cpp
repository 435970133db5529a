#include <mvgpt/nn/embedding.h>

#include <mvgpt/autograd/ops.h>

namespace mvgpt::nn {

Embedding::Embedding(int64_t v, int64_t c, const Init& init) : num_embeddings(v), embedding_dim(c) {
  if (v < 0 || c < 0)
    throw std::invalid_argument("Embedding: negative size (" + std::to_string(v) + ", " + std::to_string(c) + ")");
  weight = register_parameter("weight", normal({v, c}, init.std, init));
}

Tensor Embedding::forward(const Tensor& ids) const { return embedding(weight, ids); }

}  // namespace mvgpt::nn
