#pragma once
// The precision of products, the way autocast works in PyTorch.
//
// NOTE [ Precision policy ]
// Under PrecisionGuard(Precision::bf16), the products of float32 tensors (linear, matmul, and so
// the model's projections, MLP and tied classifier) multiply bfloat16 copies of their operands and
// sum the products in float32 (the backends' mixed GEMM: oneDNN on the CPU, cuBLAS on CUDA); their
// results, and everything else (softmax, norms, cross-entropy, reductions, the attention unit), stay
// float32. Their backward passes do the same with the incoming gradient rounded to bfloat16, so
// the gradients that reach the weights are float32 sums; the weights themselves (the master copies)
// and AdamW's state stay float32. A weight's bfloat16 copy is made once per guard and version
// of the weight (the forward pass, its backward pass and every decoded token reuse it) and kept
// until the outermost guard ends (with grad mode off, on the CPU, in an arena of huge pages in the
// order they are made: NOTE [ Host arena ] in tensor/host_arena.h); inputs are cast at each call.
// AdamW on the CPU writes the new copies of the weights it updates in its own pass, and the policy
// takes them for the new versions (NOTE [ Weights rounded by the optimizer ] in
// autograd/fused/adamw_cpu.cpp).
// A weight is a leaf that requires grad: a view of one (a transpose) is not, and is cast at every
// call, so models pass the weight itself (linear(x, w) rather than matmul(x, w^T)). fp32 (the
// default) changes nothing.
#include <optional>
#include <string>
#include <string_view>

#include <mvgpt/tensor/device.h>
#include <mvgpt/tensor/tensor.h>

namespace mvgpt::autograd {

enum class Precision { fp32, bf16 };
std::string_view precision_name(Precision p);  // "fp32", "bf16"

// The calling thread's precision for products (fp32 unless a PrecisionGuard says otherwise).
Precision product_precision();

// Sets the precision of products on this thread for its lifetime and restores the previous one
// after. Nest freely; the bfloat16 copies of weights are dropped when the outermost guard ends.
class PrecisionGuard {
 public:
  explicit PrecisionGuard(Precision p);
  ~PrecisionGuard();
  PrecisionGuard(const PrecisionGuard&) = delete;
  PrecisionGuard& operator=(const PrecisionGuard&) = delete;

 private:
  Precision previous_;
};

// A precision for a device from a setting: "fp32", "bf16", or "auto" (bf16 where the device computes
// bf16 products natively: AMX or AVX512-BF16 on the CPU, compute capability >= 8.0 on CUDA; fp32
// elsewhere). `reason` says why, in words for a run's header; for bf16 on a device without native
// bf16 it says that it runs correctly but slower. Throws std::invalid_argument for another setting.
struct PrecisionChoice {
  Precision precision = Precision::fp32;
  std::string reason;
};
PrecisionChoice choose_precision(std::string_view setting, Device device);

namespace detail {
// The operand of a product as it is multiplied under the current policy: a bfloat16 copy of a float32
// tensor under bf16 (weights, i.e. leaves that require grad, from the guard's cache), else t itself.
Tensor product_operand(const Tensor& t);
// For an optimizer that writes the weights' bfloat16 copies in its own pass over them (AdamW on the
// CPU: NOTE [ Weights rounded by the optimizer ] in autograd/fused/adamw_cpu.cpp): a new, empty
// bfloat16 tensor shaped as `weight` where the policy holds a copy of it (bf16 products now, a
// float32 weight on the CPU that a product has multiplied since the outermost guard began), else
// undefined. Once the update has written it, adopt_product_operand(weight, copy) makes it the copy
// of the weight's new version, so that the next product does not make one.
Tensor refreshable_product_operand(const Tensor& weight);
void adopt_product_operand(const Tensor& weight, const Tensor& copy);
// Whether products of a and b run in bfloat16 now: the bf16 policy, both float32 or one of them a
// bfloat16 activation (not a parameter: made for the product, NOTE [ Norms made for products ]). A
// bfloat16 input's gradient is made in bfloat16 (the products' float32 sums rounded).
bool bf16_products(const Tensor& a, const Tensor& b);
// How a product's passes multiply: the forward's operands as multiplied (bfloat16 copies under the
// bf16 policy), and the dtype its products (and the backward's) ask for. linear, matmul and
// linear_cross_entropy take their operands through it.
struct Product {
  bool bf16;
  Tensor a, b;
  Product(const Tensor& x, const Tensor& y)
      : bf16(bf16_products(x, y)), a(bf16 ? product_operand(x) : x), b(bf16 ? product_operand(y) : y) {}
  std::optional<DType> out() const { return bf16 ? std::optional<DType>(DType::f32) : std::nullopt; }
};
// The dtype a product makes an input's gradient in, given the dtype its products ask for (out()):
// bfloat16 for a bfloat16 input under bf16 products (an activation made for the product: NOTE
// [ Norms made for products ] in autograd/fused/norms.h), else out.
std::optional<DType> gradient_dtype(DType input, std::optional<DType> out);
// d, made in `out`, in that dtype: rounded once, after whatever was done to it in float32.
Tensor in_gradient_dtype(const Tensor& d, DType input, std::optional<DType> out);
// A linear layer's incoming gradient g (N, out) as its backward takes it (linear, and the GPT-2
// MLP's second layer): `operand` for its products (bfloat16 under bf16 products, else g; undefined
// where no product wants it) and `bias`, g's column sums (undefined where not wanted). Both from a
// float32 g under bf16 products come from one pass over it (ops::to_bf16_with_column_sums).
struct LinearGradient {
  Tensor operand, bias;
};
LinearGradient linear_gradient(const Tensor& g, bool bf16, bool want_operand, bool want_bias);
}  // namespace detail

}  // namespace mvgpt::autograd

namespace mvgpt {
using autograd::choose_precision;
using autograd::Precision;
using autograd::PrecisionChoice;
using autograd::PrecisionGuard;
}  // namespace mvgpt
