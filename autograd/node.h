#pragma once
// The recorded graph. Every differentiable op that ran with an input requiring grad leaves one Node
// behind (its output's grad_fn). A Node knows how to turn the gradient of its output into one
// gradient per input, and holds an Edge per input pointing at the node that produced it.
//
// NOTE [ Graph ownership ]
// Outputs own their node (TensorImpl::grad_fn); nodes own the nodes of their inputs through edges.
// Nothing points back from a node to its output, and saved tensors are kept without their grad_fn,
// so the graph is acyclic and dies with the last tensor that refers to it. Leaves that require grad
// are reached through an AccumulateGrad node that holds only a weak reference to the leaf.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <mvgpt/tensor/tensor.h>

namespace mvgpt::autograd {

class Node;

// Where the gradient of one input goes, and what it must look like.
struct Edge {
  std::shared_ptr<Node> node;  // null: the input needs no gradient
  Shape shape;                 // the input's shape, dtype and device, to check the gradient
  DType dtype = DType::f32;
  Device device;
};

// A gradient that covers one block of its input and is zero elsewhere: the block starts at `start`
// along `axis` (both normalized: not negative) and is as long as the gradient is there (narrow's and
// select's backward).
struct GradientBlock {
  int axis = 0;
  int64_t start = 0;
};

class Node {
 public:
  Node();
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  virtual const char* name() const = 0;
  // One gradient per input (edge), undefined where the input needs none. Runs under no-grad.
  virtual std::vector<Tensor> backward(const Tensor& grad_output) = 0;
  // Set where backward returns, for input k, only a block of its gradient (NOTE [ Gradient blocks ]
  // in engine.cpp): the engine writes it into that block of the input's gradient.
  virtual std::optional<GradientBlock> gradient_block(size_t /*k*/) const { return std::nullopt; }
  // Drops saved tensors and edges so memory returns; the node cannot run backward again.
  virtual void release();

  const std::vector<Edge>& next_edges() const { return edges_; }
  void set_next_edges(std::vector<Edge> edges) { edges_ = std::move(edges); }
  // Increases with creation order on each thread: later ops run first in backward.
  uint64_t sequence_nr() const { return sequence_nr_; }
  bool released() const { return released_; }

 protected:
  std::vector<Edge> edges_;
  bool released_ = false;

 private:
  uint64_t sequence_nr_;
};

// The sink for a leaf that requires grad: adds the incoming gradient into leaf.grad (allocated on
// first use). One per leaf, shared by every graph that uses it; never released.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const Tensor& leaf);
  const char* name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override;
  void release() override {}
  // The leaf, or undefined when it has died.
  Tensor leaf() const;

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

// The AccumulateGrad node of a leaf that requires grad (created on first use, then reused).
std::shared_ptr<Node> grad_accumulator(const Tensor& leaf);

// The edge for an op input: to its grad_fn, to its AccumulateGrad, or null when it needs no grad.
Edge edge_to(const Tensor& input);

}  // namespace mvgpt::autograd
