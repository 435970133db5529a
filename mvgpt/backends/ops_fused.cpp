// The fused ops not yet moved to units of mvgpt/fused/: argument checks, layout and dtype
// preparation, allocation and dispatch for rope, attention and cross-entropy. Kernels compute in float32 or float64:
// bfloat16 inputs are widened to float32 here and the results that mirror an input are cast back.
// Saved statistics (mean, rstd, lse, per-row losses) stay in the compute dtype.
#include <cmath>
#include <stdexcept>
#include <string>

#include <mvgpt/backends/deferred_checks.h>
#include <mvgpt/backends/fused_checks.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/backends/ops_internal.h>

namespace mvgpt::ops {
namespace {

using fused::cast_back;
using fused::check_grad_like;
using fused::compute_dtype;
using fused::fail;
using fused::prepared;
using fused::prepared_heads;
using fused::require_defined;
using fused::require_device;
using fused::require_floating;
using fused::require_int;
using fused::require_shape;
using fused::rows_shape;

}  // namespace

// ---------------------------------------------------------------- rope

Tensor rope(const Tensor& x, const Tensor& positions, double base, RopeLayout layout, bool inverse,
            double position_scale) {
  const char* op = "rope";
  require_floating(x, op, "x");
  if (x.dim() != 3 && x.dim() != 4)
    fail(op, "x must be (B, H, T, D) or (H, T, D), found shape " + to_string(x.shape()));
  const int64_t D = x.size(-1), T = x.size(-2);
  if (D % 2 != 0) fail(op, "head size " + std::to_string(D) + " is odd; rotary pairs need an even size");
  require_int(positions, op, "positions");
  require_device(positions, x, op, "positions");
  const bool shared = positions.dim() == 1 && positions.size(0) == T;
  const bool per_seq = x.dim() == 4 && positions.dim() == 2 && positions.size(0) == x.size(0) && positions.size(1) == T;
  if (!shared && !per_seq)
    fail(op, "positions must have shape [" + std::to_string(T) + "]" +
                 (x.dim() == 4 ? " or [" + std::to_string(x.size(0)) + ", " + std::to_string(T) + "]" : std::string()) +
                 " for x of shape " + to_string(x.shape()) + ", found " + to_string(positions.shape()));
  if (!(base > 0)) fail(op, "base must be > 0, found " + std::to_string(base));
  if (!(position_scale > 0) || !std::isfinite(position_scale))
    fail(op, "position_scale must be finite and > 0, found " + std::to_string(position_scale));
  const DType cd = compute_dtype(x.dtype());
  Tensor xc = x.dtype() == cd && (D <= 1 || x.strides()[x.dim() - 1] == 1) ? x : contiguous(to(x, cd));
  Tensor out = Tensor::empty(x.shape(), cd, x.device());
  backend_for(x.device()).rope(xc, contiguous(positions), base, layout, inverse, position_scale, out);
  return cast_back(out, x.dtype());
}

}  // namespace mvgpt::ops
