#pragma once
// The CPU backend: OpenBLAS for GEMM, oneTBB for parallel loops. Each group of entry points lives in
// a file of its own (cpu_copy.cpp, cpu_elementwise.cpp, cpu_reduce.cpp, cpu_matmul.cpp,
// cpu_index.cpp; the fused ops' kernels are in autograd/fused/).
#include <mvgpt/backends/backend.h>

namespace mvgpt::cpu {

class CpuBackend final : public Backend {
 public:
  CpuBackend();
  Device device() const override { return Device::cpu(); }
  Allocator& allocator() override;
  void synchronize() override {}

  void copy(const Tensor& src, const Tensor& dst) override;
  void copy_between_devices(const Tensor& src, const Tensor& dst) override;
  void fill(const Tensor& dst, double value) override;
  void arange(const Tensor& dst, double start, double step) override;
  void random(const Tensor& dst, RandomKind kind, uint64_t seed, uint64_t offset) override;

  void unary(UnaryOp op, const Tensor& x, const Tensor& out, double scalar) override;
  void unary_backward(UnaryOp op, const Tensor& x, const Tensor& grad, const Tensor& out, double scalar) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override;

  void reduce(ReduceOp op, const Tensor& x, const Tensor& out) override;
  void softmax(const Tensor& x, const Tensor& out, bool log) override;

  void convert_with_column_sums(const Tensor& x, const Tensor& out, const Tensor& sums) override;
  void matmul(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out) override;
  bool rounds_products_to_bf16() const override { return true; }

  void index_select(const Tensor& src, int axis, const Tensor& index, const Tensor& out) override;
  void gather(const Tensor& src, int axis, const Tensor& index, const Tensor& out) override;
  void index_add(const Tensor& dst, int axis, const Tensor& index, const Tensor& src) override;
  void scatter_add(const Tensor& dst, int axis, const Tensor& index, const Tensor& src) override;

  Bf16Support bf16_support() override;
};

}  // namespace mvgpt::cpu
