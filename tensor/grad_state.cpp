#include <mvgpt/tensor/grad_state.h>

namespace mvgpt::autograd::detail {

namespace {
thread_local bool t_grad_mode = true;
thread_local int t_internal_depth = 0;
}  // namespace

bool& grad_mode_flag() { return t_grad_mode; }
int& internal_ops_depth() { return t_internal_depth; }

}  // namespace mvgpt::autograd::detail
