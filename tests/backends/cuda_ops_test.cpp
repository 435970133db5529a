// Every op, written once, run on each device: the CPU always, CUDA when a GPU is present (the CUDA
// cases are skipped with a message otherwise, never removed). Each case builds the same inputs on
// the device under test, in strided layouts built there (transposed, sliced, expanded views), and
// its results are compared with the same case run on the CPU. A case is also run twice on its
// device and must give bitwise-identical results (our kernels are deterministic).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <ostream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <mvgpt/backends/cuda/cuda_backend.h>
#include <mvgpt/backends/ops.h>
#include "cuda_required.h"
#include "backends/device_compare.h"
#include "backends/ops_test_util.h"

namespace mvgpt {
namespace {

using testing::bitwise_equal;
using testing::expect_matches;
using testing::Kind;
using testing::on_host;

// A tensor of `shape` whose values come from a CPU-built base, moved to `dev` and viewed there, so
// the device sees a genuinely strided tensor (ops::to would make a view contiguous).
Tensor input(Device dev, const Shape& shape, DType dt, uint64_t seed, Kind kind = Kind::contiguous, double lo = -2,
             double hi = 2) {
  const int n = shape.size();
  Shape base = shape;
  if (kind == Kind::transposed && n >= 2) std::swap(base[n - 1], base[n - 2]);
  if (kind == Kind::sliced && n >= 1) base[n - 1] += 3;
  if (kind == Kind::expanded && n >= 1) base[0] = 1;
  Tensor t = ops::to(testing::make_input(base, dt, seed, Kind::contiguous, lo, hi), dev);
  if (kind == Kind::transposed && n >= 2) return ops::transpose(t, -1, -2);
  if (kind == Kind::sliced && n >= 1) return ops::narrow(t, -1, 1, shape[n - 1]);
  if (kind == Kind::expanded && n >= 1) return ops::expand(t, shape);
  return t;
}

Tensor ints(Device dev, const std::vector<int64_t>& v, DType dt = DType::i64, Shape shape = {}) {
  Tensor t = ops::to(Tensor::from_vector(v, shape), dt);
  return ops::to(t, dev);
}

struct OpCase {
  std::string name;
  std::function<std::vector<Tensor>(Device)> run;
  double tol_f32 = 2e-5;  // |got - cpu| <= tol (1 + |cpu|)
  double tol_f64 = 1e-11;
};

std::vector<OpCase> op_cases() {
  std::vector<OpCase> cases;
  auto add = [&](std::string name, std::function<std::vector<Tensor>(Device)> run, double tol_f32 = 2e-5,
                 double tol_f64 = 1e-11) { cases.push_back({std::move(name), std::move(run), tol_f32, tol_f64}); };

  // --- data movement
  add("copy_layouts", [](Device d) {
    std::vector<Tensor> r;
    for (Kind k : testing::kAllKinds) r.push_back(ops::contiguous(input(d, {5, 7}, DType::f32, 1, k)));
    r.push_back(ops::contiguous(ops::permute(input(d, {2, 3, 4, 5}, DType::f64, 2), {3, 1, 0, 2})));
    return r;
  });
  // Host tensors (contiguous, a transposed view, an empty one) uploaded on the copy stream, then
  // used by work queued after wait_upload.
  add("upload", [](Device d) {
    Backend& be = backend_for(d);
    const std::vector<Tensor> host = {testing::make_input({6, 5}, DType::i32, 7, Kind::contiguous, -50, 50),
                                      testing::make_input({4, 9}, DType::f32, 8, Kind::transposed),
                                      Tensor::empty({0, 3}, DType::f64)};
    Backend::PendingUpload u = be.upload_async(host);
    be.wait_upload(u);
    return std::vector<Tensor>{ops::add(u.tensors[0], u.tensors[0]), ops::mul(u.tensors[1], 3.0), u.tensors[2]};
  });
  add("copy_conversions", [](Device d) {
    std::vector<Tensor> r;
    const DType all[] = {DType::f32, DType::f64, DType::bf16, DType::i32, DType::i64, DType::boolean};
    for (DType from : all)
      for (DType to : all) r.push_back(ops::to(input(d, {3, 6}, from, 3, Kind::transposed, -40, 40), to));
    return r;
  });
  add("copy_into_views", [](Device d) {
    Tensor dst = ops::zeros({4, 6}, DType::f32, d);
    ops::copy_(ops::narrow(dst, 1, 2, 3), input(d, {4, 3}, DType::f64, 4, Kind::transposed));
    ops::copy_(ops::select(dst, 0, 0), input(d, {6}, DType::i64, 5, Kind::contiguous, -9, 9));
    Tensor x = ops::to(testing::make_input({10}, DType::f32, 6), d);
    ops::copy_(ops::narrow(x, 0, 1, 9), ops::narrow(x, 0, 0, 9));  // overlapping shift
    return std::vector<Tensor>{dst, x};
  });
  add("fill_arange", [](Device d) {
    std::vector<Tensor> r;
    for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::i32, DType::i64, DType::boolean})
      r.push_back(ops::full({2, 3}, 2.75, dt, d));
    Tensor view = ops::zeros({4, 5}, DType::f32, d);
    ops::fill_(ops::transpose(ops::narrow(view, 1, 1, 3), 0, 1), -1.5);
    r.push_back(view);
    r.push_back(ops::arange(-3, 7, 0.5, DType::f32, d));
    r.push_back(ops::arange(0, 100, 3, DType::i64, d));
    r.push_back(ops::arange(5, -5, -1.25, DType::f64, d));
    return r;
  });
  // Philox: the same numbers on every device (uniform bit for bit; normal within libm's last bits).
  add("random", [](Device d) {
    Generator g(1234);
    g.offset = 77;
    return std::vector<Tensor>{ops::rand({1000}, DType::f32, d, &g), ops::rand({999}, DType::f64, d, &g),
                               ops::randn({1000}, DType::f32, d, &g), ops::randn({1001}, DType::f64, d, &g),
                               ops::rand({33}, DType::bf16, d, &g)};
  }, 1e-6, 1e-14);

  // --- elementwise
  // Every row of backends/unary_ops.h, forward and fused backward, on the inputs its domain allows.
  add("unary_float", [](Device d) {
    std::vector<Tensor> r;
    for (DType dt : {DType::f32, DType::f64}) {
      Tensor x = input(d, {6, 9}, dt, 7, Kind::transposed, -3, 3);
      Tensor pos = input(d, {6, 9}, dt, 8, Kind::sliced, 0.1, 4);
      Tensor g = input(d, {9}, dt, 9);  // a broadcast gradient
      for (const UnaryOpInfo& info : kUnaryOps) {
        const Tensor& in = info.domain == UnaryDomain::positive ? pos : x;
        const std::vector<double> scalars =
            info.call == UnaryCall::scalar ? std::vector<double>{2.0, 3.0, 0.5, -1.0, 1.7} : std::vector<double>{0.0};
        for (double s : scalars) {
          r.push_back(ops::unary(info.op, in, s));
          r.push_back(ops::unary_backward(info.op, in, g, s));
        }
      }
    }
    r.push_back(ops::gelu(input(d, {3, 4}, DType::bf16, 9, Kind::expanded)));
    return r;
  }, 1e-5);
  add("unary_int", [](Device d) {
    std::vector<Tensor> r;
    for (DType dt : {DType::i32, DType::i64}) {
      Tensor x = input(d, {4, 5}, dt, 10, Kind::transposed, -20, 20);
      for (const UnaryOpInfo& info : kUnaryOps)
        if (info.ints) r.push_back(ops::unary(info.op, x, info.call == UnaryCall::scalar ? -2 : 0));
    }
    return r;
  });
  add("binary_broadcast", [](Device d) {
    std::vector<Tensor> r;
    for (DType dt : {DType::f32, DType::f64, DType::i32, DType::i64}) {
      Tensor a = input(d, {3, 1, 5}, dt, 11, Kind::sliced, -5, 5);
      Tensor b = input(d, {4, 5}, dt, 12, Kind::transposed, -5, 5);
      for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::maximum, BinaryOp::minimum,
                          BinaryOp::eq, BinaryOp::ne, BinaryOp::lt, BinaryOp::le, BinaryOp::gt, BinaryOp::ge})
        r.push_back(ops::binary(op, a, b));
      if (is_floating(dt)) r.push_back(ops::div(a, ops::add(ops::abs(b), 0.5)));
    }
    Tensor p = input(d, {2, 3}, DType::boolean, 13), q = input(d, {3}, DType::boolean, 14);
    r.push_back(ops::eq(p, q));
    r.push_back(ops::lt(p, q));
    r.push_back(ops::add(input(d, {2, 3}, DType::bf16, 15), input(d, {1, 3}, DType::bf16, 16, Kind::expanded)));
    // A zero-size broadcast and a scalar operand.
    r.push_back(ops::mul(input(d, {0, 3}, DType::f32, 17), input(d, {3}, DType::f32, 18)));
    r.push_back(ops::sub(input(d, {4, 2}, DType::f32, 19, Kind::transposed), ops::full({}, 0.25, DType::f32, d)));
    return r;
  });
  add("where_masked_fill", [](Device d) {
    std::vector<Tensor> r;
    Tensor cond = input(d, {4, 1}, DType::boolean, 20);
    for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::i32, DType::i64, DType::boolean})
      r.push_back(ops::where(cond, input(d, {4, 6}, dt, 21, Kind::transposed), input(d, {6}, dt, 22)));
    r.push_back(ops::masked_fill(input(d, {3, 5}, DType::f32, 23, Kind::sliced), input(d, {5}, DType::boolean, 24),
                                 -INFINITY));
    return r;
  });

  // --- reductions
  add("reduce_axes", [](Device d) {
    std::vector<Tensor> r;
    for (DType dt : {DType::f32, DType::f64}) {
      Tensor x = input(d, {6, 7, 8}, dt, 25, Kind::transposed);
      for (const ops::Axes& axes : std::vector<ops::Axes>{{}, {0}, {1}, {2}, {0, 2}, {1, 2}}) {
        r.push_back(ops::sum(x, axes));
        r.push_back(ops::mean(x, axes, true));
        r.push_back(ops::max(x, axes));
        r.push_back(ops::min(x, axes));
      }
      for (int axis : {0, 1, 2}) r.push_back(ops::argmax(x, axis));
      r.push_back(ops::logsumexp(x, {2}));
    }
    Tensor xi = input(d, {5, 9}, DType::i32, 26, Kind::sliced, -50, 50);
    r.push_back(ops::sum(xi, {1}));
    r.push_back(ops::max(xi, {0}));
    r.push_back(ops::argmax(xi, 1));
    r.push_back(ops::sum(input(d, {4, 0}, DType::f32, 27), {1}));  // empty sums are 0
    return r;
  });
  add("reduce_long_rows", [](Device d) {
    // Long rows take the block-per-output kernel, many short ones the thread-per-output one.
    Tensor x = input(d, {3, 5000}, DType::f32, 28);
    Tensor y = input(d, {40000, 3}, DType::f32, 29);
    Tensor tied = ops::full({2, 700}, 1.0, DType::f32, d);  // argmax of ties: the first
    return std::vector<Tensor>{ops::sum(x, {1}), ops::max(x, {1}), ops::argmax(x, 1), ops::sum(y, {0}),
                               ops::sum(y, {1}),  ops::min(ops::transpose(y, 0, 1), {1}), ops::argmax(tied, 1)};
  }, 1e-5);
  add("convert_with_column_sums", [](Device d) {
    // A linear layer's incoming gradient: rows in several groups and blocks, and a strided one.
    std::vector<Tensor> r;
    for (Tensor g : {input(d, {150, 37}, DType::f32, 32, Kind::contiguous, -3, 3),
                     input(d, {9, 20}, DType::f32, 33, Kind::transposed)}) {
      auto [operand, sums] = ops::to_bf16_with_column_sums(g);
      r.push_back(ops::to(operand, DType::f32));
      r.push_back(sums);
    }
    return r;
  });
  add("softmax", [](Device d) {
    std::vector<Tensor> r;
    for (DType dt : {DType::f32, DType::f64}) {
      Tensor x = input(d, {5, 300}, dt, 30, Kind::sliced, -6, 6);
      r.push_back(ops::softmax(x, -1));
      r.push_back(ops::log_softmax(x, -1));
      Tensor t = input(d, {7, 6}, dt, 31, Kind::transposed);
      r.push_back(ops::softmax(t, 0));
      r.push_back(ops::log_softmax(t, 1));
    }
    return r;
  });

  // --- linear algebra
  add("matmul_layouts", [](Device d) {
    std::vector<Tensor> r;
    for (DType dt : {DType::f32, DType::f64})
      for (Kind ka : {Kind::contiguous, Kind::transposed, Kind::sliced})
        for (Kind kb : {Kind::contiguous, Kind::transposed, Kind::sliced})
          r.push_back(ops::matmul(input(d, {5, 7}, dt, 32, ka), input(d, {7, 4}, dt, 33, kb)));
    return r;
  }, 1e-5);
  add("matmul_batched", [](Device d) {
    std::vector<Tensor> r;
    Tensor w = input(d, {8, 6}, DType::f32, 34);
    r.push_back(ops::matmul(input(d, {3, 5, 8}, DType::f32, 35), w));                    // shared right operand
    r.push_back(ops::matmul(input(d, {3, 5, 8}, DType::f32, 36, Kind::transposed), w));  // ... with transposed rows
    r.push_back(ops::matmul(input(d, {2, 3, 4, 5}, DType::f32, 37),
                            input(d, {2, 3, 5, 6}, DType::f32, 38, Kind::transposed)));     // strided batch
    r.push_back(ops::matmul(input(d, {4, 1, 3, 5}, DType::f64, 39), input(d, {1, 2, 5, 2}, DType::f64, 40)));  // broadcast
    Tensor big = input(d, {2, 3, 4, 6}, DType::f32, 41);
    r.push_back(ops::matmul(ops::narrow(big, 1, 1, 2), input(d, {2, 2, 6, 3}, DType::f32, 42)));  // irregular batch
    r.push_back(ops::matmul(input(d, {7}, DType::f32, 43), input(d, {7, 3}, DType::f32, 44)));     // vector @ matrix
    r.push_back(ops::matmul(input(d, {3, 7}, DType::f32, 45), input(d, {7}, DType::f32, 46)));     // matrix @ vector
    r.push_back(ops::matmul(input(d, {3, 0}, DType::f32, 47), input(d, {0, 4}, DType::f32, 48)));  // K = 0
    r.push_back(ops::matmul(input(d, {2, 3}, DType::bf16, 49), input(d, {3, 2}, DType::bf16, 50)));
    r.push_back(ops::matmul(input(d, {64, 96}, DType::f32, 51), input(d, {96, 80}, DType::f32, 52, Kind::transposed)));
    return r;
  }, 1e-5);

  // --- indexing
  add("index_ops", [](Device d) {
    std::vector<Tensor> r;
    for (DType idt : {DType::i64, DType::i32}) {
      Tensor idx = ints(d, {2, 0, 2, 4, 1}, idt);
      for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::i32, DType::i64, DType::boolean}) {
        Tensor x = input(d, {5, 6}, dt, 53, Kind::transposed, -9, 9);
        r.push_back(ops::index_select(x, 0, idx));
        r.push_back(ops::index_select(x, 1, idx));
        r.push_back(ops::index_add(x, 0, idx, input(d, {5, 6}, dt, 54, Kind::sliced, -9, 9)));  // repeated rows
      }
      Tensor gidx = ints(d, {0, 2, 1, 2, 2, 0, 1, 1}, idt, {2, 4});
      Tensor x = input(d, {3, 4}, DType::f32, 55, Kind::transposed);
      r.push_back(ops::gather(x, 0, gidx));
      r.push_back(ops::scatter_add(x, 0, gidx, input(d, {2, 4}, DType::f32, 56)));
      r.push_back(ops::scatter_add(x, 1, ints(d, {3, 3, 0, 1, 3, 3, 3, 3}, idt, {2, 4}), input(d, {2, 5}, DType::f32, 57)));
      r.push_back(ops::embedding(input(d, {10, 4}, DType::f32, 58), ints(d, {9, 0, 3, 3, 7, 1}, idt, {2, 3})));
      // An embedding's backward: a long index with many repeats (the sorted path on a GPU).
      std::vector<int64_t> tokens(700);
      for (size_t k = 0; k < tokens.size(); ++k) tokens[k] = int64_t((k * 7919 + k / 5) % 23);
      for (DType dt : {DType::f32, DType::bf16, DType::i64})
        r.push_back(ops::index_add(input(d, {23, 9}, dt, 62, Kind::transposed, -9, 9), 0, ints(d, tokens, idt),
                                   input(d, {700, 9}, dt, 63, Kind::contiguous, -9, 9)));
    }
    return r;
  });
  add("join", [](Device d) {
    Tensor a = input(d, {2, 3}, DType::f32, 59, Kind::transposed), b = input(d, {2, 3}, DType::f32, 60);
    std::vector<Tensor> r{ops::cat({a, b}, 0), ops::cat({a, b}, 1), ops::stack({a, b}, 1)};
    for (const Tensor& t : ops::chunk(input(d, {6, 4}, DType::f64, 61), 3, 0)) r.push_back(ops::contiguous(t));
    return r;
  });

  // --- paths the cases above miss (issue 14, item 7)
  // The 8-wide CPU paths of GELU's and SiLU's backward on sliced inputs with long tails.
  add("gelu_silu_backward", [](Device d) {
    std::vector<Tensor> r;
    for (DType dt : {DType::f32, DType::f64}) {
      Tensor x = input(d, {5, 8}, dt, 81, Kind::transposed, -4, 4);
      Tensor g = input(d, {8}, dt, 82);  // broadcast gradient
      for (UnaryOp op : {UnaryOp::gelu, UnaryOp::silu, UnaryOp::gelu_erf}) r.push_back(ops::unary_backward(op, x, g));
      r.push_back(ops::unary_backward(UnaryOp::gelu, input(d, {6, 7}, dt, 83, Kind::sliced, -9, 9), input(d, {6, 7}, dt, 84)));
      r.push_back(ops::unary_backward(UnaryOp::silu, input(d, {6, 7}, dt, 85, Kind::sliced, -9, 9), input(d, {6, 7}, dt, 86)));
    }
    return r;
  }, 1e-5);
  add("linear_bias", [](Device d) {
    std::vector<Tensor> r;
    for (DType dt : {DType::f32, DType::f64}) {
      Tensor w = input(d, {12, 20}, dt, 87), b = input(d, {12}, dt, 88);
      for (Kind k : {Kind::contiguous, Kind::transposed, Kind::sliced}) {
        Tensor x = input(d, {7, 20}, dt, 89, k);
        r.push_back(ops::linear(x, w, b));
        r.push_back(ops::linear(x, w, Tensor()));
      }
      r.push_back(ops::linear(input(d, {2, 3, 20}, dt, 90), w, b));  // (B, T, in)
      r.push_back(ops::linear(input(d, {2, 3, 20}, dt, 91), input(d, {12, 20}, dt, 92, Kind::transposed), b));  // strided weight
    }
    return r;
  }, 1e-5);
  // bfloat16 operands with a bfloat16 result: written rounded by the product where the backend
  // rounds_products_to_bf16 (the CPU's oneDNN), an f32 product narrowed after elsewhere; the same
  // values up to the order of the sums (one bfloat16 step at most).
  add("bf16_results", [](Device d) {
    const Tensor a = ops::to(input(d, {40, 24}, DType::f32, 111), DType::bf16);
    const Tensor b = ops::to(input(d, {24, 30}, DType::f32, 112), DType::bf16);
    const Tensor w = ops::to(input(d, {30, 24}, DType::f32, 113), DType::bf16);
    const Tensor bias = input(d, {30}, DType::f32, 114);
    return std::vector<Tensor>{ops::to(ops::matmul(a, b, DType::bf16), DType::f32),
                               ops::to(ops::linear(a, w, bias, DType::bf16), DType::f32),
                               ops::to(ops::linear(a, w, Tensor(), DType::bf16), DType::f32)};
  }, 1e-2);
  // Rows of -inf (a fully masked row), with a NaN, or with +inf: the same NaN/inf pattern as the CPU.
  add("nonfinite_rows", [](Device d) {
    std::vector<float> v(4 * 6);
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 7) - 3.0f;
    for (int j = 0; j < 6; ++j) v[size_t(j)] = -INFINITY;  // row 0: all -inf
    v[6 + 2] = NAN;                                        // row 1: a NaN
    v[12 + 4] = INFINITY;                                  // row 2: +inf
    v[18 + 1] = -INFINITY;                                 // row 3: one masked entry
    Tensor x = ops::to(Tensor::from_vector(v, Shape{4, 6}), d);
    return std::vector<Tensor>{ops::softmax(x, -1), ops::log_softmax(x, -1), ops::logsumexp(x, {1}),
                               ops::max(x, {1}), ops::argmax(x, 1), ops::sum(x, {1}),
                               ops::exp(x), ops::gelu(x), ops::sigmoid(x)};
  });
  // More rows than the row kernels' grids hold (65535 * 4 blocks): their grid-stride loops.
  add("past_grid_limits", [](Device d) {
    const int64_t N = 65535 * 4 + 77;
    Tensor x = input(d, {N, 3}, DType::f32, 101);
    return std::vector<Tensor>{ops::softmax(x, -1), ops::sum(x, {1}), ops::argmax(x, 1)};
  }, 1e-5);
  return cases;
}

// NOTE [ Device coverage ]
// Which Backend entry points (and, for unary/binary, which ops) each case exercises. The
// DeviceCoverage test fails when an entry point (the virtuals of class Backend, read from
// backends/backend.h) or an op (from the op lists themselves) has no case here: a new kernel cannot
// land without a CPU-vs-CUDA comparison. unary_float loops over the unary table, so a new row is
// compared on both devices without an edit here.
const std::map<std::string, std::vector<std::string>>& case_coverage() {
  static const std::map<std::string, std::vector<std::string>> coverage = [] {
    std::map<std::string, std::vector<std::string>> c = {
      {"copy_layouts", {"copy", "copy_between_devices"}},
      {"upload", {"upload_async", "wait_upload"}},
      {"copy_conversions", {"copy"}},
      {"copy_into_views", {"copy"}},
      {"fill_arange", {"fill", "arange"}},
      {"random", {"random"}},
      {"unary_float", {"unary", "unary_backward"}},  // and every row of the table, added below
      {"unary_int", {"unary"}},
      {"binary_broadcast",
       {"binary", "binary.add", "binary.sub", "binary.mul", "binary.div", "binary.maximum", "binary.minimum",
        "binary.eq", "binary.ne", "binary.lt", "binary.le", "binary.gt", "binary.ge"}},
      {"where_masked_fill", {"where"}},
      {"reduce_axes", {"reduce"}},
      {"reduce_long_rows", {"reduce"}},
      {"softmax", {"softmax"}},
      {"convert_with_column_sums", {"convert_with_column_sums"}},
      {"matmul_layouts", {"matmul"}},
      {"matmul_batched", {"matmul"}},
      {"index_ops", {"index_select", "gather", "index_add", "scatter_add"}},
      {"join", {"copy"}},
      {"gelu_silu_backward", {"unary_backward"}},
      {"linear_bias", {"linear"}},
      {"bf16_results", {"matmul", "linear", "rounds_products_to_bf16"}},
      {"nonfinite_rows", {"softmax", "reduce", "unary"}},
      {"past_grid_limits", {"softmax", "reduce"}},
    };
    for (const UnaryOpInfo& info : kUnaryOps) c["unary_float"].push_back(std::string("unary.") + info.name);
    return c;
  }();
  return coverage;
}

const std::vector<OpCase>& all_cases() {
  static const std::vector<OpCase> cases = op_cases();
  return cases;
}

}  // namespace

// Names the device in test parameters (instead of gtest's byte dump).
void PrintTo(DeviceType t, std::ostream* os) { *os << (t == DeviceType::cuda ? "cuda" : "cpu"); }

namespace {

class OpOnDevice : public ::testing::TestWithParam<std::tuple<DeviceType, size_t>> {};

TEST_P(OpOnDevice, MatchesCpuAndIsDeterministic) {
  const auto [type, index] = GetParam();
  const OpCase& c = all_cases()[index];
  const Device dev = type == DeviceType::cuda ? Device::cuda(0) : Device::cpu();
  if (dev.is_cuda()) {
    MVGPT_SKIP_WITHOUT_CUDA("case '" << c.name << "' runs against the CPU on a GPU machine (scripts/gpu-check.sh)");
  }
  const std::vector<Tensor> want = c.run(Device::cpu());
  const std::vector<Tensor> got = on_host(c.run(dev));
  const std::vector<Tensor> again = on_host(c.run(dev));
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_TRUE(got[k].device().is_cpu());
    expect_matches(got[k], want[k], c.tol_f32, c.tol_f64, c.name + " output " + std::to_string(k) + " (" + dev.str() + " vs cpu)");
    EXPECT_TRUE(bitwise_equal(got[k], again[k])) << c.name << " output " << k << " differs between two runs on "
                                                 << dev.str();
  }
}

std::vector<size_t> case_indices() {
  std::vector<size_t> v;
  for (size_t i = 0; i < all_cases().size(); ++i) v.push_back(i);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Devices, OpOnDevice,
                         ::testing::Combine(::testing::Values(DeviceType::cpu, DeviceType::cuda),
                                            ::testing::ValuesIn(case_indices())),
                         [](const ::testing::TestParamInfo<OpOnDevice::ParamType>& info) {
                           return std::string(std::get<0>(info.param) == DeviceType::cuda ? "cuda_" : "cpu_") +
                                  all_cases()[std::get<1>(info.param)].name;
                         });

// ---- device coverage: NOTE [ Device coverage ] ----

std::string read_backend_header() {
  std::ifstream in(std::string(MVGPT_SOURCE_DIR) + "/backends/backend.h");
  EXPECT_TRUE(in.good()) << "cannot read backends/backend.h";
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The body of `opening` ... the next "\n};" in the header, comments removed.
std::string body_of(const std::string& header, const std::string& opening) {
  const size_t at = header.find(opening);
  if (at == std::string::npos) return "";
  const size_t end = header.find("\n};", at);
  std::string body = header.substr(at + opening.size(), end - at - opening.size());
  return std::regex_replace(body, std::regex("//[^\n]*"), "");
}

// Every entry point a device implements: the virtuals of class Backend but device(), allocator()
// and synchronize(), which have no result to compare.
std::set<std::string> backend_entry_points(const std::string& header) {
  const std::string body = body_of(header, "class Backend {");
  std::set<std::string> names;
  const std::regex decl(R"(virtual\s+[A-Za-z_:&<> ]+?\s+([a-z_0-9]+)\()");
  for (auto it = std::sregex_iterator(body.begin(), body.end(), decl); it != std::sregex_iterator(); ++it)
    names.insert((*it)[1]);
  for (const char* none : {"device", "allocator", "synchronize"}) names.erase(none);
  return names;
}

// "unary.neg", "binary.add", ...: every op of the two op lists (unary_ops.h, MVGPT_BINARY_OPS).
std::set<std::string> all_ops() {
  std::set<std::string> names;
  for (const UnaryOpInfo& info : kUnaryOps) names.insert(std::string("unary.") + info.name);
  for (BinaryOp op : kBinaryOps) names.insert(std::string("binary.") + binary_op_name(op));
  return names;
}

TEST(DeviceCoverage, EveryBackendEntryPointAndOpHasACpuVsCudaCase) {
  const std::string header = read_backend_header();
  std::set<std::string> required = backend_entry_points(header);
  ASSERT_GE(required.size(), 14u) << "the parse of class Backend found too few entry points";
  ASSERT_TRUE(required.count("matmul") && required.count("copy") && required.count("linear"));
  const std::set<std::string> ops = all_ops();
  required.insert(ops.begin(), ops.end());

  std::set<std::string> covered, case_names;
  for (const OpCase& c : all_cases()) case_names.insert(c.name);
  for (const auto& [name, entries] : case_coverage()) {
    EXPECT_TRUE(case_names.count(name)) << "case_coverage() names '" << name << "', which is no case";
    for (const std::string& e : entries) {
      EXPECT_TRUE(required.count(e)) << "case '" << name << "' claims '" << e << "', which backend.h does not declare";
      covered.insert(e);
    }
  }
  for (const std::string& name : case_names)
    EXPECT_TRUE(case_coverage().count(name)) << "case '" << name << "' is missing from case_coverage()";
  for (const std::string& e : required)
    EXPECT_TRUE(covered.count(e)) << "Backend's '" << e << "' has no CPU-vs-CUDA case in tests/backends/cuda_ops_test.cpp";
}

}  // namespace
}  // namespace mvgpt
