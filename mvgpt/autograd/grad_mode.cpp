#include <mvgpt/autograd/grad_mode.h>

namespace mvgpt::autograd {

namespace {
thread_local bool t_grad_enabled = true;
}

bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }

}  // namespace mvgpt::autograd
