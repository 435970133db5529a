// Indexing and joining against naive loops: any layout, repeated indices, range errors.
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <vector>

#include <mvgpt/backends/ops.h>
#include "ops_test_util.h"

namespace mvgpt {
namespace {

using testing::expect_all_close;
using testing::expect_throw_with;
using testing::Kind;
using testing::make_input;

// Row-major coordinates of element i of `shape`, and back.
std::vector<int64_t> coords(const Shape& shape, int64_t i) {
  std::vector<int64_t> c(size_t(shape.size()));
  for (int d = shape.size() - 1; d >= 0; --d) c[size_t(d)] = i % shape[d], i /= shape[d];
  return c;
}
int64_t flat(const Shape& shape, const std::vector<int64_t>& c) {
  int64_t i = 0;
  for (int d = 0; d < shape.size(); ++d) i = i * shape[d] + c[size_t(d)];
  return i;
}

Tensor indices(const std::vector<int64_t>& v, DType dt, Shape shape = {}) {
  if (shape.empty()) shape = {int64_t(v.size())};
  return ops::to(Tensor::from_vector<int64_t>(v, shape), dt);
}

TEST(OpsIndex, IndexSelectEveryAxisLayoutAndIndexDtype) {
  for (DType idt : {DType::i32, DType::i64}) {
    for (Kind kind : testing::kAllKinds) {
      Tensor x = make_input({4, 5, 6}, DType::f32, 1, kind);
      for (int axis : {0, 1, 2}) {
        // Every other element of a longer index: a strided index tensor.
        Tensor index = ops::narrow(ops::reshape(indices({3, 9, 0, 9, 3, 9, 1, 9}, idt), {4, 2}), 1, 0, 1);
        index = ops::squeeze(index, 1);
        Tensor y = ops::index_select(x, axis, index);
        Shape s = x.shape();
        s[axis] = 4;
        ASSERT_EQ(y.shape(), s);
        expect_all_close(y, [&](int64_t i) {
          auto c = coords(s, i);
          c[size_t(axis)] = int64_t(read_element(index, c[size_t(axis)]));
          return read_element(x, flat(x.shape(), c));
        }, 0, std::string("index_select ") + testing::kind_name(kind));
      }
    }
  }
  EXPECT_EQ(ops::index_select(ops::zeros({3, 2}), 0, indices({}, DType::i64, {0})).shape(), (Shape{0, 2}));
}

TEST(OpsIndex, GatherAlongEachAxis) {
  Tensor x = make_input({4, 5}, DType::f64, 2, Kind::transposed);
  Tensor i0 = indices({3, 0, 1, 1, 2, 0, 0, 3}, DType::i64, {2, 4});  // axis 0: index (2, 4) fits in (4, 5)
  Tensor y0 = ops::gather(x, 0, i0);
  expect_all_close(y0, [&](int64_t i) {
    auto c = coords(i0.shape(), i);
    return read_element(x, int64_t(read_element(i0, i)) * 5 + c[1]);
  }, 0, "gather axis 0");
  Tensor i1 = indices({4, 4, 0, 1, 2, 3}, DType::i32, {3, 2});
  Tensor y1 = ops::gather(x, 1, i1);
  expect_all_close(y1, [&](int64_t i) {
    auto c = coords(i1.shape(), i);
    return read_element(x, c[0] * 5 + int64_t(read_element(i1, i)));
  }, 0, "gather axis 1");
}

TEST(OpsIndex, IndexAddAccumulatesRepeatedIndicesDeterministically) {
  Tensor x = make_input({5, 300}, DType::f32, 3);
  std::vector<int64_t> ids(2000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t((i * 7) % 5);
  Tensor index = indices(ids, DType::i64);
  Tensor src = make_input({2000, 300}, DType::f32, 4, Kind::transposed);
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 2}) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, size_t(threads));
    runs.push_back(ops::index_add(x, 0, index, src).to_vector<float>());
  }
  EXPECT_EQ(runs[0], runs[1]);
  Tensor y = ops::index_add(x, 0, index, src);
  expect_all_close(y, [&](int64_t i) {
    int64_t r = i / 300, c = i % 300;
    double acc = read_element(x, i);
    for (size_t k = 0; k < ids.size(); ++k)
      if (ids[k] == r) acc += read_element(src, int64_t(k) * 300 + c);
    return acc;
  }, 1e-5, "index_add");
  // x is untouched (out of place), and other axes work.
  EXPECT_EQ(read_element(x, 0), double(float(testing::value_at(3, 0))));
  Tensor z = ops::index_add(ops::zeros({2, 3}, DType::f64), 1, indices({2, 2, 0}, DType::i32), ops::ones({2, 3}, DType::f64));
  EXPECT_EQ(z.to_vector<double>(), (std::vector<double>{1, 0, 2, 1, 0, 2}));
}

TEST(OpsIndex, ScatterAddMatchesNaive) {
  Tensor x = make_input({3, 6}, DType::f64, 5);
  Tensor index = indices({0, 5, 5, 1, 2, 2, 2, 0}, DType::i64, {2, 4});
  Tensor src = make_input({3, 5}, DType::f64, 6, Kind::sliced);  // larger than index: only [:2, :4] is used
  Tensor y = ops::scatter_add(x, 1, index, src);
  std::vector<double> ref(18);
  for (int64_t i = 0; i < 18; ++i) ref[size_t(i)] = read_element(x, i);
  for (int64_t i = 0; i < 8; ++i) {
    int64_t r = i / 4, c = i % 4;
    ref[size_t(r * 6 + int64_t(read_element(index, i)))] += read_element(src, r * 5 + c);
  }
  expect_all_close(y, [&](int64_t i) { return ref[size_t(i)]; }, 1e-12, "scatter_add");
}

// The in-place forms (the backward of a read scatters into zeros it made): the out-of-place op's
// values in x itself, its version bumped; a non-contiguous x is refused.
TEST(OpsIndex, InPlaceAddsWriteTheOutOfPlaceValuesIntoX) {
  const Tensor x0 = make_input({5, 7}, DType::f32, 7);
  const Tensor index = indices({4, 0, 4, 2}, DType::i64);
  const Tensor rows = make_input({4, 7}, DType::f32, 8);
  Tensor x = ops::clone(x0);
  const uint64_t version = x.version();
  ops::index_add_(x, 0, index, rows);
  EXPECT_EQ(x.to_vector<float>(), ops::index_add(x0, 0, index, rows).to_vector<float>());
  EXPECT_GT(x.version(), version);
  const Tensor where = indices({6, 0, 6, 1, 3, 3, 3, 2}, DType::i64, {2, 4});
  const Tensor src = make_input({2, 4}, DType::f32, 9);
  Tensor y = ops::clone(x0);
  ops::scatter_add_(y, 1, where, src);
  EXPECT_EQ(y.to_vector<float>(), ops::scatter_add(x0, 1, where, src).to_vector<float>());
  const Tensor column = ops::expand(ops::zeros({5, 1}), {5, 7});
  expect_throw_with([&] { ops::index_add_(column, 0, index, rows); }, "index_add_: x of shape [5, 7] is not contiguous");
  expect_throw_with([&] { ops::scatter_add_(ops::transpose(ops::clone(x0), 0, 1), 0, where, src); },
                    "scatter_add_: x of shape [7, 5] is not contiguous");
}

TEST(OpsIndex, EmbeddingLooksUpRows) {
  Tensor w = make_input({10, 4}, DType::f32, 7);
  Tensor ids = indices({9, 0, 3, 3, 1, 9}, DType::i64, {2, 3});
  Tensor e = ops::embedding(w, ids);
  ASSERT_EQ(e.shape(), (Shape{2, 3, 4}));
  expect_all_close(e, [&](int64_t i) { return read_element(w, int64_t(read_element(ids, i / 4)) * 4 + i % 4); }, 0,
                   "embedding");
  Tensor bf = ops::embedding(ops::to(w, DType::bf16), ids);
  EXPECT_EQ(bf.dtype(), DType::bf16);
}

TEST(OpsIndex, ErrorsNameTheOpIndexAndAxis) {
  Tensor x = ops::zeros({10, 3});
  expect_throw_with([&] { ops::index_select(x, 0, indices({1, 12}, DType::i64)); },
                    "index_select: index 12 is out of range for axis 0 of size 10");
  expect_throw_with([&] { ops::index_select(x, 1, indices({-1}, DType::i32)); },
                    "index_select: index -1 is out of range for axis 1 of size 3");
  expect_throw_with([&] { ops::index_select(x, 0, ops::zeros({2})); }, "index_select: indices must be int32 or int64");
  expect_throw_with([&] { ops::index_select(x, 0, indices({0, 1, 2, 3}, DType::i64, {2, 2})); },
                    "index_select: index must be 1-d");
  expect_throw_with([&] { ops::gather(x, 1, indices({0, 1}, DType::i64)); }, "gather: index has 1 dimensions");
  expect_throw_with([&] { ops::gather(x, 1, indices({0, 5}, DType::i64, {2, 1})); },
                    "gather: index 5 is out of range for axis 1 of size 3");
  expect_throw_with([&] { ops::index_add(x, 0, indices({1}, DType::i64), ops::zeros({2, 3})); },
                    "index_add: src of shape [2, 3] does not match [1, 3]");
  expect_throw_with([&] { ops::index_add(x, 0, indices({1}, DType::i64), ops::zeros({1, 3}, DType::f64)); },
                    "index_add: dtype float32 vs float64");
  expect_throw_with([&] { ops::scatter_add(x, 0, indices({1, 2, 3}, DType::i64, {1, 3}), ops::zeros({1, 2})); },
                    "scatter_add: index of shape [1, 3] is larger than src");
  expect_throw_with([&] { ops::embedding(ops::zeros({4}), indices({0}, DType::i64)); },
                    "embedding: weight must have 2 dimensions, found 1");
  expect_throw_with([&] { ops::embedding(ops::zeros({4, 2}), indices({4}, DType::i64)); },
                    "index_select: index 4 is out of range for axis 0 of size 4");
}

TEST(OpsJoin, CatStackSplitChunk) {
  Tensor a = make_input({2, 3, 4}, DType::f32, 1, Kind::transposed);
  Tensor b = make_input({2, 1, 4}, DType::f32, 2);
  Tensor c = make_input({2, 0, 4}, DType::f32, 3);
  Tensor y = ops::cat({a, c, b}, 1);
  ASSERT_EQ(y.shape(), (Shape{2, 4, 4}));
  expect_all_close(y, [&](int64_t i) {
    auto co = coords(y.shape(), i);
    if (co[1] < 3) return read_element(a, flat(a.shape(), co));
    co[1] -= 3;
    return read_element(b, flat(b.shape(), co));
  }, 0, "cat axis 1");
  Tensor s = ops::stack({a, a, ops::mul(a, 2.0)}, -1);
  ASSERT_EQ(s.shape(), (Shape{2, 3, 4, 3}));
  expect_all_close(s, [&](int64_t i) { return read_element(a, i / 3) * (i % 3 == 2 ? 2 : 1); }, 0, "stack");

  auto parts = ops::split(y, {1, 0, 3}, 1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(parts[2].storage(), y.storage());  // views
  expect_all_close(parts[0], [&](int64_t i) { return read_element(a, (i / 4) * 12 + i % 4); }, 0, "split");
  auto ch = ops::chunk(ops::arange(0, 10), 4, 0);
  ASSERT_EQ(ch.size(), 4u);
  EXPECT_EQ(ch[3].to_vector<int64_t>(), (std::vector<int64_t>{9}));
  EXPECT_EQ(ops::chunk(ops::arange(0, 2), 3, 0).size(), 2u);

  expect_throw_with([&] { ops::cat({a, b}, 0); }, "cat: tensor 1 has shape [2, 1, 4], which differs from [2, 3, 4]");
  expect_throw_with([&] { ops::cat({a, ops::to(a, DType::f64)}, 0); }, "cat: dtype float32 vs float64");
  expect_throw_with([&] { ops::cat({}, 0); }, "cat: expected at least one tensor");
  expect_throw_with([&] { ops::stack({a, b}, 0); }, "stack: tensor 1 has shape [2, 1, 4], expected [2, 3, 4]");
  expect_throw_with([&] { ops::split(a, {1, 1}, 1); }, "split: sizes add up to 2 but axis 1 has size 3");
  expect_throw_with([&] { ops::chunk(a, 0, 1); }, "chunk: chunks must be positive");
}

}  // namespace
}  // namespace mvgpt
