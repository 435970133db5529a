#include "dist/data_parallel.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "backends/ops.h"
#include "dist/world.h"

namespace mvgpt::dist {

namespace {

// A contiguous CPU tensor with t's values (t itself when it already is one).
Tensor host_contiguous(const Tensor& t) {
  Tensor h = t.device().is_cpu() ? t : ops::to(t, Device::cpu());
  return ops::contiguous(h);
}

// Writes `host` back into `t` when they are not the same tensor.
void write_back(const Tensor& t, const Tensor& host) {
  if (!host.same(t)) ops::copy_(t, host);
  t.bump_version();
}

}  // namespace

void broadcast_tensors(const std::vector<Tensor>& tensors, int root) {
  if (size() == 1) return;
  // Shapes and dtypes first: a mismatch would otherwise corrupt memory or hang.
  std::vector<int64_t> layout;
  for (const Tensor& t : tensors) {
    if (!t.defined()) throw std::invalid_argument("dist::broadcast_tensors: undefined tensor");
    layout.push_back(int64_t(t.dtype()));
    layout.push_back(t.dim());
    for (int64_t s : t.shape()) layout.push_back(s);
  }
  int64_t count = int64_t(layout.size());
  int64_t root_count = count;
  broadcast(&root_count, sizeof root_count, root);
  std::vector<int64_t> root_layout(size_t(root_count > 0 ? root_count : 0));
  if (rank() == root) root_layout = layout;
  broadcast(root_layout.data(), root_layout.size() * sizeof(int64_t), root);
  int mismatch = root_layout != layout ? 1 : 0;
  double any = mismatch;
  all_reduce_sum(&any, 1);
  if (any > 0)
    throw std::invalid_argument("dist::broadcast_tensors: " + std::to_string(int(any)) +
                                " rank(s) hold tensors whose shapes or dtypes differ from rank " + std::to_string(root) +
                                "'s" + (mismatch ? " (this rank, " + std::to_string(rank()) + ", is one)" : ""));
  for (const Tensor& t : tensors) {
    Tensor h = host_contiguous(t);
    broadcast(h.raw_data(), h.nbytes(), root);
    write_back(t, h);
  }
}

int64_t gradient_bytes(const std::vector<Tensor>& params) {
  int64_t bytes = 0;
  for (const Tensor& p : params) bytes += int64_t(p.nbytes());
  return bytes;
}

namespace {

// Sums one dtype's gradients over the ranks through a bucket of `bucket_elems` elements.
template <typename T>
int64_t average_dtype(const std::vector<Tensor>& grads, size_t bucket_elems) {
  int64_t total_elems = 0;
  for (const Tensor& g : grads) total_elems += g.numel();
  std::vector<T> bucket(std::min<size_t>(bucket_elems, size_t(total_elems)));
  struct Piece {
    size_t grad;           // index in `grads` (host copies)
    int64_t from, count;   // elements of that gradient
    size_t at;             // position in the bucket
  };
  std::vector<Tensor> host;
  for (const Tensor& g : grads) host.push_back(host_contiguous(g));
  std::vector<Piece> pieces;
  size_t used = 0;
  int64_t bytes = 0;
  const T n = T(size());
  auto flush = [&] {
    if (used == 0) return;
    all_reduce_sum(bucket.data(), int64_t(used));
    bytes += int64_t(used * sizeof(T));
    for (const Piece& p : pieces) {
      T* dst = host[p.grad].template data<T>() + p.from;
      const T* src = bucket.data() + p.at;
      for (int64_t i = 0; i < p.count; ++i) dst[i] = src[i] / n;  // division: exact for powers of 2
    }
    pieces.clear();
    used = 0;
  };
  for (size_t g = 0; g < host.size(); ++g) {
    const T* src = host[g].template data<T>();
    for (int64_t from = 0, total = host[g].numel(); from < total;) {
      if (used == bucket.size()) flush();
      const int64_t count = std::min<int64_t>(total - from, int64_t(bucket.size() - used));
      std::memcpy(bucket.data() + used, src + from, size_t(count) * sizeof(T));
      pieces.push_back({g, from, count, used});
      used += size_t(count);
      from += count;
    }
  }
  flush();
  for (size_t g = 0; g < grads.size(); ++g) write_back(grads[g], host[g]);
  return bytes;
}

}  // namespace

int64_t average_gradients(const std::vector<Tensor>& params, size_t bucket_bytes) {
  if (bucket_bytes < sizeof(double))
    throw std::invalid_argument("dist::average_gradients: bucket of " + std::to_string(bucket_bytes) +
                                " bytes, expected at least 8");
  std::vector<Tensor> f32, f64;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& g = params[i].grad();
    std::string name = params[i].name();
    if (name.empty()) name = std::string("#").append(std::to_string(i));
    if (!g.defined())
      throw std::invalid_argument("dist::average_gradients: parameter " + name +
                                  " has no gradient; every rank must reduce the same tensors");
    if (g.shape() != params[i].shape())
      throw std::invalid_argument("dist::average_gradients: parameter " + name + " is " + to_string(params[i].shape()) +
                                  " but its gradient is " + to_string(g.shape()));
    if (g.dtype() == DType::f32) f32.push_back(g);
    else if (g.dtype() == DType::f64) f64.push_back(g);
    else
      throw std::invalid_argument("dist::average_gradients: parameter " + name + "'s gradient is " + g.describe() +
                                  ", expected float32 or float64");
  }
  if (size() == 1) return 0;
  return average_dtype<float>(f32, bucket_bytes / sizeof(float)) +
         average_dtype<double>(f64, bucket_bytes / sizeof(double));
}

Tensor shard_rows(const Tensor& batch, int rank, int n) {
  if (n < 1 || rank < 0 || rank >= n)
    throw std::invalid_argument("dist::shard_rows: rank " + std::to_string(rank) + " of " + std::to_string(n) +
                                " ranks is not a rank");
  if (batch.dim() < 1) throw std::invalid_argument("dist::shard_rows: expected (B, ...), found a scalar");
  const int64_t rows = batch.size(0);
  if (rows % n != 0)
    throw std::invalid_argument("dist::shard_rows: a batch of " + std::to_string(rows) + " rows does not split into " +
                                std::to_string(n) + " equal shares; choose a batch size that is a multiple of " +
                                std::to_string(n));
  const int64_t share = rows / n;
  return ops::contiguous(ops::narrow(batch, 0, rank * share, share));
}

double mean_over_ranks(double value) {
  if (size() == 1) return value;
  all_reduce_sum(&value, 1);
  return value / size();
}

}  // namespace mvgpt::dist
