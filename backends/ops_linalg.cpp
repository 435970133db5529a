// matmul with NumPy semantics: 1-d operands are promoted (and the added axis removed afterwards),
// batch dims broadcast; the backend receives (..., M, K) @ (..., K, N) with batch dims expanded.
#include <stdexcept>
#include <string>

#include "backends/ops.h"
#include "backends/ops_internal.h"

namespace mvgpt::ops {

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_same_device(a, b, "matmul");
  check_same_dtype(a, b, "matmul");
  check_floating(a, "matmul");
  if (a.dim() == 0 || b.dim() == 0)
    throw std::invalid_argument("matmul: both operands need at least 1 dimension, found shapes " +
                                to_string(a.shape()) + " and " + to_string(b.shape()));
  Tensor wa = detail::widen(a), wb = detail::widen(b);
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
  Tensor out = Tensor::empty(so, wa.dtype(), a.device());
  detail::backend_of(a).matmul(views::expand(wa, sa), views::expand(wb, sb), out);
  if (b_vec) out = views::squeeze(out, -1);
  if (a_vec) out = views::squeeze(out, b_vec ? -1 : -2);
  return detail::narrow_result(out, a.dtype());
}

}  // namespace mvgpt::ops
