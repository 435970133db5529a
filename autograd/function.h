#pragma once
// How a differentiable op records itself: compute the forward with raw ops, and if any input needs
// a gradient, attach a node whose backward is a lambda beside the forward:
//
//   Tensor exp(const Tensor& x) {
//     Tensor y = ops::exp(x);
//     if (!autograd::needs_grad(x)) return y;
//     return autograd::record("exp", y, {autograd::edge_to(x)},
//                             [sy = autograd::SavedTensor(y)](const Tensor& g) -> autograd::Grads {
//                               return {ops::mul(g, sy.unpack("exp"))};
//                             });
//   }
//
// The lambda may capture SavedTensors, shapes and scalars, never a Tensor with a grad_fn (that
// would keep the graph alive or make a cycle). release() destroys the lambda and what it captured.
#include <optional>
#include <utility>
#include <vector>

#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/autograd/node.h>
#include <mvgpt/autograd/saved_tensor.h>
#include <mvgpt/tensor/grad_state.h>  // InternalOps: NOTE [ Raw ops and gradients ]

namespace mvgpt::autograd {

using Grads = std::vector<Tensor>;

template <class F>
class LambdaNode final : public Node {
 public:
  LambdaNode(const char* name, F fn) : name_(name), fn_(std::move(fn)) {}
  const char* name() const override { return name_; }
  std::vector<Tensor> backward(const Tensor& grad_output) override { return (*fn_)(grad_output); }
  void release() override {
    fn_.reset();
    Node::release();
  }

 private:
  const char* name_;
  std::optional<F> fn_;
};

// True when grad mode is on and any of the (defined) inputs requires grad.
template <class... Ts>
bool needs_grad(const Ts&... inputs) {
  return grad_enabled() && (inputs.requires_grad() || ...);
}
bool needs_grad(const std::vector<Tensor>& inputs);

// Makes `out` (a fresh result of op) the output of a new node; returns it. If `out` shares its
// handle with an input (an op that returned its argument), a new handle is made first.
Tensor attach(Tensor out, std::shared_ptr<Node> node);

template <class F>
Tensor record(const char* op, Tensor out, std::vector<Edge> edges, F&& backward) {
  auto node = std::make_shared<LambdaNode<std::decay_t<F>>>(op, std::forward<F>(backward));
  node->set_next_edges(std::move(edges));
  return attach(std::move(out), std::move(node));
}

// A 0-d tensor of value v with like's dtype and device (for scalar factors in formulas).
Tensor scalar_like(const Tensor& like, double v);

}  // namespace mvgpt::autograd
