#include <mvgpt/dist/data_parallel.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include <mvgpt/autograd/grad_mode.h>
#include <mvgpt/backends/cuda/cuda_backend.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/dist/nccl.h>
#include <mvgpt/dist/world.h>

namespace mvgpt::dist {

namespace {

// Whether t's collectives run on its own device (NCCL) rather than through the host and MPI.
bool on_device(const Tensor& t) { return nccl::handles(t.device()); }

// A contiguous tensor with t's values where its collective runs: on t's device for NCCL, else on
// the CPU (t itself when it already is one).
Tensor staged(const Tensor& t) {
  Tensor s = on_device(t) || t.device().is_cpu() ? t : mvgpt::to(t, Device::cpu());
  return mvgpt::contiguous(s);
}

// Writes `s` back into `t` when they are not the same tensor.
void write_back(const Tensor& t, const Tensor& s) {
  if (!s.same(t)) mvgpt::copy_(t, s);
  t.bump_version();
}

}  // namespace

void broadcast_tensors(const std::vector<Tensor>& tensors, int root) {
  if (size() == 1) return;
  NoGradGuard no_grad;  // values copied between ranks (parameters among them): nothing to differentiate
  // Shapes, dtypes and routes first: a mismatch would otherwise corrupt memory or hang (one rank in
  // NCCL, another in MPI).
  std::vector<int64_t> layout;
  for (const Tensor& t : tensors) {
    if (!t.defined()) throw std::invalid_argument("dist::broadcast_tensors: undefined tensor");
    layout.push_back(int64_t(t.dtype()));
    layout.push_back(on_device(t) ? 1 : 0);
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
                                " rank(s) hold tensors whose shapes, dtypes or devices differ from rank " +
                                std::to_string(root) + "'s" +
                                (mismatch ? " (this rank, " + std::to_string(rank()) + ", is one)" : ""));
  for (const Tensor& t : tensors) {
    Tensor s = staged(t);
    if (on_device(s)) nccl::broadcast(s, root);
    else broadcast(s.raw_data(), s.nbytes(), root);
    write_back(t, s);
  }
}

int64_t gradient_bytes(const std::vector<Tensor>& params) {
  int64_t bytes = 0;
  for (const Tensor& p : params) bytes += int64_t(p.nbytes());
  return bytes;
}

namespace {

// Sums `n` host values over the ranks in place and divides by the rank count (exact for powers of 2).
template <typename T>
void host_mean(T* data, int64_t n) {
  all_reduce_sum(data, n);
  const T ranks = T(size());
  for (int64_t i = 0; i < n; ++i) data[i] = data[i] / ranks;
}

// Averages gradients of one dtype and one route (all on the host, or all on one NCCL device)
// through a bucket of at most `bucket_elems` elements. Returns the bytes all-reduced.
int64_t average_group(const std::vector<Tensor>& grads, DType dtype, bool device_route, size_t bucket_elems) {
  int64_t total = 0;
  for (const Tensor& g : grads) total += g.numel();
  if (total == 0) return 0;
  std::vector<Tensor> stage, flat;  // contiguous copies (or the gradients) and their 1-D views
  for (const Tensor& g : grads) {
    stage.push_back(staged(g));
    flat.push_back(mvgpt::reshape(stage.back(), {g.numel()}));
  }
  const int64_t capacity = std::min<int64_t>(int64_t(bucket_elems), total);
  Tensor bucket = mvgpt::empty({capacity}, dtype, device_route ? grads.front().device() : Device::cpu());
  struct Piece {
    size_t grad;          // index in `grads`
    int64_t from, count;  // elements of that gradient
    int64_t at;           // position in the bucket
  };
  std::vector<Piece> pieces;
  int64_t used = 0, bytes = 0;
  auto flush = [&] {
    if (used == 0) return;
    if (device_route) nccl::all_reduce_mean(used == capacity ? bucket : mvgpt::narrow(bucket, 0, 0, used));
    else if (dtype == DType::f32) host_mean(bucket.data<float>(), used);
    else host_mean(bucket.data<double>(), used);
    bytes += used * int64_t(dtype_size(dtype));
    for (const Piece& p : pieces)
      mvgpt::copy_(mvgpt::narrow(flat[p.grad], 0, p.from, p.count), mvgpt::narrow(bucket, 0, p.at, p.count));
    pieces.clear();
    used = 0;
  };
  for (size_t g = 0; g < flat.size(); ++g) {
    for (int64_t from = 0, n = flat[g].numel(); from < n;) {
      if (used == capacity) flush();
      const int64_t count = std::min(n - from, capacity - used);
      mvgpt::copy_(mvgpt::narrow(bucket, 0, used, count), mvgpt::narrow(flat[g], 0, from, count));
      pieces.push_back({g, from, count, used});
      used += count;
      from += count;
    }
  }
  flush();
  for (size_t g = 0; g < grads.size(); ++g) write_back(grads[g], stage[g]);
  return bytes;
}

}  // namespace

int64_t average_gradients(const std::vector<Tensor>& params, size_t bucket_bytes) {
  if (bucket_bytes < sizeof(double))
    throw std::invalid_argument("dist::average_gradients: bucket of " + std::to_string(bucket_bytes) +
                                " bytes, expected at least 8");
  // Four groups, always reduced in this order on every rank: host f32, host f64, device f32, device f64.
  std::vector<Tensor> groups[2][2];  // [device route][float64]
  std::string device_param;  // the first parameter whose gradient takes the device route, and its device
  Device device;
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
    if (g.dtype() != DType::f32 && g.dtype() != DType::f64)
      throw std::invalid_argument("dist::average_gradients: parameter " + name + "'s gradient is " + g.describe() +
                                  ", expected float32 or float64");
    const bool device_route = on_device(g);
    if (device_route && device_param.empty()) {
      device_param = name;
      device = g.device();
    } else if (device_route && !(g.device() == device)) {
      throw std::invalid_argument("dist::average_gradients: parameter " + name + "'s gradient is on " +
                                  g.device().str() + " but " + device_param + "'s is on " + device.str() +
                                  "; a rank's CUDA gradients must share one device");
    }
    std::vector<Tensor>& group = groups[device_route][g.dtype() == DType::f64];
    group.push_back(g);
  }
  if (size() == 1) return 0;
  int64_t bytes = 0;
  for (int route : {0, 1})
    for (int wide : {0, 1})
      bytes += average_group(groups[route][wide], wide ? DType::f64 : DType::f32, route == 1,
                             bucket_bytes / (wide ? sizeof(double) : sizeof(float)));
  return bytes;
}

Device local_device(Device requested) {
  if (!requested.is_cuda() || size() == 1) return requested;
  const int local = local_rank(), visible = cuda::device_count();
  if (visible == 0)
    throw std::runtime_error("dist::local_device: " + requested.str() + " requested, but no CUDA device is visible to "
                             "this process (local rank " + std::to_string(local) + "); train on the CPU instead");
  if (local >= visible)
    throw std::runtime_error("dist::local_device: this process is rank " + std::to_string(local) +
                             " of those on its machine, but only " + std::to_string(visible) +
                             " CUDA device(s) are visible; start at most " + std::to_string(visible) +
                             " rank(s) per machine, one GPU each");
  return Device::cuda(local);
}

void shard_generator(Generator& gen) { gen.set_shard(uint64_t(rank()), uint64_t(size())); }

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
  return mvgpt::contiguous(mvgpt::narrow(batch, 0, rank * share, share));
}

double mean_over_ranks(double value) {
  if (size() == 1) return value;
  host_mean(&value, 1);
  return value;
}

}  // namespace mvgpt::dist
