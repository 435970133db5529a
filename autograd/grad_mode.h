#pragma once
// Grad mode: whether differentiable ops record nodes. Per thread, on by default; NoGradGuard turns
// it off for a scope (inference, optimizer steps, and the engine's own backward pass).
namespace mvgpt::autograd {

bool grad_enabled();
void set_grad_enabled(bool enabled);

// Turns recording off for its lifetime and restores the previous mode after.
class NoGradGuard {
 public:
  NoGradGuard() : previous_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace mvgpt::autograd

namespace mvgpt {
using autograd::grad_enabled;
using autograd::NoGradGuard;
}  // namespace mvgpt
