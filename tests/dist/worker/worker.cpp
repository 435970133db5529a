// test_dist_worker: runs one collective scenario on every rank of an mpirun launch and prints
// "rank <r>: ok" or "rank <r>: FAIL ..." (exit 1), for tests/dist/dist_test.cpp to read.
//   reduce     average_gradients over float32/float64, odd sizes, a transposed gradient and a bucket
//              smaller than one tensor, checked against the mean computed in double
//   broadcast  broadcast_tensors: every rank ends with rank 0's values (float and int)
//   mismatch   broadcast_tensors with a shape that differs on rank 1: every rank throws
//   init       only joins the world and prints its size (the MPI-less build's refusal)
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "backends/ops.h"
#include "dist/data_parallel.h"
#include "dist/world.h"

using namespace mvgpt;

namespace {

// A value that differs per rank, tensor and element.
double value(int rank, int tensor, int64_t i) { return std::sin(0.37 * double(i) + tensor) * (1 + rank) + 0.25 * rank; }

Tensor filled(const Shape& shape, DType dtype, int rank, int tensor) {
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) write_element(t, i, value(rank, tensor, i));
  return t;
}

std::string reduce() {
  const int r = dist::rank(), n = dist::size();
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
    Tensor p = Tensor::empty(specs[k].shape, specs[k].dtype);
    p.requires_grad_();
    Tensor g;
    if (specs[k].transposed) {  // a non-contiguous gradient: the transpose of a (cols, rows) tensor
      Shape ts{specs[k].shape[1], specs[k].shape[0]};
      Tensor base = filled(ts, specs[k].dtype, r, int(k));
      g = base.as_strided(specs[k].shape, {base.strides()[1], base.strides()[0]}, 0);
    } else {
      g = filled(specs[k].shape, specs[k].dtype, r, int(k));
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
      const double got = read_element(g, i), tol = specs[k].dtype == DType::f32 ? 1e-6 : 1e-14;
      if (std::abs(got - mean) > tol * (1 + std::abs(mean)))
        return "tensor " + std::to_string(k) + " element " + std::to_string(i) + ": " + std::to_string(got) +
               ", expected " + std::to_string(mean);
    }
  }
  return "";
}

std::string broadcast() {
  const int r = dist::rank();
  std::vector<Tensor> ts = {filled({5, 3}, DType::f32, r, 0), filled({4}, DType::f64, r, 1),
                            ops::to(filled({6}, DType::f64, 10 * r, 2), DType::i32)};
  dist::broadcast_tensors(ts, 0);
  std::vector<Tensor> root = {filled({5, 3}, DType::f32, 0, 0), filled({4}, DType::f64, 0, 1),
                              ops::to(filled({6}, DType::f64, 0, 2), DType::i32)};
  for (size_t k = 0; k < ts.size(); ++k)
    for (int64_t i = 0; i < ts[k].numel(); ++i)
      if (read_element(ts[k], i) != read_element(root[k], i))
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

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    dist::init();
    std::string failure;
    if (mode == "reduce") failure = reduce();
    else if (mode == "broadcast") failure = broadcast();
    else if (mode == "mismatch") failure = mismatch();
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
