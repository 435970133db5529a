// The engine: accumulation, grad mode, graph freeing, saved-tensor versions, memory.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include <mvgpt/autograd/function.h>
#include <mvgpt/autograd/ops.h>
#include <mvgpt/backends/ops.h>
#include <mvgpt/tensor/allocator.h>
#include <mvgpt/tensor/grad_state.h>
#include <mvgpt/tensor/util/profile.h>

namespace mvgpt {
namespace {

Tensor vec(std::vector<double> v) { return Tensor::from_vector(v); }
Tensor leaf(std::vector<double> v) { return parameter(vec(std::move(v))); }

void expect_values(const Tensor& t, const std::vector<double>& want, double tol = 1e-12) {
  ASSERT_TRUE(t.defined());
  auto got = t.to_vector<double>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

TEST(Engine, TensorUsedTwiceGetsTheSumOfBothPaths) {
  Tensor x = leaf({1, -2, 3});
  Tensor loss = sum(x * x);  // d/dx = 2x, through both operands of mul
  backward(loss);
  expect_values(x.grad(), {2, -4, 6});
}

TEST(Engine, LeafReachedThroughSeveralBranchesAccumulates) {
  Tensor x = leaf({1, 2});
  Tensor a = exp(x), b = x * 3.0, c = sum(a) + sum(b) + sum(x);
  backward(c);
  expect_values(x.grad(), {std::exp(1.0) + 4, std::exp(2.0) + 4});
}

TEST(Engine, GradientsAccumulateAcrossBackwardCallsUntilZeroed) {
  Tensor x = leaf({1, 2});
  backward(sum(x * 2.0));
  backward(sum(x * 3.0));
  expect_values(x.grad(), {5, 5});
  zero_grad({x});
  EXPECT_FALSE(x.grad().defined());
  backward(sum(x * 2.0));
  zero_grad({x}, /*set_to_none=*/false);
  expect_values(x.grad(), {0, 0});
}

TEST(Engine, InputsOfAddGetDistinctGradientTensors) {
  Tensor x = leaf({1, 2}), y = leaf({3, 4});
  backward(sum(x + y));
  ASSERT_TRUE(x.grad().defined() && y.grad().defined());
  EXPECT_NE(x.grad().storage().get(), y.grad().storage().get());
  // Scaling one in place (as gradient clipping does) leaves the other alone.
  ops::fill_(x.grad(), 7);
  expect_values(y.grad(), {1, 1});
}

TEST(Engine, GivenRootGradientIsNotAliasedIntoLeafGrad) {
  Tensor x = leaf({1, 2});
  Tensor g = vec({5, 6});
  backward(x * 1.0, g);
  expect_values(x.grad(), {5, 6});
  ops::fill_(g, 0);
  expect_values(x.grad(), {5, 6});
}

TEST(Engine, NonScalarRootNeedsAGradient) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 2.0;
  try {
    backward(y);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[2]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(backward(y, vec({1, 2, 3})), std::invalid_argument);               // wrong shape
  EXPECT_THROW(backward(y, Tensor::from_vector<float>({1, 2})), std::invalid_argument);  // wrong dtype
  backward(y, vec({1, -1}));
  expect_values(x.grad(), {2, -2});
}

TEST(Engine, RootMustRequireGrad) {
  Tensor x = vec({1, 2});
  EXPECT_THROW(backward(sum(x)), std::invalid_argument);
  EXPECT_THROW(backward(Tensor()), std::invalid_argument);
}

TEST(Engine, LeafRootGetsItsGradient) {
  Tensor x = parameter(Tensor::scalar(3.0));
  backward(x);
  expect_values(x.grad(), {1});
}

TEST(Engine, NoGradRecordsNothing) {
  Tensor x = leaf({1, 2});
  {
    NoGradGuard guard;
    EXPECT_FALSE(grad_enabled());
    Tensor y = exp(x) * x + 1.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    {
      NoGradGuard nested;
    }
    EXPECT_FALSE(grad_enabled());
  }
  EXPECT_TRUE(grad_enabled());
  EXPECT_TRUE((x * 2.0).requires_grad());
}

TEST(Engine, OpsOnInputsThatNeedNoGradRecordNothing) {
  Tensor a = vec({1, 2}), b = vec({3, 4});
  Tensor y = a * b + exp(a);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
  Tensor z = a * leaf({1, 1});
  ASSERT_NE(z.grad_fn(), nullptr);
  EXPECT_STREQ(z.grad_fn()->name(), "mul");
  // The input that needs no gradient has a null edge.
  EXPECT_EQ(z.grad_fn()->next_edges()[0].node, nullptr);
  EXPECT_NE(z.grad_fn()->next_edges()[1].node, nullptr);
}

TEST(Engine, DetachCutsTheGraph) {
  Tensor x = leaf({1, 2});
  Tensor h = x * 3.0;
  Tensor d = detach(h);
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_EQ(d.storage().get(), h.storage().get());
  Tensor loss = sum(h * d);  // d/dx = 3 d
  backward(loss);
  expect_values(x.grad(), {9, 18});
}

TEST(Engine, IntegerTensorsCannotRequireGrad) {
  Tensor i = Tensor::from_vector<int64_t>({1, 2});
  EXPECT_THROW(i.requires_grad_(), std::invalid_argument);
  EXPECT_THROW(parameter(i), std::invalid_argument);
  Tensor b = ops::gt(vec({1, 2}), vec({2, 1}));
  EXPECT_THROW(b.requires_grad_(), std::invalid_argument);
  // Comparisons and argmax of tensors that require grad give plain results.
  Tensor x = leaf({1, 2});
  EXPECT_FALSE(gt(x, vec({0, 3})).requires_grad());
  EXPECT_FALSE(to(x, DType::i64).requires_grad());
}

TEST(Engine, RetainGraphAllowsASecondBackward) {
  Tensor x = leaf({1, 2});
  Tensor loss = sum(exp(x));
  backward(loss, {}, /*retain_graph=*/true);
  backward(loss);
  expect_values(x.grad(), {2 * std::exp(1.0), 2 * std::exp(2.0)});
}

TEST(Engine, SecondBackwardThroughAFreedGraphThrows) {
  Tensor x = leaf({1, 2});
  Tensor h = exp(x);
  Tensor loss = sum(h);
  backward(loss);
  try {
    backward(loss);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("retain_graph=true"), std::string::npos) << e.what();
  }
  // A new graph through the freed intermediate fails the same way.
  EXPECT_THROW(backward(sum(h * 2.0)), std::runtime_error);
  // A new graph from the leaf works.
  backward(sum(x));
}

TEST(Engine, InPlaceWriteIntoASavedTensorIsCaught) {
  Tensor x = leaf({1, 2});
  Tensor w = vec({3, 4});
  Tensor loss = sum(x * w);  // mul saves w for x's gradient
  ops::copy_(w, vec({5, 6}));
  try {
    backward(loss);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("mul: a tensor saved for backward was modified in place"), std::string::npos) << msg;
    EXPECT_NE(msg.find("clone it"), std::string::npos) << msg;
  }
}

TEST(Engine, InPlaceWriteIntoAViewOfASavedTensorIsCaught) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = exp(x);  // saves its input (its backward is grad * exp(x))
  Tensor loss = sum(y);
  ops::fill_(ops::narrow(x.detach(), 0, 1, 1), 0);  // the same storage
  EXPECT_THROW(backward(loss), std::runtime_error);
}

TEST(Engine, OnlyWhatBackwardNeedsIsSaved) {
  Tensor x = leaf({1, 2});
  Tensor c = vec({3, 4});
  // add saves nothing: overwriting its inputs does not matter.
  Tensor loss = sum(x + c);
  ops::copy_(c, vec({0, 0}));
  backward(loss);
  expect_values(x.grad(), {1, 1});
  // mul of a tensor that needs no gradient does not save the leaf.
  Tensor x2 = leaf({1, 2});
  Tensor c2 = vec({3, 4});
  Tensor loss2 = sum(c2 * x2);
  ops::copy_(x2.detach(), vec({9, 9}));  // x2's value is not needed for x2's gradient
  backward(loss2);
  expect_values(x2.grad(), {3, 4});
}

TEST(Engine, LongChainsNeitherRecurseNorLeak) {
  const size_t base = allocator_for(Device::cpu()).live_bytes();
  {
    Tensor x = leaf({1, 2, 3, 4});
    Tensor y = x;
    for (int i = 0; i < 20000; ++i) y = y + 1e-3;
    backward(sum(y));
    expect_values(x.grad(), {1, 1, 1, 1});
    // Dropping a long graph that was never run must not overflow the stack either.
    Tensor z = x;
    for (int i = 0; i < 20000; ++i) z = z * 1.0;
  }
  EXPECT_EQ(allocator_for(Device::cpu()).live_bytes(), base);
}

TEST(Engine, MemoryReturnsToBaselineAfterBackward) {
  auto& alloc = allocator_for(Device::cpu());
  const size_t base = alloc.live_bytes();
  {
    Tensor w = parameter(ops::randn({16, 16}, DType::f32));
    Tensor x = ops::randn({8, 16}, DType::f32);
    const size_t with_inputs = alloc.live_bytes();
    Tensor loss = sum(tanh(matmul(x, w)) * 2.0);
    EXPECT_GT(alloc.live_bytes(), with_inputs);  // saved activations
    backward(loss);
    ASSERT_TRUE(w.grad().defined());
    loss = Tensor();
    // Only the inputs and w.grad remain.
    EXPECT_EQ(alloc.live_bytes(), with_inputs + CpuAllocator::round_size(w.grad().nbytes()));
  }
  EXPECT_EQ(alloc.live_bytes(), base);
}

TEST(Engine, GradReturnsGradientsWithoutTouchingLeaves) {
  Tensor x = leaf({1, 2}), y = leaf({3, 4});
  Tensor h = x * y;
  Tensor out = sum(h * h);
  auto g = autograd::grad(out, {x, h, vec({1, 1})}, {}, /*retain_graph=*/true);
  expect_values(g[0], {2 * 3 * 3 * 1, 2 * 4 * 4 * 2});  // 2 x y^2
  expect_values(g[1], {2 * 3, 2 * 8});                   // 2 h
  EXPECT_FALSE(g[2].defined());
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(y.grad().defined());
}

TEST(Engine, BackwardOrderIsDeterministic) {
  // The same graph twice gives bitwise equal gradients.
  Generator g1(3), g2(3);
  Tensor a = parameter(ops::randn({6}, DType::f32, Device::cpu(), &g1));
  Tensor b = parameter(ops::randn({6}, DType::f32, Device::cpu(), &g2));
  for (Tensor* t : {&a, &b}) {
    Tensor u = exp(*t) * *t, v = sigmoid(*t) + u;
    backward(sum(v * u + v));
  }
  EXPECT_EQ(a.grad().to_vector<float>(), b.grad().to_vector<float>());
}

TEST(Engine, ZeroSizeTensorsGetZeroSizeGradients) {
  Tensor x = parameter(ops::zeros({0, 3}, DType::f64));
  Tensor y = parameter(ops::ones({2, 3}, DType::f64));
  Tensor both = cat({x * 2.0, y}, 0);  // (2, 3)
  backward(sum(exp(x)) + sum(both));
  EXPECT_EQ(x.grad().shape(), (Shape{0, 3}));
  expect_values(y.grad(), {1, 1, 1, 1, 1, 1});
}

TEST(Engine, NodesCarrySequenceNumbersInCreationOrder) {
  Tensor x = leaf({1});
  Tensor a = x * 2.0, b = a + 1.0;
  EXPECT_LT(a.grad_fn()->sequence_nr(), b.grad_fn()->sequence_nr());
}

// --- gradient blocks (NOTE [ Gradient blocks ] in autograd/engine.cpp) ---

// (rows, cols) of value row * cols + col + 1, as a float64 leaf.
Tensor counting_leaf(int64_t rows, int64_t cols) {
  std::vector<double> v(size_t(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = double(i + 1);
  return parameter(ops::reshape(vec(v), {rows, cols}));
}

// Frees 32 NaN-filled blocks of n doubles at once, so that the caching allocator hands them to the
// next allocations of that size class (temporaries of the backward among them): a gradient buffer
// whose unwritten part is not zero-filled then shows NaN. Call it after the forward.
void poison_next_allocations(int64_t n) {
  std::vector<Tensor> blocks;
  for (int i = 0; i < 32; ++i) blocks.push_back(ops::full({n}, NAN, DType::f64));
}

int64_t calls_of(const profile::Report& r, const std::string& op) {
  int64_t n = 0;
  for (const profile::Row& row : r.rows) n += row.op == op ? row.calls : 0;
  return n;
}

TEST(Engine, SplitPiecesMeetInOneBufferWithoutFillsOrAdds) {
  Tensor x = counting_leaf(2, 6);
  Tensor h = x * 1.0;  // the pieces' gradients meet in h's buffer
  auto p = split(h, {1, 3, 2}, 1);
  Tensor loss = sum(p[0] * 2.0) + sum(p[1] * 3.0) + sum(p[2] * 5.0);
  poison_next_allocations(12);
  profile::Recording rec;
  backward(loss);
  const profile::Report report = rec.stop();
  expect_values(x.grad(), {2, 3, 3, 3, 5, 5, 2, 3, 3, 3, 5, 5});
  EXPECT_EQ(calls_of(report, "fill"), 1);  // the root's gradient of 1, none around the pieces
  EXPECT_EQ(calls_of(report, "add"), 0);
  EXPECT_EQ(calls_of(report, "copy"), 3);  // each piece into its block
}

// The gradient of a (rows, cols) counting leaf x through loss(x * 1.0), the backward's
// allocations poisoned: the blocks meet in the buffer of x * 1.0.
void expect_gradient_through_blocks(int64_t rows, int64_t cols, const std::function<Tensor(const Tensor&)>& loss,
                                    const std::vector<double>& want) {
  Tensor x = counting_leaf(rows, cols);
  Tensor l = loss(x * 1.0);
  poison_next_allocations(rows * cols);
  backward(l);
  expect_values(x.grad(), want);
}

TEST(Engine, WhatNoBlockCoversIsZero) {
  expect_gradient_through_blocks(3, 6, [](const Tensor& h) {
    auto p = split(h, {1, 1, 2, 1, 1}, 1);
    return sum(p[1] * 2.0) + sum(p[3] * 3.0);  // columns 0, 2, 3 and 5 get nothing
  }, {0, 2, 0, 0, 3, 0, 0, 2, 0, 0, 3, 0, 0, 2, 0, 0, 3, 0});
}

TEST(Engine, OverlappingBlocksAdd) {
  expect_gradient_through_blocks(1, 6, [](const Tensor& h) {
    return sum(narrow(h, 1, 0, 4) * 2.0) + sum(narrow(h, 1, 2, 4) * 3.0) + sum(narrow(h, 1, 3, 1));
  }, {2, 2, 5, 6, 3, 3});
}

TEST(Engine, BlocksAlongTwoAxesAdd) {
  expect_gradient_through_blocks(3, 4, [](const Tensor& h) {
    return sum(narrow(h, 0, 1, 2) * 2.0) + sum(narrow(h, -1, 1, 2) * 3.0);
  }, {0, 3, 3, 0, 2, 5, 5, 2, 2, 5, 5, 2});
}

TEST(Engine, BlocksAndWholeGradientsAddInEitherOrder) {
  for (bool block_first : {true, false}) {
    Tensor x = counting_leaf(2, 3);
    Tensor h = x * 1.0;
    // Backward runs the later op first: its gradient reaches h's buffer first.
    Tensor block, whole;
    if (block_first) {
      whole = sum(h * h);  // d whole / dh = 2h
      block = sum(narrow(h, 1, 1, 2) * 2.0);
    } else {
      block = sum(narrow(h, 1, 1, 2) * 2.0);
      whole = sum(h * h);
    }
    backward(block + whole);
    expect_values(x.grad(), {2, 6, 8, 8, 12, 14});
    // On a leaf, after or before sum's gradient (a broadcast view, which the block must not be
    // written into).
    Tensor y = counting_leaf(1, 3);
    backward(block_first ? sum(narrow(y, 1, 0, 1)) + sum(y) : sum(y) + sum(narrow(y, 1, 0, 1)));
    expect_values(y.grad(), {2, 1, 1});
  }
}

TEST(Engine, SelectedRowsMeetInOneBuffer) {
  expect_gradient_through_blocks(3, 2, [](const Tensor& h) {
    return sum(select(h, 0, 0) * 2.0) + sum(select(h, 0, -1) * 3.0) + sum(select(h, -1, 1) * 5.0);
  }, {2, 7, 0, 5, 3, 8});
}

TEST(Engine, GradOfAPartlyCoveredTensorIsCompleted) {
  Tensor x = counting_leaf(2, 4);
  Tensor h = x * 1.0;
  auto p = split(h, {2, 2}, 1);
  Tensor loss = sum(p[0] * 3.0);
  poison_next_allocations(8);
  auto g = autograd::grad(loss, {h});
  expect_values(g[0], {3, 3, 0, 0, 3, 3, 0, 0});
}

// A node whose block lies outside its input is a bug in that node: named, not written.
class MisplacedBlock final : public autograd::Node {
 public:
  explicit MisplacedBlock(autograd::GradientBlock block) : block_(block) {}
  const char* name() const override { return "misplaced"; }
  std::vector<Tensor> backward(const Tensor& g) override { return {g}; }
  std::optional<autograd::GradientBlock> gradient_block(size_t) const override { return block_; }

 private:
  autograd::GradientBlock block_;
};

TEST(Engine, ABlockOutsideItsInputIsRefused) {
  // A (2, 2) block of a (3, 2) input: at row 2 it reaches past it; axes -1 and 2 do not exist.
  for (auto [block, where] : {std::pair{autograd::GradientBlock{0, 2}, "the block at 2 along axis 0"},
                              {autograd::GradientBlock{-1, 0}, "along axis -1"},
                              {autograd::GradientBlock{2, 0}, "along axis 2"}}) {
    Tensor x = counting_leaf(3, 2);
    auto node = std::make_shared<MisplacedBlock>(block);
    node->set_next_edges({autograd::edge_to(x)});
    Tensor y = autograd::attach(ops::narrow(x.detach(), 0, 0, 2), node);
    try {
      backward(sum(y));
      ADD_FAILURE() << "expected a logic_error for " << where;
    } catch (const std::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
    }
  }
}

TEST(Engine, InputsOfAddGetDistinctGradientsWhenTheGradientIsDense) {
  // add's backward hands one dense tensor to both inputs (sum's gradient is a broadcast view,
  // which the leaves copy anyway; mul's is a fresh dense tensor, which a leaf may keep).
  Tensor x = leaf({1, 2}), y = leaf({3, 4});
  backward(sum((x + y) * 2.0));
  ASSERT_TRUE(x.grad().defined() && y.grad().defined());
  EXPECT_NE(x.grad().storage().get(), y.grad().storage().get());
  ops::fill_(x.grad(), 7);
  expect_values(y.grad(), {2, 2});
}

TEST(Engine, SumsAreNeverWrittenIntoAGradientSomeoneKeeps) {
  // x reaches the loss by two paths; one op's backward returns a tensor it also keeps. Where the
  // two gradients meet, the sum may be written into one of them (NOTE [ Sums gathered in place ] in
  // backends/ops_elementwise.cpp), never into the kept one.
  for (bool kept_first : {false, true}) {
    Tensor kept;
    Tensor x = leaf({1, 2});
    auto keeping = [&](const Tensor& in) {
      Tensor y;
      {
        const autograd::InternalOps internal;
        y = ops::clone(in);
      }
      return autograd::record("keeping", y, {autograd::edge_to(in)}, [&kept](const Tensor& g) -> autograd::Grads {
        kept = ops::mul(g, 3.0);
        return {kept};
      });
    };
    Tensor loss = kept_first ? sum(x * 2.0) + sum(keeping(x)) : sum(keeping(x)) + sum(x * 2.0);
    backward(loss);
    expect_values(x.grad(), {5, 5});
    expect_values(kept, {3, 3});
    EXPECT_NE(kept.storage().get(), x.grad().storage().get());
  }
}

}  // namespace
}  // namespace mvgpt
