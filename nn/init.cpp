#include <mvgpt/nn/init.h>

#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/autograd/ops.h>

namespace mvgpt::nn {

Tensor normal(const Shape& shape, double std, const Init& init) {
  NoGradGuard no_grad;
  // Draw in f32/f64 (what the random kernels produce), then cast: bf16 weights round f32 samples.
  DType draw = init.dtype == DType::f64 ? DType::f64 : DType::f32;
  Tensor w = mvgpt::mul(mvgpt::randn(shape, draw, init.device, init.gen), std);
  return w.dtype() == init.dtype ? w : mvgpt::to(w, init.dtype);
}

Tensor zeros(const Shape& shape, const Init& init) { return mvgpt::zeros(shape, init.dtype, init.device); }
Tensor ones(const Shape& shape, const Init& init) { return mvgpt::ones(shape, init.dtype, init.device); }

}  // namespace mvgpt::nn
