#include <mvgpt/autograd/grad_mode.h>

#include <mvgpt/tensor/grad_state.h>

namespace mvgpt::autograd {

bool grad_enabled() { return detail::grad_mode_flag(); }
void set_grad_enabled(bool enabled) { detail::grad_mode_flag() = enabled; }

}  // namespace mvgpt::autograd
