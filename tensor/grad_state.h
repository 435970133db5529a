#pragma once
// The per-thread autograd state that the layers below autograd must see (NOTE [ Raw ops and
// gradients ] in backends/ops_internal.h): grad mode's flag, and whether the caller is a
// differentiable op's own forward, the one place where raw ops may see inputs that require grad.
// autograd/grad_mode.h is the API; this is its storage.
namespace mvgpt::autograd {

namespace detail {
bool& grad_mode_flag();      // true unless a NoGradGuard is alive on this thread
int& internal_ops_depth();   // > 0 inside an InternalOps scope
}  // namespace detail

// Declared at the top of a differentiable op (and of the fused units' ops): the raw ops it calls
// see the op's inputs, which may require grad; the op itself records the node.
class InternalOps {
 public:
  InternalOps() { ++detail::internal_ops_depth(); }
  ~InternalOps() { --detail::internal_ops_depth(); }
  InternalOps(const InternalOps&) = delete;
  InternalOps& operator=(const InternalOps&) = delete;
};

}  // namespace mvgpt::autograd
