// The precision policy of products (NOTE [ Precision policy ] in precision.h).
#include <mvgpt/autograd/precision.h>

#include <stdexcept>
#include <tuple>
#include <vector>

#include <mvgpt/backends/backend.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/tensor/host_arena.h>

namespace mvgpt::autograd {
namespace {

// A weight's bfloat16 copy, valid while the weight keeps the version it had when cast.
struct CachedCopy {
  Tensor source;  // held, so that its storage cannot be freed and reused under the same address
  uint64_t version = 0;
  Tensor copy;
};

struct PrecisionState {
  Precision precision = Precision::fp32;
  int guards = 0;
  std::vector<CachedCopy> copies;  // a model's few dozen weights: a linear search is enough
  HostArena arena;                 // the CPU copies made for inference, in the order they are made
};

PrecisionState& state() {
  thread_local PrecisionState s;
  return s;
}

bool same_view(const Tensor& a, const Tensor& b) {
  return a.storage() == b.storage() && a.raw_data() == b.raw_data() && a.shape() == b.shape() &&
         a.strides() == b.strides() && a.dtype() == b.dtype();
}

}  // namespace

std::string_view precision_name(Precision p) { return p == Precision::bf16 ? "bf16" : "fp32"; }

Precision product_precision() { return state().precision; }

PrecisionGuard::PrecisionGuard(Precision p) : previous_(state().precision) {
  ++state().guards;
  state().precision = p;
}

PrecisionGuard::~PrecisionGuard() {
  PrecisionState& s = state();
  s.precision = previous_;
  if (--s.guards == 0) {
    s.copies.clear();
    s.arena = HostArena();  // its chunk lives on only in copies still held elsewhere
  }
}

PrecisionChoice choose_precision(std::string_view setting, Device device) {
  if (setting != "fp32" && setting != "bf16" && setting != "auto")
    throw std::invalid_argument("precision '" + std::string(setting) + "' is not one of fp32, bf16, auto");
  if (setting == "fp32") return {Precision::fp32, "fp32 as asked"};
  const Backend::Bf16Support support = backend_for(device).bf16_support();
  const std::string where = device.str() + ": " + support.what;
  if (setting == "bf16")
    return {Precision::bf16, support.native ? "bf16 as asked (" + where + ")"
                                            : "bf16 as asked; this device has no native bf16 products, so it runs "
                                              "correctly but slower than fp32 (" + where + ")"};
  if (support.native) return {Precision::bf16, "auto: bf16, the device computes bf16 natively (" + where + ")"};
  return {Precision::fp32, "auto: fp32, the device has no native bf16 products (" + where + ")"};
}

namespace {

// A weight's bfloat16 copy. With grad mode off (decoding, evaluation) a CPU copy goes into the
// guard's arena, next to the copy made before it (NOTE [ Host arena ] in tensor/host_arena.h): a
// decoded token then streams the model's copies in the order its forward made them, on huge pages
// (docs/performance.md: a median bf16 token of the series' model 0.58 against 0.62 ms on the 2-core
// AMD EPYC Zen 4). Training makes a new copy after each optimizer step (AdamW on the CPU writes it
// in its own pass: NOTE [ Weights rounded by the optimizer ]) and its products are bound by
// arithmetic, not by reading the weights: its copies stay with the caching allocator.
Tensor bf16_copy(const Tensor& weight) {
  if (!weight.device().is_cpu() || grad_enabled()) return ops::to(weight, DType::bf16);
  Tensor copy = Tensor::from_storage(state().arena.storage(size_t(weight.numel()) * dtype_size(DType::bf16)),
                                     weight.shape(), contiguous_strides(weight.shape()), 0, DType::bf16);
  ops::copy_(copy, weight);
  return copy;
}

}  // namespace

namespace detail {

bool bf16_products(const Tensor& a, const Tensor& b) {
  // Both float32, or one an activation already made in bfloat16 for the product (NOTE [ Norms made
  // for products ] in autograd/fused/norms.h) against a float32 other; never a bfloat16 parameter
  // (a leaf that requires grad), whose gradient the policy's float32 sums would not fit.
  auto activation = [](const Tensor& t) { return t.dtype() == DType::bf16 && !(t.is_leaf() && t.requires_grad()); };
  const bool f32a = a.dtype() == DType::f32, f32b = b.dtype() == DType::f32;
  return state().precision == Precision::bf16 && (f32a || activation(a)) && (f32b || activation(b)) && (f32a || f32b);
}

Tensor product_operand(const Tensor& t) {
  if (state().precision != Precision::bf16 || t.dtype() != DType::f32) return t;
  if (!(t.is_leaf() && t.requires_grad())) return ops::to(t, DType::bf16);
  PrecisionState& s = state();
  for (CachedCopy& c : s.copies) {
    if (!same_view(c.source, t)) continue;
    if (c.version != t.version()) c = {t, t.version(), bf16_copy(t)};
    return c.copy;
  }
  s.copies.push_back({t, t.version(), bf16_copy(t)});
  return s.copies.back().copy;
}

Tensor refreshable_product_operand(const Tensor& weight) {
  const PrecisionState& s = state();
  if (s.precision != Precision::bf16 || weight.dtype() != DType::f32 || !weight.device().is_cpu()) return {};
  for (const CachedCopy& c : s.copies)
    if (same_view(c.source, weight)) return Tensor::empty(weight.shape(), DType::bf16, weight.device());
  return {};
}

void adopt_product_operand(const Tensor& weight, const Tensor& copy) {
  if (copy.dtype() != DType::bf16 || !(copy.shape() == weight.shape()) || !copy.is_contiguous())
    throw std::logic_error("adopt_product_operand: the copy must be a contiguous bfloat16 tensor of the weight's shape");
  for (CachedCopy& c : state().copies)
    if (same_view(c.source, weight)) {
      c = {weight, weight.version(), copy};
      return;
    }
  throw std::logic_error("adopt_product_operand: the policy holds no copy of this weight (ask refreshable_product_operand)");
}

std::optional<DType> gradient_dtype(DType input, std::optional<DType> out) {
  return out && input == DType::bf16 ? std::optional<DType>(DType::bf16) : out;
}

Tensor in_gradient_dtype(const Tensor& d, DType input, std::optional<DType> out) {
  const std::optional<DType> want = gradient_dtype(input, out);
  return want && d.dtype() != *want ? ops::to(d, *want) : d;
}

LinearGradient linear_gradient(const Tensor& g, bool bf16, bool want_operand, bool want_bias) {
  LinearGradient r;
  if (want_operand && want_bias && bf16 && g.dtype() == DType::f32) {
    std::tie(r.operand, r.bias) = ops::to_bf16_with_column_sums(g);
    return r;
  }
  if (want_operand) r.operand = bf16 ? ops::to(g, DType::bf16) : g;
  if (want_bias) r.bias = ops::sum(g, {0});
  return r;
}

}  // namespace detail
}  // namespace mvgpt::autograd
