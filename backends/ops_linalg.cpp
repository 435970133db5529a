// matmul with NumPy semantics: 1-d operands are promoted (and the added axis removed afterwards),
// batch dims broadcast; the backend receives (..., M, K) @ (..., K, N) with batch dims expanded.
#include <optional>
#include <stdexcept>
#include <string>

#include <mvgpt/backends/ops.h>
#include <mvgpt/backends/ops_internal.h>

namespace mvgpt::ops {

namespace {

// The dtype of a product's result: bfloat16 operands are summed in float32 (NOTE in backend.h), and
// give a float32 result or (the default) a bfloat16 one.
DType result_dtype(const Tensor& a, std::optional<DType> out, const char* op) {
  const DType want = out.value_or(a.dtype());
  if (want != a.dtype() && !(a.dtype() == DType::bf16 && want == DType::f32))
    throw std::invalid_argument(std::string(op) + ": a " + std::string(dtype_name(want)) + " result of " +
                                std::string(dtype_name(a.dtype())) +
                                " operands is not supported (only bfloat16 operands may give float32)");
  return want;
}
// The dtype the backend writes. bfloat16 operands: a bfloat16 result where one was asked for by name
// and the backend rounds its products' sums as it writes them (Backend::rounds_products_to_bf16: a
// consumer that reads bfloat16 wants half the bytes, NOTE [ bf16 results ] in
// backends/cpu/blas.cpp); otherwise float32, narrowed afterwards where the result is bfloat16
// (the default keeps those bits: our rounding, denormals included).
DType kernel_dtype(DType operands, std::optional<DType> asked, const Backend& backend) {
  if (operands != DType::bf16) return operands;
  return asked == DType::bf16 && backend.rounds_products_to_bf16() ? DType::bf16 : DType::f32;
}

// A product's row in the op profile: its operands' dtype and shape, "float32 [batch x ]M x K x N", and its flops.
profile::Detail product_detail(DType operands, int64_t batch, int64_t M, int64_t K, int64_t N) {
  std::string text = detail::name_of(operands) + " ";
  if (batch != 1) text += std::to_string(batch) + " x ";
  text += std::to_string(M) + " x " + std::to_string(K) + " x " + std::to_string(N);
  return {text, 2.0 * double(batch) * double(M) * double(K) * double(N)};
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, std::optional<DType> out_dtype) {
  detail::check_no_grad("matmul", {&a, &b});
  check_same_device(a, b, "matmul");
  check_same_dtype(a, b, "matmul");
  check_floating(a, "matmul");
  const DType result = result_dtype(a, out_dtype, "matmul");
  if (a.dim() == 0 || b.dim() == 0)
    throw std::invalid_argument("matmul: both operands need at least 1 dimension, found shapes " +
                                to_string(a.shape()) + " and " + to_string(b.shape()));
  Tensor wa = a, wb = b;
  const bool a_vec = a.dim() == 1, b_vec = b.dim() == 1;
  if (a_vec) wa = views::unsqueeze(wa, 0);   // (K) -> (1, K)
  if (b_vec) wb = views::unsqueeze(wb, 1);   // (K) -> (K, 1)
  const int64_t M = wa.shape().at(-2), K = wa.shape().at(-1), Kb = wb.shape().at(-2), N = wb.shape().at(-1);
  if (K != Kb)
    throw std::invalid_argument("matmul: shapes " + to_string(a.shape()) + " and " + to_string(b.shape()) +
                                " do not match (" + std::to_string(K) + " vs " + std::to_string(Kb) + ")");
  Shape batch_a = wa.shape(), batch_b = wb.shape();
  batch_a.resize(wa.dim() - 2);
  batch_b.resize(wb.dim() - 2);
  Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
  Shape sa = batch, sb = batch, so = batch;
  sa.push_back(M), sa.push_back(K);
  sb.push_back(K), sb.push_back(N);
  so.push_back(M), so.push_back(N);
  Backend& backend = detail::backend_of(a);
  Tensor out = Tensor::empty(so, kernel_dtype(a.dtype(), out_dtype, backend), a.device());
  const profile::Span span("matmul", [&] { return product_detail(a.dtype(), numel(batch), M, K, N); });
  backend.matmul(detail::expand_to(wa, sa), detail::expand_to(wb, sb), out);
  if (b_vec) out = views::squeeze(out, -1);
  if (a_vec) out = views::squeeze(out, b_vec ? -1 : -2);
  return detail::narrow_result(out, result);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, std::optional<DType> out_dtype) {
  detail::check_no_grad("linear", {&x, &weight, &bias});
  const char* op = "linear";
  check_same_device(x, weight, op);
  check_same_dtype(x, weight, op);
  check_floating(x, op);
  const DType result = result_dtype(x, out_dtype, op);
  if (weight.dim() != 2)
    throw std::invalid_argument("linear: expected weight (out, in), found shape " + to_string(weight.shape()));
  const int64_t out_features = weight.size(0), in_features = weight.size(1);
  if (x.dim() < 1 || x.size(-1) != in_features)
    throw std::invalid_argument("linear: expected input (..., " + std::to_string(in_features) + ") for weight " +
                                to_string(weight.shape()) + ", found " + to_string(x.shape()));
  if (bias.defined()) {
    check_same_device(x, bias, op);
    if (!(x.dtype() == DType::bf16 && bias.dtype() == DType::f32)) check_same_dtype(x, bias, op);
    if (bias.dim() != 1 || bias.size(0) != out_features)
      throw std::invalid_argument("linear: expected bias (" + std::to_string(out_features) + "), found shape " +
                                  to_string(bias.shape()));
  }
  // One GEMM over all leading dims: (N, in) -> (N, out).
  int64_t rows = 1;
  for (int d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  Tensor x2 = reshape(x, {rows, in_features});
  Backend& backend = detail::backend_of(x);
  Tensor out = Tensor::empty({rows, out_features}, kernel_dtype(x.dtype(), out_dtype, backend), x.device());
  if (out.numel() > 0) {
    const profile::Span span("linear", [&] { return product_detail(x.dtype(), 1, rows, in_features, out_features); });
    backend.linear(x2, weight, bias.defined() ? detail::widen(bias) : bias, out);
  }
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = out_features;
  return detail::narrow_result(reshape(out, out_shape), result);
}

}  // namespace mvgpt::ops
