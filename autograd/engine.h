#pragma once
// Reverse-mode differentiation over the recorded graph.
#include <vector>

#include <mvgpt/autograd/node.h>
#include <mvgpt/tensor/tensor.h>

namespace mvgpt::autograd {

// Computes the gradient of `root` with respect to every leaf that requires grad in its graph and adds
// it into the leaves' .grad. `grad` is d(something)/d(root), of root's shape; it may be omitted only
// when root has one element (it is then 1). The graph is freed afterwards (saved tensors and edges
// dropped) unless retain_graph; a second backward through a freed graph throws.
void backward(const Tensor& root, const Tensor& grad = {}, bool retain_graph = false);

// The gradients of `output` with respect to `inputs` (leaves or intermediate results), returned
// instead of accumulated: no leaf's .grad changes. An input that `output` does not depend on gets
// an undefined tensor.
std::vector<Tensor> grad(const Tensor& output, const std::vector<Tensor>& inputs, const Tensor& grad_output = {},
                         bool retain_graph = false);

// Clears the gradient of each tensor (set_to_none: the next backward allocates a fresh one), or
// fills it with zeros in place when set_to_none is false.
void zero_grad(const std::vector<Tensor>& tensors, bool set_to_none = true);

}  // namespace mvgpt::autograd

namespace mvgpt {
using autograd::backward;
using autograd::zero_grad;
}  // namespace mvgpt
