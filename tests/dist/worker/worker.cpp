// test_dist_worker: runs one collective scenario on every rank of an mpirun launch and prints
// "rank <r>: ok" or "rank <r>: FAIL ..." (exit 1), for tests/dist/dist_test.cpp to read.
//   reduce          average_gradients over float32/float64, odd sizes, a transposed gradient and a
//                   bucket smaller than one tensor, checked against the mean computed in double
//   broadcast       broadcast_tensors: every rank ends with rank 0's values (float and int)
//   mismatch        broadcast_tensors with a shape that differs on rank 1: every rank throws
//   dropout         a sharded stream (dist::shard_generator): each rank's dropout masks are its rows
//                   of one process's masks, and a few AdamW steps of a model with dropout train as
//                   one process on the whole batch (and not so with the same stream on every rank)
//   nccl-reduce     reduce with the gradients on this rank's GPU (every other one left on the CPU):
//                   NCCL for those, MPI for the others; the transport then names NCCL
//   nccl-broadcast  broadcast with the tensors on this rank's GPU (one transposed)
//   init            only joins the world and prints its size (the MPI-less build's refusal)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include <mvgpt/autograd/engine.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/dist/data_parallel.h>
#include <mvgpt/dist/world.h>
#include <mvgpt/nn/dropout.h>
#include <mvgpt/nn/linear.h>
#include <mvgpt/nn/optim.h>

using namespace mvgpt;

namespace {

// A value that differs per rank, tensor and element.
double value(int rank, int tensor, int64_t i) { return std::sin(0.37 * double(i) + tensor) * (1 + rank) + 0.25 * rank; }

Tensor filled(const Shape& shape, DType dtype, int rank, int tensor) {
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) write_element(t, i, value(rank, tensor, i));
  return t;
}

// The element i of t (on any device).
double element(const Tensor& t, int64_t i) { return read_element(t.device().is_cpu() ? t : ops::to(t, Device::cpu()), i); }

// Every gradient on `device`; with `mixed`, tensors 1 (float32) and 3 (float64) stay on the CPU
// (MPI) while the others, of both dtypes, are on `device`.
std::string reduce(Device device = Device::cpu(), bool mixed = false) {
  const int r = dist::rank(), n = dist::size();
  auto where = [&](size_t k) { return mixed && (k == 1 || k == 3) ? Device::cpu() : device; };
  // Shapes chosen to straddle the 24-byte bucket below (6 floats, 3 doubles) and include nothing.
  struct Spec {
    Shape shape;
    DType dtype;
    bool transposed;
  };
  const std::vector<Spec> specs = {{{7}, DType::f32, false},    {{3, 5}, DType::f32, true}, {{0, 4}, DType::f32, false},
                                   {{2, 3}, DType::f64, false}, {{1}, DType::f32, false},   {{4, 4}, DType::f64, true}};
  std::vector<Tensor> params;
  for (size_t k = 0; k < specs.size(); ++k) {
    Tensor p = ops::empty(specs[k].shape, specs[k].dtype, where(k));
    p.requires_grad_();
    Tensor g;
    if (specs[k].transposed) {  // a non-contiguous gradient: the transpose of a (cols, rows) tensor
      Shape ts{specs[k].shape[1], specs[k].shape[0]};
      Tensor base = ops::to(filled(ts, specs[k].dtype, r, int(k)), where(k));
      g = base.as_strided(specs[k].shape, {base.strides()[1], base.strides()[0]}, 0);
    } else {
      g = ops::to(filled(specs[k].shape, specs[k].dtype, r, int(k)), where(k));
    }
    p.set_grad(g);
    params.push_back(p);
  }
  const int64_t bytes = dist::average_gradients(params, 24);
  int64_t expected_bytes = 0;
  for (const Tensor& p : params) expected_bytes += int64_t(p.nbytes());
  if (bytes != expected_bytes) return "bytes " + std::to_string(bytes) + ", expected " + std::to_string(expected_bytes);
  for (size_t k = 0; k < specs.size(); ++k) {
    const Tensor& g = params[k].grad();
    if (!(g.device() == where(k))) return "tensor " + std::to_string(k) + "'s gradient moved to " + g.device().str();
    for (int64_t i = 0; i < g.numel(); ++i) {
      // Element i (row-major) of the transposed view is element (col, row) of the base.
      int64_t src = i;
      if (specs[k].transposed) {
        const int64_t rows = specs[k].shape[0], cols = specs[k].shape[1];
        src = (i % cols) * rows + i / cols;
      }
      double mean = 0;
      for (int q = 0; q < n; ++q) mean += value(q, int(k), src);
      mean /= n;
      const double got = element(g, i), tol = specs[k].dtype == DType::f32 ? 1e-6 : 1e-14;
      if (std::abs(got - mean) > tol * (1 + std::abs(mean)))
        return "tensor " + std::to_string(k) + " element " + std::to_string(i) + ": " + std::to_string(got) +
               ", expected " + std::to_string(mean);
    }
  }
  return "";
}

std::string broadcast(Device device = Device::cpu()) {
  const int r = dist::rank();
  auto make = [&](int from_rank) {
    return std::vector<Tensor>{ops::to(filled({5, 3}, DType::f32, from_rank, 0), device),
                               ops::to(filled({4}, DType::f64, from_rank, 1), device),
                               ops::to(ops::to(filled({6}, DType::f64, 10 * from_rank, 2), DType::i32), device),
                               ops::transpose(ops::to(filled({3, 2}, DType::f32, from_rank, 3), device), 0, 1)};
  };
  std::vector<Tensor> ts = make(r);
  dist::broadcast_tensors(ts, 0);
  std::vector<Tensor> root = make(0);
  for (size_t k = 0; k < ts.size(); ++k)
    for (int64_t i = 0; i < ts[k].numel(); ++i)
      if (element(ts[k], i) != element(root[k], i))
        return "tensor " + std::to_string(k) + " element " + std::to_string(i) + " is not rank 0's";
  return "";
}

std::string mismatch() {
  const int r = dist::rank();
  std::vector<Tensor> ts = {filled({3, r == 1 ? 4 : 3}, DType::f32, r, 0)};
  try {
    dist::broadcast_tensors(ts, 0);
  } catch (const std::invalid_argument& e) {
    std::printf("rank %d: threw: %s\n", r, e.what());
    return "";
  }
  return "a shape mismatch was not detected";
}

// ||a - b|| / ||b|| over two tensors' elements, in double.
double relative_difference(const Tensor& a, const Tensor& b) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double x = read_element(a, i), y = read_element(b, i);
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

// Three AdamW steps of linear -> dropout -> squared error on the rows `rows` of a fixed batch, with
// masks from `gen`; gradients averaged over the ranks when `average`. Returns the final weight.
Tensor train_with_dropout(Generator& gen, int64_t first_row, int64_t rows, bool average) {
  constexpr int64_t kBatch = 12, kIn = 5, kOut = 8;
  Generator init_gen(3);
  nn::Linear layer(kIn, kOut, true, {.gen = &init_gen, .std = 0.5});
  nn::Dropout drop(0.5, &gen);
  nn::AdamW opt(layer.parameters(), {.lr = 0.05});
  Generator data_gen(4);
  Tensor x = ops::narrow(ops::randn({kBatch, kIn}, DType::f32, Device::cpu(), &data_gen), 0, first_row, rows);
  Tensor y = ops::narrow(ops::randn({kBatch, kOut}, DType::f32, Device::cpu(), &data_gen), 0, first_row, rows);
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    Tensor loss = mean(square(drop(layer(x)) - y));  // the mean over this rank's rows
    backward(loss);
    if (average) dist::average_gradients(layer.parameters());
    opt.step();
  }
  return layer.weight;
}

std::string dropout() {
  const int r = dist::rank(), n = dist::size();
  constexpr int64_t kBatch = 12;  // rows of the global batch: a multiple of 1, 2, 3 and 4 ranks
  if (kBatch % n != 0) return "the dropout scenario needs a rank count that divides " + std::to_string(kBatch);
  const int64_t share = kBatch / n;
  // The masks: two draws of different shapes, rank r's share against rows of one process's draw.
  Generator whole(7), sharded(7);
  dist::shard_generator(sharded);
  for (const Shape& shape : {Shape{kBatch, 3, 4}, Shape{kBatch, 5}}) {
    Tensor x = ops::ones(shape, DType::f32);
    Tensor all = mvgpt::dropout(x, 0.5, &whole, true);
    Tensor mine = mvgpt::dropout(dist::shard_rows(x, r, n), 0.5, &sharded, true);
    Tensor expected = dist::shard_rows(all, r, n);
    for (int64_t i = 0; i < mine.numel(); ++i)
      if (read_element(mine, i) != read_element(expected, i))
        return "mask element " + std::to_string(i) + " of shape " + to_string(shape) + " differs from one process's";
    if (sharded.offset != whole.offset)
      return "sharded offset " + std::to_string(sharded.offset) + ", one process's " + std::to_string(whole.offset);
  }
  // Training: the ranks with a sharded stream end where one process does with the whole batch.
  Generator one(11), ranks(11), same(11);
  dist::shard_generator(ranks);
  const Tensor reference = train_with_dropout(one, 0, kBatch, false);
  const double sharded_error = relative_difference(train_with_dropout(ranks, r * share, share, true), reference);
  if (sharded_error > 1e-5) return "sharded streams: weights differ from one process's by " + std::to_string(sharded_error);
  // The same stream on every rank (the behaviour before sharding) gives other masks: not the same run.
  const double same_error = relative_difference(train_with_dropout(same, r * share, share, true), reference);
  if (n > 1 && same_error < 1e-3)
    return "the same stream on every rank trained like one process (" + std::to_string(same_error) +
           "): the scenario cannot tell sharding apart";
  std::printf("rank %d: dropout relative difference %.3g sharded, %.3g with one stream\n", r, sharded_error, same_error);
  return "";
}

// This rank's GPU, for the NCCL scenarios.
Device gpu() {
#ifndef MVGPT_DIST_NCCL
  throw std::runtime_error("this build has no NCCL");
#endif
  return dist::local_device(Device::cuda());
}

std::string nccl_reduce() {
  std::string failure = reduce(gpu(), true);
  if (failure.empty() && dist::size() > 1 && dist::transport().find("NCCL") == std::string::npos)
    failure = "the transport does not name NCCL: " + dist::transport();
  if (failure.empty()) std::printf("rank %d: over %s\n", dist::rank(), dist::transport().c_str());
  return failure;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    dist::init();
    std::string failure;
    if (mode == "reduce") failure = reduce();
    else if (mode == "broadcast") failure = broadcast();
    else if (mode == "mismatch") failure = mismatch();
    else if (mode == "dropout") failure = dropout();
    else if (mode == "nccl-reduce") failure = nccl_reduce();
    else if (mode == "nccl-broadcast") failure = broadcast(gpu());
    else if (mode == "init") std::printf("rank %d of %d\n", dist::rank(), dist::size());
    else failure = "unknown mode '" + mode + "'";
    if (failure.empty()) std::printf("rank %d: ok\n", dist::rank());
    else std::printf("rank %d: FAIL %s\n", dist::rank(), failure.c_str());
    std::fflush(stdout);
    return dist::finalize(failure.empty() ? 0 : 1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_dist_worker: error: %s\n", e.what());
    return dist::finalize(1);
  }
}
