// Fused ops (their forward and backward are kernels of their own) and dropout.
#include <mvgpt/autograd/op_impl.h>

namespace mvgpt {

namespace {

// The kernels normalise rows of (N, C): view x's leading axes as one.
Tensor rows(const Tensor& x, const char* op) {
  if (x.dim() < 1) throw std::invalid_argument(std::string(op) + ": expected at least 1 dimension, found a scalar");
  return ops::reshape(x, {-1, x.size(-1)});
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  Tensor x2 = rows(x, "layer_norm");  // (N, C)
  ops::NormResult r = ops::layer_norm(x2, weight, bias, eps);
  Tensor y = ops::reshape(r.y, x.shape());
  if (!needs_grad(x, weight, bias)) return y;
  return record("layer_norm", std::move(y), {edge_to(x), edge_to(weight), edge_to(bias)},
                [sx = SavedTensor(x2), sw = SavedTensor(weight), sb = SavedTensor(bias), smean = SavedTensor(r.mean),
                 srstd = SavedTensor(r.rstd), in = x.shape()](const Tensor& g) -> Grads {
                  const char* op = "layer_norm";
                  Tensor x2 = sx.unpack(op);
                  ops::NormResult saved{Tensor(), smean.unpack(op), srstd.unpack(op)};
                  auto d = ops::layer_norm_backward(ops::reshape(g, x2.shape()), x2, sw.unpack(op), sb.unpack(op), saved);
                  return {ops::reshape(d[0], in), d[1], d[2]};
                });
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  Tensor x2 = rows(x, "rms_norm");  // (N, C)
  ops::NormResult r = ops::rms_norm(x2, weight, eps);
  Tensor y = ops::reshape(r.y, x.shape());
  if (!needs_grad(x, weight)) return y;
  return record("rms_norm", std::move(y), {edge_to(x), edge_to(weight)},
                [sx = SavedTensor(x2), sw = SavedTensor(weight), srstd = SavedTensor(r.rstd),
                 in = x.shape()](const Tensor& g) -> Grads {
                  const char* op = "rms_norm";
                  Tensor x2 = sx.unpack(op);
                  ops::NormResult saved{Tensor(), Tensor(), srstd.unpack(op)};
                  auto d = ops::rms_norm_backward(ops::reshape(g, x2.shape()), x2, sw.unpack(op), saved);
                  return {ops::reshape(d[0], in), d[1]};
                });
}

Tensor rope(const Tensor& x, const Tensor& positions, double base, RopeLayout layout, double position_scale) {
  Tensor y = ops::rope(x, positions, base, layout, /*inverse=*/false, position_scale);
  if (!needs_grad(x)) return y;
  // A rotation's transpose is the rotation by the opposite angle.
  return record("rope", std::move(y), {edge_to(x)},
                [sp = SavedTensor(positions), base, layout, position_scale](const Tensor& g) -> Grads {
                  return {ops::rope(g, sp.unpack("rope"), base, layout, /*inverse=*/true, position_scale)};
                });
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal) {
  ops::AttentionResult r = ops::attention(q, k, v, scale, causal);
  if (!needs_grad(q, k, v)) return r.out;
  Tensor out = r.out;
  return record("attention", std::move(r.out), {edge_to(q), edge_to(k), edge_to(v)},
                [sq = SavedTensor(q), sk = SavedTensor(k), sv = SavedTensor(v), so = SavedTensor(out),
                 sl = SavedTensor(r.lse), scale, causal](const Tensor& g) -> Grads {
                  const char* op = "attention";
                  ops::AttentionResult saved{so.unpack(op), sl.unpack(op)};
                  return ops::attention_backward(g, sq.unpack(op), sk.unpack(op), sv.unpack(op), saved, scale, causal);
                });
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Reduction reduction) {
  Shape want = logits.dim() >= 1 ? logits.shape() : Shape{};
  if (logits.dim() >= 1) want.erase(want.size() - 1);
  if (logits.dim() < 1 || !(targets.shape() == want))
    throw std::invalid_argument("cross_entropy: expected logits (..., V) and targets (...), found logits " +
                                to_string(logits.shape()) + " and targets " + to_string(targets.shape()));
  Tensor l2 = rows(logits, "cross_entropy");       // (N, V)
  Tensor t2 = ops::reshape(targets, {l2.size(0)});  // (N)
  ops::CrossEntropyResult r = ops::cross_entropy(l2, t2, ignore_index);
  const int64_t n = l2.size(0);
  // d out / d sum(losses): 1 / count for the mean, as a () float64 tensor on the device, so the mean
  // needs no host read (a synchronisation per step on a GPU); undefined (1) for none and sum.
  Tensor scale;
  Tensor y;
  switch (reduction) {
    case Reduction::none: y = ops::reshape(r.losses, targets.shape()); break;
    case Reduction::sum: y = ops::sum(r.losses); break;
    case Reduction::mean: {
      // Mean over the tokens that count; 0 / 0 = NaN when none does, as PyTorch. The scale is
      // rounded to the losses' dtype before the product, as a scalar multiply would.
      Tensor counted = ops::to(ops::ne(t2, ops::full(Shape{}, double(ignore_index), t2.dtype(), t2.device())), DType::f64);
      scale = ops::unary(UnaryOp::rdiv_scalar, ops::sum(counted), 1.0);
      y = ops::mul(ops::sum(r.losses), ops::to(scale, r.losses.dtype()));
      break;
    }
  }
  if (!needs_grad(logits)) return y;
  return record("cross_entropy", std::move(y), {edge_to(logits)},
                [sl = SavedTensor(l2), st = SavedTensor(t2), slse = SavedTensor(r.lse), ignore_index, reduction, scale,
                 n, in = logits.shape()](const Tensor& g) -> Grads {
                  const char* op = "cross_entropy";
                  Tensor scaled = scale.defined() ? ops::mul(g, ops::to(scale, g.dtype())) : g;
                  Tensor dlosses = reduction == Reduction::none ? ops::reshape(g, {n})
                                                                : ops::expand(ops::reshape(scaled, {1}), {n});
                  ops::CrossEntropyResult saved{Tensor(), slse.unpack(op)};
                  Tensor d = ops::cross_entropy_backward(dlosses, sl.unpack(op), st.unpack(op), saved, ignore_index);
                  return {ops::reshape(d, in)};
                });
}

Tensor dropout(const Tensor& x, double p, Generator* gen, bool training) {
  if (!(p >= 0 && p <= 1)) throw std::invalid_argument("dropout: p must be in [0, 1], found " + std::to_string(p));
  if (!training || p == 0) return x;
  ops::check_floating(x, "dropout");
  // keep / (1 - p) for each element, with the input's dtype; all zeros when p = 1.
  DType draw = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor u = ops::rand(x.shape(), draw, x.device(), gen);
  Tensor keep = ops::to(ops::ge(u, ops::full(Shape{}, p, draw, x.device())), x.dtype());
  Tensor scale = p < 1 ? ops::mul(keep, 1.0 / (1.0 - p)) : keep;
  Tensor y = ops::mul(x, scale);
  if (!needs_grad(x)) return y;
  return record("dropout", std::move(y), {edge_to(x)},
                [sm = SavedTensor(scale)](const Tensor& g) -> Grads { return {ops::mul(g, sm.unpack("dropout"))}; });
}

// --- gradient checks ---

namespace autograd {

namespace {
Tensor positions(std::vector<int64_t> p) { return Tensor::from_vector(p); }
}  // namespace

void register_fused_gradchecks(OpRegistry& r) {
  using gc::indices;
  using gc::input;
  r.add("layer_norm", {{"3-d with weight and bias", {input({2, 3, 4}), input({4}), input({4})},
                        [](const Inputs& x) { return layer_norm(x[0], x[1], x[2], 1e-5); }},
                       {"no affine, transposed", {gc::transposed({3, 5})},
                        [](const Inputs& x) { return layer_norm(x[0], Tensor(), Tensor(), 1e-5); }}});
  r.add("rms_norm", {{"3-d with weight", {input({2, 2, 4}), input({4})},
                      [](const Inputs& x) { return rms_norm(x[0], x[1], 1e-6); }},
                     {"sliced, no weight", {gc::sliced({3, 4})},
                      [](const Inputs& x) { return rms_norm(x[0], Tensor(), 1e-6); }}});
  r.add("rope", {{"split half (B, H, T, D)", {input({1, 2, 3, 4})},
                  [](const Inputs& x) { return rope(x[0], positions({0, 1, 5}), 10000, RopeLayout::split_half); }},
                 {"interleaved (H, T, D), weighted", {input({2, 3, 4})}, [](const Inputs& x) {
                    return rope(x[0], positions({2, 3, 4}), 100, RopeLayout::interleaved) * gc::fixed({2, 3, 4});
                  }},
                 {"position interpolation (scale 1/4), per-sequence positions", {input({2, 1, 3, 4})},
                  [](const Inputs& x) {
                    Tensor p = Tensor::from_vector(std::vector<int64_t>{0, 3, 9, 1, 2, 700}, Shape{2, 3});
                    return rope(x[0], p, 10000, RopeLayout::split_half, 0.25) * gc::fixed({2, 1, 3, 4});
                  }}});
  r.add("attention", {{"causal, grouped heads", {input({1, 2, 3, 4}), input({1, 1, 3, 4}), input({1, 1, 3, 4})},
                       [](const Inputs& x) { return attention(x[0], x[1], x[2], 0.5, true); }},
                      {"not causal, fewer queries than keys", {input({2, 1, 2, 3}), input({2, 1, 4, 3}), input({2, 1, 4, 3})},
                       [](const Inputs& x) { return attention(x[0], x[1], x[2], 0.7, false); }},
                      {"causal, fewer queries, transposed v", {input({1, 1, 2, 2}), input({1, 1, 3, 2}),
                                                                gc::transposed({1, 1, 3, 2})},
                       [](const Inputs& x) { return attention(x[0], x[1], x[2], 1.0, true); }}});
  r.add("cross_entropy",
        {{"mean with an ignored token", {input({2, 3, 5}, -2, 2)}, [](const Inputs& x) {
            Tensor t = Tensor::from_vector(std::vector<int64_t>{1, 4, -100, 0, 2, 2}, Shape{2, 3});
            return cross_entropy(x[0], t, -100, Reduction::mean);
          }},
         {"sum, transposed logits", {gc::transposed({4, 3}), indices({4}, 3)},
          [](const Inputs& x) { return cross_entropy(x[0], x[1], -100, Reduction::sum); }},
         {"none, ignore index 0", {input({4, 3}), indices({4}, 3)},
          [](const Inputs& x) { return cross_entropy(x[0], x[1], 0, Reduction::none); }}});
  r.add("dropout", {{"p = 0.4, fixed generator", {input({3, 4})}, [](const Inputs& x) {
                       Generator g(7);
                       return dropout(x[0], 0.4, &g, true);
                     }},
                    {"eval mode is the identity", {input({3})}, [](const Inputs& x) {
                       return dropout(x[0] * 2.0, 0.5, nullptr, false);
                     }}});
}

}  // namespace autograd
}  // namespace mvgpt
