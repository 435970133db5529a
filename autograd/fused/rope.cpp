// Rotary embedding: checks and dispatch, the slow reference, the backward, and the cases that test
// them (NOTE [ A fused op is one unit ] in unit.h). Kernels: rope_cpu.cpp, rope.cu.
#include <mvgpt/fused/rope.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include <mvgpt/autograd/op_impl.h>  // record, edge_to, SavedTensor, InternalOps; the raw ops
#include <mvgpt/fused/unit.h>

namespace mvgpt {
namespace fused {
namespace {

const RopeKernels& kernels(Device d) {
  static const KernelsByDevice<RopeKernels> table{"rope", rope_cpu_kernels(), MVGPT_FUSED_CUDA_KERNELS(rope)};
  return table.on(d);
}

}  // namespace

Tensor rope_rotate(const Tensor& x, const Tensor& positions, double base, RopeLayout layout, bool inverse,
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
  Tensor xc = x.dtype() == cd && (D <= 1 || x.strides()[x.dim() - 1] == 1) ? x : ops::contiguous(ops::to(x, cd));
  Tensor out = Tensor::empty(x.shape(), cd, x.device());
  {
    const profile::Span span(inverse ? "rope backward" : "rope");
    kernels(x.device()).rotate(xc, ops::contiguous(positions), base, layout, inverse, position_scale, out);
  }
  return cast_back(out, x.dtype());
}

// ---------------------------------------------------------------- the slow reference

namespace reference {

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

}  // namespace reference
}  // namespace fused

// ---------------------------------------------------------------- the differentiable op

Tensor rope(const Tensor& x, const Tensor& positions, double base, RopeLayout layout, double position_scale) {
  const autograd::InternalOps internal;
  Tensor y = fused::rope_rotate(x, positions, base, layout, /*inverse=*/false, position_scale);
  if (!needs_grad(x)) return y;
  // A rotation's transpose is the rotation by the opposite angle.
  return record("rope", std::move(y), {edge_to(x)},
                [sp = SavedTensor(positions), base, layout, position_scale](const Tensor& g) -> Grads {
                  return {fused::rope_rotate(g, sp.unpack("rope"), base, layout, /*inverse=*/true, position_scale)};
                });
}

// ---------------------------------------------------------------- the unit's cases

namespace fused {
namespace {

Tensor positions(std::vector<int64_t> p) { return Tensor::from_vector(p); }

void add_gradchecks(autograd::OpRegistry& r) {
  using autograd::Inputs;
  namespace gc = autograd::gc;
  r.add("rope", {{"split half (B, H, T, D)", {gc::input({1, 2, 3, 4})},
                  [](const Inputs& x) { return mvgpt::rope(x[0], positions({0, 1, 5}), 10000, RopeLayout::split_half); }},
                 {"interleaved (H, T, D), weighted", {gc::input({2, 3, 4})}, [](const Inputs& x) {
                    return mvgpt::rope(x[0], positions({2, 3, 4}), 100, RopeLayout::interleaved) * gc::fixed({2, 3, 4});
                  }},
                 {"position interpolation (scale 1/4), per-sequence positions", {gc::input({2, 1, 3, 4})},
                  [](const Inputs& x) {
                    Tensor p = Tensor::from_vector(std::vector<int64_t>{0, 3, 9, 1, 2, 700}, Shape{2, 3});
                    return mvgpt::rope(x[0], p, 10000, RopeLayout::split_half, 0.25) * gc::fixed({2, 1, 3, 4});
                  }}});
}

std::vector<DeviceCase> device_cases() {
  return {{"rope", [](Device d) {
    std::vector<Tensor> r;
    for (DType dt : {DType::f32, DType::f64}) {
      Tensor x = uniform_on(d, {2, 3, 5, 8}, dt, 69);
      Tensor packed = uniform_on(d, {2, 5, 3, 16}, dt, 70);  // a (B, H, T, D) view with gaps, as from a packed qkv
      Tensor xv = ops::permute(ops::narrow(packed, 3, 8, 8), {0, 2, 1, 3});
      Tensor pos = ids_on(d, {0, 1, 2, 3, 4});
      Tensor pos2 = ops::reshape(ids_on(d, {7, 8, 9, 100000, 11, 0, 1, 2, 3, 4}, DType::i32), {2, 5});
      for (RopeLayout layout : {RopeLayout::split_half, RopeLayout::interleaved})
        for (bool inverse : {false, true}) {
          r.push_back(rope_rotate(x, pos, 10000, layout, inverse));
          r.push_back(rope_rotate(xv, pos2, 500, layout, inverse));
        }
      r.push_back(rope_rotate(uniform_on(d, {3, 5, 8}, dt, 71), pos));  // (H, T, D)
      r.push_back(rope_rotate(xv, pos2, 10000, RopeLayout::split_half, false, 0.25));  // position interpolation
    }
    return r;
  }, {"rotate"}, 1e-5}};
}

}  // namespace

Unit rope_unit() { return {"rope", {"rotate"}, add_gradchecks, device_cases}; }

}  // namespace fused
}  // namespace mvgpt
