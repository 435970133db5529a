#include <mvgpt/nn/dropout.h>

#include <mvgpt/autograd/ops.h>

namespace mvgpt::nn {

Dropout::Dropout(double prob, Generator* g) : p(prob), gen(g) {
  if (!(prob >= 0 && prob < 1))
    throw std::invalid_argument("Dropout: p must be in [0, 1), found " + std::to_string(prob));
}

Tensor Dropout::forward(const Tensor& x) const {
  if (!is_training() || p == 0) return x;
  return dropout(x, p, gen, true);
}

}  // namespace mvgpt::nn
