#include <mvgpt/backends/reference.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace mvgpt::reference {

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  Tensor centred = ops::sub(x, ops::mean(x, {-1}, true));
  Tensor var = ops::mean(ops::square(centred), {-1}, true);  // biased, as PyTorch
  Tensor y = ops::mul(centred, ops::rsqrt(ops::add(var, eps)));
  if (weight) y = ops::mul(y, weight);
  if (bias) y = ops::add(y, bias);
  return y;
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  Tensor y = ops::mul(x, ops::rsqrt(ops::add(ops::mean(ops::square(x), {-1}, true), eps)));
  return weight ? ops::mul(y, weight) : y;
}

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

ops::AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal) {
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3), Hkv = k.size(1), Tk = k.size(2);
  // Grouped kv heads: repeat each kv head for its H / Hkv query heads.
  auto repeat_heads = [&](const Tensor& t) {
    Tensor e = ops::expand(ops::unsqueeze(t, 2), {B, Hkv, H / Hkv, Tk, D});
    return ops::reshape(e, {B, H, Tk, D});
  };
  Tensor kr = repeat_heads(k), vr = repeat_heads(v);
  Tensor scores = ops::mul(ops::matmul(q, ops::transpose(kr, -1, -2)), scale);  // (B, H, Tq, Tk)
  if (causal) {
    // Query i sits at key position (Tk - Tq) + i and must not see later keys.
    Tensor query_pos = ops::reshape(ops::arange(double(Tk - Tq), double(Tk), 1, DType::i64), {Tq, 1});
    Tensor key_pos = ops::reshape(ops::arange(0, double(Tk), 1, DType::i64), {1, Tk});
    scores = ops::masked_fill(scores, ops::gt(key_pos, query_pos), -std::numeric_limits<double>::infinity());
  }
  Tensor lse = ops::logsumexp(scores, {-1});
  Tensor out = ops::matmul(ops::softmax(scores, -1), vr);
  return {out, lse};
}

ops::CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  Tensor ignored = ops::eq(targets, ops::full_like(targets, double(ignore_index)));
  Tensor safe = ops::where(ignored, ops::zeros_like(targets), targets);  // any valid class for ignored rows
  Tensor picked = ops::squeeze(ops::gather(ops::log_softmax(logits, -1), 1, ops::unsqueeze(safe, 1)), 1);
  Tensor losses = ops::where(ignored, ops::zeros_like(picked), ops::neg(picked));
  return {losses, ops::logsumexp(logits, {-1})};
}

}  // namespace mvgpt::reference
