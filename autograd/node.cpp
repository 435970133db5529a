#include <mvgpt/autograd/node.h>

#include <stdexcept>
#include <string>

#include <mvgpt/autograd/function.h>
#include <mvgpt/backends/ops.h>

namespace mvgpt::autograd {

namespace {
thread_local uint64_t t_next_sequence_nr = 0;
}

Node::Node() : sequence_nr_(t_next_sequence_nr++) {}

// A chain of thousands of nodes would be destroyed recursively (each node's edges own the next),
// which can overflow the stack. Instead, nodes about to die with this one are queued and destroyed
// one at a time by the outermost destructor on this thread.
namespace {
thread_local std::vector<std::shared_ptr<Node>>* t_dying = nullptr;  // the outermost destructor's queue
}

Node::~Node() {
  if (t_dying) {
    for (Edge& e : edges_)
      if (e.node && e.node.use_count() == 1) t_dying->push_back(std::move(e.node));
    return;
  }
  std::vector<std::shared_ptr<Node>> dying;
  for (Edge& e : edges_)
    if (e.node && e.node.use_count() == 1) dying.push_back(std::move(e.node));
  if (dying.empty()) return;
  t_dying = &dying;
  while (!dying.empty()) {
    std::shared_ptr<Node> n = std::move(dying.back());
    dying.pop_back();
    n.reset();  // queues its own inputs
  }
  t_dying = nullptr;
}

void Node::release() {
  edges_.clear();
  edges_.shrink_to_fit();
  released_ = true;
}

AccumulateGrad::AccumulateGrad(const Tensor& leaf) : leaf_(leaf.impl_ptr()) {}

Tensor AccumulateGrad::leaf() const {
  auto impl = leaf_.lock();
  return impl ? Tensor(std::move(impl)) : Tensor();
}

std::vector<Tensor> AccumulateGrad::backward(const Tensor& grad_output) {
  Tensor leaf = this->leaf();
  if (!leaf.defined() || !grad_output.defined()) return {};
  if (!(grad_output.shape() == leaf.shape()))
    throw std::logic_error("AccumulateGrad: gradient of shape " + to_string(grad_output.shape()) +
                           " for a leaf of shape " + to_string(leaf.shape()));
  const Tensor& current = leaf.grad();
  if (current.defined()) {
    leaf.set_grad(ops::add(current, grad_output));
    return {};
  }
  // Keep the gradient itself when nothing else refers to its memory and it is dense; otherwise copy
  // it, so that leaf.grad never aliases another leaf's gradient or the caller's tensor.
  const auto& storage = grad_output.storage();
  bool owned = storage.use_count() == 1 && grad_output.is_contiguous() && grad_output.offset() == 0 &&
               grad_output.nbytes() == storage->nbytes();
  leaf.set_grad(owned ? grad_output : ops::clone(grad_output));
  return {};
}

std::shared_ptr<Node> grad_accumulator(const Tensor& leaf) {
  TensorImpl* impl = leaf.impl();
  if (auto existing = impl->grad_accumulator.lock()) return existing;
  auto node = std::make_shared<AccumulateGrad>(leaf);
  impl->grad_accumulator = node;
  return node;
}

Edge edge_to(const Tensor& input) {
  if (!input.defined() || !input.requires_grad()) return {};
  const auto& fn = input.grad_fn();
  return Edge{fn ? fn : grad_accumulator(input), input.shape(), input.dtype(), input.device()};
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.requires_grad()) return true;
  return false;
}

Tensor attach(Tensor out, std::shared_ptr<Node> node) {
  // A handle someone else holds (an input returned as is) must not grow a grad_fn.
  if (out.impl_ptr().use_count() != 1 || out.grad_fn() || out.requires_grad())
    out = out.as_strided(out.shape(), out.strides(), out.offset());
  if (!is_floating(out.dtype()))
    throw std::logic_error(std::string(node->name()) + ": a recorded op must have a floating-point output, found " +
                           std::string(dtype_name(out.dtype())));
  TensorImpl* impl = out.impl();
  impl->grad_fn = std::move(node);
  impl->requires_grad = true;
  return out;
}

Tensor scalar_like(const Tensor& like, double v) { return ops::full(Shape{}, v, like.dtype(), like.device()); }

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  data_ = t.as_strided(t.shape(), t.strides(), t.offset());
  version_ = t.version();
}

Tensor SavedTensor::unpack(const char* op) const {
  if (!data_.defined()) return data_;
  uint64_t now = data_.version();
  if (now != version_)
    throw std::runtime_error(std::string(op) + ": a tensor saved for backward was modified in place (version " +
                             std::to_string(now) + ", saved at " + std::to_string(version_) +
                             "); clone it before writing in place");
  return data_;
}

}  // namespace mvgpt::autograd
