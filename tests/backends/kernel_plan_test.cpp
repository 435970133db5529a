// The host-side planning the CPU and CUDA backends share (backends/{merged_dims,matmul_plan,
// reduce_plan,index_plan}.h) and the caching allocator's size classes. The CPU kernels test the
// plans end to end; these checks pin what the CUDA backend (not runnable here) relies on too.
#include <gtest/gtest.h>

#include <mvgpt/backends/index_plan.h>
#include <mvgpt/backends/matmul_plan.h>
#include <mvgpt/backends/merged_dims.h>
#include <mvgpt/backends/reduce_plan.h>
#include <mvgpt/tensor/allocator.h>
#include <mvgpt/tensor/tensor.h>

namespace mvgpt {
namespace {

// A contiguous stand-in for a packed operand, counting the calls.
struct CountingPack {
  int* calls;
  Tensor operator()(const Tensor& t) const {
    ++*calls;
    return Tensor::empty(t.shape(), t.dtype());
  }
};

TEST(MergedDims, MergesContiguousNeighboursAndDropsSizeOne) {
  const Shape shape{2, 1, 3, 4};
  const Strides contiguous{12, 12, 4, 1}, broadcast_rows{0, 0, 0, 1};
  MergedDims<1> flat;
  merge_dims<1>(shape, {&contiguous}, flat);
  EXPECT_EQ(flat.ndim, 1);
  EXPECT_EQ(flat.shape[0], 24);
  EXPECT_EQ(flat.strides[0][0], 1);
  // (2, 3) rows of 4: the broadcast operand keeps the outer dims apart from the inner one.
  MergedDims<2> two;
  merge_dims<2>(shape, {&contiguous, &broadcast_rows}, two);
  ASSERT_EQ(two.ndim, 2);
  EXPECT_EQ(two.shape[0], 6);
  EXPECT_EQ(two.shape[1], 4);
  EXPECT_EQ(two.strides[0][0], 4);
  EXPECT_EQ(two.strides[1][0], 0);
  MergedDims<1> scalar;
  merge_dims<1>(Shape{1, 1}, {&contiguous}, scalar);
  EXPECT_EQ(scalar.ndim, 0);
}

TEST(MatmulPlan, ReadsTransposedViewsAsTheyLieAndPacksOnlyGappedOnes) {
  int packs = 0;
  Tensor t = Tensor::empty({4, 3}, DType::f32);
  Tensor a = t.as_strided({3, 4}, {1, 3}, 0);  // t^T
  Tensor b = Tensor::empty({4, 5}, DType::f32);
  Tensor out = Tensor::empty({3, 5}, DType::f32);
  matmul_plan::MatmulPlan p = matmul_plan::plan(a, b, out, CountingPack{&packs});
  EXPECT_EQ(packs, 0);
  EXPECT_TRUE(p.a.ok && p.a.trans);
  EXPECT_EQ(p.a.ld, 3);
  EXPECT_TRUE(p.b.ok && !p.b.trans);
  EXPECT_EQ(p.b.ld, 5);
  EXPECT_EQ(p.M, 3);
  EXPECT_EQ(p.N, 5);
  EXPECT_EQ(p.K, 4);
  EXPECT_EQ(p.nbatch, 1);
  EXPECT_FALSE(p.tall);

  // Every other row and column of (6, 8): gaps in both strides, so it is packed.
  Tensor big = Tensor::empty({6, 8}, DType::f32);
  Tensor gapped = big.as_strided({3, 4}, {16, 2}, 0);
  p = matmul_plan::plan(gapped, b, out, CountingPack{&packs});
  EXPECT_EQ(packs, 1);
  EXPECT_TRUE(gapped.is_contiguous());
  EXPECT_TRUE(p.a.ok && !p.a.trans);
  EXPECT_EQ(p.a.ld, 4);
}

TEST(MatmulPlan, SharedRightOperandWithEvenRowsIsOneTallGemm) {
  int packs = 0;
  Tensor a = Tensor::empty({2, 3, 4}, DType::f64);
  Tensor w = Tensor::empty({4, 5}, DType::f64);
  Tensor b = w.as_strided({2, 4, 5}, {0, 5, 1}, 0);  // expanded over the batch
  Tensor out = Tensor::empty({2, 3, 5}, DType::f64);
  matmul_plan::MatmulPlan p = matmul_plan::plan(a, b, out, CountingPack{&packs});
  EXPECT_EQ(p.nbatch, 2);
  EXPECT_TRUE(p.tall);
  EXPECT_EQ(p.tall_lda, 4);

  // Rows 0..2 of (2, 5, 4): the batch stride (20) is not 3 rows of 4, so the batch stays a batch.
  Tensor wide = Tensor::empty({2, 5, 4}, DType::f64);
  Tensor uneven = wide.as_strided({2, 3, 4}, {20, 4, 1}, 0);
  p = matmul_plan::plan(uneven, b, out, CountingPack{&packs});
  EXPECT_FALSE(p.tall);
  ASSERT_EQ(p.batch.size(), 1);
  EXPECT_EQ(p.a_batch[0], 20);
  EXPECT_EQ(p.b_batch[0], 0);
  EXPECT_EQ(p.c_batch[0], 15);

  // A transposed left operand, or a right operand that differs per batch: no tall GEMM.
  Tensor at = Tensor::empty({2, 4, 3}, DType::f64).as_strided({2, 3, 4}, {12, 1, 3}, 0);
  EXPECT_FALSE(matmul_plan::plan(at, b, out, CountingPack{&packs}).tall);
  Tensor per_batch = Tensor::empty({2, 4, 5}, DType::f64);
  EXPECT_FALSE(matmul_plan::plan(a, per_batch, out, CountingPack{&packs}).tall);
  EXPECT_EQ(packs, 0);
}

TEST(ReducePlan, SplitsKeptAndReducedDims) {
  Tensor x = Tensor::empty({4, 2, 3}, DType::f32).as_strided({2, 3, 4}, {3, 1, 6}, 0);
  reduce_plan::DimSplit s = reduce_plan::split_dims(x, 1);
  EXPECT_EQ(s.outer_shape, Shape({2}));
  EXPECT_EQ(s.outer_strides, Strides({3}));
  EXPECT_EQ(s.inner_shape, Shape({3, 4}));
  EXPECT_EQ(s.inner_strides, Strides({1, 6}));
  EXPECT_EQ(s.outer_numel, 2);
  EXPECT_EQ(s.inner_numel, 12);
  s = reduce_plan::split_dims(x, 0);  // everything reduced
  EXPECT_EQ(s.outer_shape.size(), 0);
  EXPECT_EQ(s.outer_numel, 1);
  EXPECT_EQ(s.inner_numel, 24);
}

TEST(IndexPlan, AxisStridesOfGatherAndScatterAdd) {
  Tensor index = Tensor::empty({6}, DType::i64).as_strided({3}, {2}, 0);
  EXPECT_EQ(index_plan::along_axis(index, 1, 3), Strides({0, 2, 0}));
  EXPECT_EQ(index_plan::along_axis(Tensor::empty({}, DType::i64), 0, 2), Strides({0, 0}));

  Tensor src = Tensor::empty({3, 4}, DType::f32);
  index_plan::GatherSource g = index_plan::gather_source(src, 0);
  EXPECT_EQ(g.strides, Strides({0, 1}));
  EXPECT_EQ(g.axis_stride, 4);

  // dst (3, 4) += scattered src (3, 2) along axis 1, index over src's shape.
  Tensor dst = Tensor::empty({3, 4}, DType::f32);
  Tensor s2 = Tensor::empty({3, 2}, DType::f32);
  index_plan::ScatterAddPlan p = index_plan::plan_scatter_add(dst, 1, Strides({2, 1}), s2);
  EXPECT_EQ(p.positions, Shape({3}));
  EXPECT_EQ(p.dst, Strides({4}));
  EXPECT_EQ(p.src, Strides({2}));
  EXPECT_EQ(p.index, Strides({2}));
  EXPECT_EQ(p.length, 2);
  EXPECT_EQ(p.dst_axis, 1);
  EXPECT_EQ(p.src_axis, 1);
  EXPECT_EQ(p.index_axis, 1);
}

TEST(CachingAllocator, SizeClassesOfTheCpuAndCudaParameters) {
  // The CPU's (64-byte steps to 4 KiB) are CpuAllocator::round_size.
  for (size_t n : {size_t(0), size_t(1), size_t(64), size_t(65), size_t(4096), size_t(4097), size_t(100000)})
    EXPECT_EQ(CachingAllocator::size_class(n, 64, 4096), CpuAllocator::round_size(n)) << n;
  // The CUDA allocator's: 512-byte steps up to 1 MiB, then 1/8 of the power of two below.
  const size_t MiB = size_t(1) << 20;
  EXPECT_EQ(CachingAllocator::size_class(1, 512, MiB), 512u);
  EXPECT_EQ(CachingAllocator::size_class(513, 512, MiB), 1024u);
  EXPECT_EQ(CachingAllocator::size_class(MiB, 512, MiB), MiB);
  EXPECT_EQ(CachingAllocator::size_class(MiB + 1, 512, MiB), MiB + MiB / 8);
  EXPECT_EQ(CachingAllocator::size_class(3 * MiB, 512, MiB), 3 * MiB);
}

}  // namespace
}  // namespace mvgpt
