#include <mvgpt/backends/reference.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace mvgpt::reference {

Tensor rope(const Tensor& x, const Tensor& positions, double base, RopeLayout layout, bool inverse,
            double position_scale) {
  const int64_t D = x.size(-1), half = D / 2;
  if (D % 2) throw std::invalid_argument("reference::rope: head size " + std::to_string(D) + " is odd");
  // angles (..., T, D/2) = positions * position_scale * base^(-2i/D), in float64 (the basic ops have
  // no sin/cos, so the cos/sin tables are filled elementwise from the angle tensor).
  Tensor pos = ops::mul(ops::to(positions, DType::f64), position_scale);
  Tensor inv_freq = ops::exp(ops::mul(ops::arange(0, double(half), 1, DType::f64), -2.0 * std::log(base) / double(D)));
  Tensor angles = ops::contiguous(ops::mul(ops::unsqueeze(pos, -1), inv_freq));
  if (inverse) angles = ops::neg(angles);
  Tensor cos_t = Tensor::empty(angles.shape(), DType::f64), sin_t = Tensor::empty(angles.shape(), DType::f64);
  for (int64_t i = 0; i < angles.numel(); ++i) {
    write_element(cos_t, i, std::cos(read_element(angles, i)));
    write_element(sin_t, i, std::sin(read_element(angles, i)));
  }
  const DType dt = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  cos_t = ops::to(cos_t, dt);
  sin_t = ops::to(sin_t, dt);
  if (positions.dim() == 2) {  // (B, T, D/2) -> (B, 1, T, D/2): shared by the heads
    cos_t = ops::unsqueeze(cos_t, 1);
    sin_t = ops::unsqueeze(sin_t, 1);
  }
  Tensor xw = ops::to(x, dt);
  Tensor out;
  if (layout == RopeLayout::split_half) {
    Tensor x1 = ops::narrow(xw, -1, 0, half), x2 = ops::narrow(xw, -1, half, half);
    out = ops::cat({ops::sub(ops::mul(x1, cos_t), ops::mul(x2, sin_t)),
                    ops::add(ops::mul(x1, sin_t), ops::mul(x2, cos_t))},
                   -1);
  } else {
    // (..., D) -> (..., D/2, 2): pairs (2i, 2i + 1).
    Shape pairs = xw.shape();
    pairs[pairs.size() - 1] = half;
    pairs.push_back(2);
    Tensor xr = ops::reshape(xw, pairs);
    Tensor x1 = ops::select(xr, -1, 0), x2 = ops::select(xr, -1, 1);
    out = ops::reshape(ops::stack({ops::sub(ops::mul(x1, cos_t), ops::mul(x2, sin_t)),
                                   ops::add(ops::mul(x1, sin_t), ops::mul(x2, cos_t))},
                                  -1),
                       xw.shape());
  }
  return ops::to(out, x.dtype());
}

}  // namespace mvgpt::reference
