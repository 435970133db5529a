#include <mvgpt/autograd/engine.h>

#include <algorithm>
#include <optional>
#include <queue>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/backends/ops.h>

namespace mvgpt::autograd {

namespace {

// The gradient backward starts from: the given one (checked), or 1 for a one-element root.
Tensor root_gradient(const Tensor& root, const Tensor& grad, const char* caller) {
  if (!grad.defined()) {
    if (root.numel() != 1)
      throw std::invalid_argument(std::string(caller) + ": the root has shape " + to_string(root.shape()) +
                                  "; only a one-element root gets an implicit gradient of 1, pass a gradient "
                                  "of the root's shape");
    return ops::ones(root.shape(), root.dtype(), root.device());
  }
  if (!(grad.shape() == root.shape()) || grad.dtype() != root.dtype() || !(grad.device() == root.device()))
    throw std::invalid_argument(std::string(caller) + ": the gradient is " + grad.describe() + ", the root is " +
                                root.describe() + "; they must match");
  // A handle of our own, so that the caller's tensor can never become a leaf's .grad.
  return grad.as_strided(grad.shape(), grad.strides(), grad.offset());
}

[[noreturn]] void throw_freed(const Node& n, const char* caller) {
  throw std::runtime_error(std::string(caller) + ": the graph was freed by a previous backward (at node '" +
                           n.name() + "'); pass retain_graph=true to the first backward to run backward again");
}

void check_gradient(const Node& n, size_t k, const Edge& e, const Tensor& g, const std::optional<GradientBlock>& block) {
  bool fits = g.dtype() == e.dtype && g.device() == e.device && g.dim() == int(e.shape.size()) &&
              (!block || (block->axis >= 0 && block->axis < g.dim()));
  for (int d = 0; fits && d < g.dim(); ++d) {
    const int64_t want = e.shape[size_t(d)];
    fits = block && d == block->axis ? block->start >= 0 && block->start + g.size(d) <= want : g.size(d) == want;
  }
  if (fits) return;
  throw std::logic_error(std::string("backward: node '") + n.name() + "' returned a gradient " + g.describe() +
                         (block ? " for the block at " + std::to_string(block->start) + " along axis " +
                                      std::to_string(block->axis) + " of"
                                : " for") +
                         " input " + std::to_string(k) + ", which is " + std::string(dtype_name(e.dtype)) +
                         to_string(e.shape) + " " + e.device.str());
}

// NOTE [ Gradient blocks ]
// The pieces of a split (q, k and v of one projection) each send back a gradient for one block of
// their input. Made whole by each piece (zeros around the block) and then summed, they cost a zero
// fill, a copy and an add over the whole input per piece; the engine instead writes each block into
// one buffer, leaving the rest unwritten, and zero-fills only what no block covered when the buffer
// is complete. While only disjoint blocks along one axis have arrived, each is copied into place;
// anything else (an overlapping block, a block along another axis, a whole gradient) first
// completes the buffer and is then added. A whole gradient that arrived first is a node's result,
// which others may hold: a block is written into a clone of it, never into it.

// The gradient gathered for one node while the nodes that use its output run backward.
struct GradBuffer {
  Tensor sum;
  bool owned = false;  // no one else holds sum (made here, or a sum written in place): blocks may be written into it
  int block_axis = -1;  // >= 0 while sum is written only in `blocks` along this axis
  std::vector<std::pair<int64_t, int64_t>> blocks;  // [start, end), disjoint
};

// Zero-fills what no block wrote.
void complete(GradBuffer& buf) {
  if (buf.block_axis < 0) return;
  std::sort(buf.blocks.begin(), buf.blocks.end());
  int64_t at = 0;
  for (auto [start, end] : buf.blocks) {
    if (start > at) ops::fill_(ops::narrow(buf.sum, buf.block_axis, at, start - at), 0.0);
    at = end;
  }
  const int64_t size = buf.sum.size(buf.block_axis);
  if (size > at) ops::fill_(ops::narrow(buf.sum, buf.block_axis, at, size - at), 0.0);
  buf.block_axis = -1;
  buf.blocks.clear();
}

void add_gradient(GradBuffer& buf, const Edge& e, Tensor g, const std::optional<GradientBlock>& block) {
  if (!block) {
    if (!buf.sum.defined()) {
      buf.sum = std::move(g);
      return;
    }
    complete(buf);
    buf.sum = ops::accumulate(std::move(buf.sum), std::move(g));  // NOTE [ Sums gathered in place ]
    buf.owned = true;
    return;
  }
  const int axis = block->axis;
  const int64_t start = block->start, end = start + g.size(axis);
  if (!buf.sum.defined()) {
    buf.sum = ops::empty(e.shape, e.dtype, e.device);
    buf.owned = true;
    buf.block_axis = axis;
  }
  if (!buf.owned) {
    buf.sum = ops::clone(buf.sum);
    buf.owned = true;
  }
  Tensor target = ops::narrow(buf.sum, axis, start, end - start);
  bool disjoint = buf.block_axis == axis;
  for (auto [s, t] : buf.blocks) disjoint = disjoint && (end <= s || t <= start);
  if (disjoint) {
    ops::copy_(target, g);
    buf.blocks.emplace_back(start, end);
    return;
  }
  complete(buf);
  ops::copy_(target, ops::add(target, g));
}

// Runs backward from root. With `capture` (for grad()), the gradients reaching the capture nodes
// are returned in `captured` instead of running AccumulateGrad nodes.
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph, const char* caller,
                  const std::vector<Node*>* capture, std::vector<Tensor>* captured) {
  if (!root.defined()) throw std::invalid_argument(std::string(caller) + ": the root tensor is undefined");
  if (!root.requires_grad())
    throw std::invalid_argument(std::string(caller) + ": the root " + root.describe() +
                                " does not require grad (no input of the ops that made it requires grad, or "
                                "they ran under NoGradGuard)");
  NoGradGuard no_grad;
  std::shared_ptr<Node> root_node = root.grad_fn() ? root.grad_fn() : grad_accumulator(root);
  Tensor root_grad = root_gradient(root, grad, caller);

  // Discover the graph (iteratively: a GPT graph is thousands of nodes deep) and count, for each
  // node, the edges that lead into it.
  // Owning handles: releasing a node drops its edges, which may hold the only reference to the next.
  std::vector<std::shared_ptr<Node>> nodes{root_node};
  std::vector<int> pending{0};
  std::unordered_map<Node*, int> index;
  index.reserve(256);
  index.emplace(root_node.get(), 0);
  std::vector<Node*> stack{root_node.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (n->released()) throw_freed(*n, caller);
    for (const Edge& e : n->next_edges()) {
      if (!e.node) continue;
      auto [it, inserted] = index.emplace(e.node.get(), int(nodes.size()));
      if (inserted) {
        nodes.push_back(e.node);
        pending.push_back(0);
        stack.push_back(e.node.get());
      }
      ++pending[size_t(it->second)];
    }
  }

  // Walk in reverse topological order; among ready nodes the most recently created runs first.
  std::vector<GradBuffer> buffers(nodes.size());
  buffers[0].sum = std::move(root_grad);
  auto later = [&](int a, int b) { return nodes[size_t(a)]->sequence_nr() < nodes[size_t(b)]->sequence_nr(); };
  std::priority_queue<int, std::vector<int>, decltype(later)> ready(later);
  ready.push(0);
  std::vector<Tensor> grads;
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    Node* n = nodes[size_t(i)].get();
    complete(buffers[size_t(i)]);
    Tensor g = std::move(buffers[size_t(i)].sum);
    bool is_sink = dynamic_cast<AccumulateGrad*>(n) != nullptr;
    if (capture) {
      for (size_t c = 0; c < capture->size(); ++c)
        if ((*capture)[c] == n) (*captured)[c] = g;
    }
    const std::vector<Edge>& edges = n->next_edges();
    if (g.defined() && !(capture && is_sink)) {
      grads = n->backward(g);
      if (!is_sink && grads.size() != edges.size())
        throw std::logic_error(std::string("backward: node '") + n->name() + "' returned " +
                               std::to_string(grads.size()) + " gradients for " + std::to_string(edges.size()) +
                               " inputs");
      // One handle per buffer: a gradient passed to two inputs (add) must not become one shared
      // .grad. Compared before any is moved into its buffer.
      for (size_t k = 1; k < grads.size(); ++k)
        for (size_t j = 0; j < k && grads[k].defined(); ++j)
          if (grads[j].impl() == grads[k].impl()) {
            grads[k] = grads[k].as_strided(grads[k].shape(), grads[k].strides(), grads[k].offset());
            break;
          }
      for (size_t k = 0; k < grads.size(); ++k) {
        const Edge& e = edges[k];
        if (!e.node || !grads[k].defined()) continue;
        const std::optional<GradientBlock> block = n->gradient_block(k);
        check_gradient(*n, k, e, grads[k], block);
        add_gradient(buffers[size_t(index.at(e.node.get()))], e, std::move(grads[k]), block);
      }
      grads.clear();
    }
    for (const Edge& e : edges)
      if (e.node) {
        int j = index.at(e.node.get());
        if (--pending[size_t(j)] == 0) ready.push(j);
      }
    if (!retain_graph) n->release();
  }
}

}  // namespace

void backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
  run_backward(root, grad, retain_graph, "backward", nullptr, nullptr);
}

std::vector<Tensor> grad(const Tensor& output, const std::vector<Tensor>& inputs, const Tensor& grad_output,
                         bool retain_graph) {
  std::vector<Node*> capture(inputs.size(), nullptr);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined() || !t.requires_grad()) continue;
    capture[i] = t.grad_fn() ? t.grad_fn().get() : grad_accumulator(t).get();
  }
  std::vector<Tensor> captured(inputs.size());
  run_backward(output, grad_output, retain_graph, "grad", &capture, &captured);
  return captured;
}

void zero_grad(const std::vector<Tensor>& tensors, bool set_to_none) {
  for (const Tensor& t : tensors) {
    if (!t.defined() || !t.grad().defined()) continue;
    if (set_to_none) t.set_grad(Tensor());
    else ops::fill_(t.grad(), 0.0);
  }
}

}  // namespace mvgpt::autograd
