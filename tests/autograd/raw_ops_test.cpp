// NOTE [ Raw ops and gradients ] (backends/ops_internal.h): in debug builds a raw op refuses an input
// that requires grad while grad mode is on, so a model cannot silently train nothing through one.
#include <gtest/gtest.h>

#include <string>

#include <mvgpt/autograd/engine.h>
#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/backends/ops_internal.h>
#include <mvgpt/tensor/grad_state.h>

namespace mvgpt {
namespace {

TEST(RawOps, RefuseAnInputThatRequiresGradWhileGradModeIsOn) {
  if (!ops::detail::raw_op_checks_enabled())
    GTEST_SKIP() << "the check is on in builds without NDEBUG (MVGPT_CHECK_RAW_OPS=AUTO), e.g. test.sh's sanitizer build";
  Tensor w = parameter(Tensor::from_vector<float>({1, 2, 3}));
  Tensor x = Tensor::from_vector<float>({4, 5, 6});
  try {
    ops::mul(w, x);
    ADD_FAILURE() << "ops::mul took a parameter while grad mode is on";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("ops::mul: a raw op (no gradient) was given a tensor that requires grad"),
              std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("call mvgpt::mul"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::reshape(w, {3, 1}), std::logic_error);  // views lose the gradient just as well
  EXPECT_THROW(ops::to(w, DType::f64), std::logic_error);
  EXPECT_THROW(ops::cat({x, w}, 0), std::logic_error);
  EXPECT_NO_THROW(ops::mul(x, x));  // nothing requires grad

  // The public op records the node instead; what it calls inside is its own business.
  Tensor y = mul(w, x);
  backward(sum(y));
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{4, 5, 6}));
  // Values read or changed outside the graph: under NoGradGuard, or from a detached handle.
  {
    NoGradGuard no_grad;
    EXPECT_NO_THROW(ops::mul(w, 2.0));
  }
  EXPECT_NO_THROW(ops::to(w.detach(), DType::f64));
  // Inside a differentiable op's own forward (autograd::InternalOps) the raw ops see its inputs.
  {
    const autograd::InternalOps internal;
    EXPECT_NO_THROW(ops::mul(w, x));
  }
  EXPECT_THROW(ops::mul(w, x), std::logic_error);  // and the scope ends with it
}

}  // namespace
}  // namespace mvgpt
