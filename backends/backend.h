#pragma once
// The one narrow interface every device implements. Dispatch happens once, on the device of the
// inputs (backend_for). Contract for every entry point:
//  - the ops layer (backends/ops.cpp) has already checked shapes, dtypes and devices, broadcast the
//    inputs (expanded views with stride 0) and allocated `out` (contiguous unless stated);
//  - inputs may be any strided view; math kernels see only f32 or f64 (the ops layer widens bf16),
//    except copy/fill/index ops, which handle every dtype, the comparisons, which also take ints,
//    and the products (matmul, linear), which also take bf16 operands and write f32 (summed in f32),
//    or bf16 where the backend rounds_products_to_bf16;
//  - nothing here knows about autograd.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <mvgpt/backends/unary_ops.h>
#include <mvgpt/tensor/allocator.h>
#include <mvgpt/tensor/tensor.h>

namespace mvgpt {

// The unary ops: one table, backends/unary_ops.h (NOTE [ The unary op table ]).
// The binary ops; comparisons (eq..ge) write bool.
#define MVGPT_BINARY_OPS(X) X(add) X(sub) X(mul) X(div) X(maximum) X(minimum) X(eq) X(ne) X(lt) X(le) X(gt) X(ge)

enum class BinaryOp : uint8_t {
#define MVGPT_BINARY_ENUM(name) name,
  MVGPT_BINARY_OPS(MVGPT_BINARY_ENUM)
#undef MVGPT_BINARY_ENUM
};
inline constexpr BinaryOp kBinaryOps[] = {
#define MVGPT_BINARY_VALUE(name) BinaryOp::name,
    MVGPT_BINARY_OPS(MVGPT_BINARY_VALUE)
#undef MVGPT_BINARY_VALUE
};

enum class ReduceOp : uint8_t { sum, max, min, argmax };

enum class RandomKind : uint8_t { uniform, normal };

const char* unary_op_name(UnaryOp op);
const char* binary_op_name(BinaryOp op);
inline bool is_comparison(BinaryOp op) { return op >= BinaryOp::eq && op <= BinaryOp::ge; }

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual Allocator& allocator() = 0;
  // Waits for queued work (a no-op on the CPU).
  virtual void synchronize() = 0;

  // --- data movement ---
  // dst[i] = convert(src[i]) for same-shape tensors on this device; any strides, any dtypes.
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  // Contiguous copy between this device and the host (one of src/dst is on the CPU), same dtype.
  virtual void copy_between_devices(const Tensor& src, const Tensor& dst) = 0;

  // Host tensors on their way to this device without waiting for them (NOTE [ Uploads on a copy
  // stream ] in backends/cuda/cuda_backend.cpp): the next training batch copied while the step in
  // flight runs. upload_async returns at once with the device tensors and a ticket; wait_upload
  // orders every later use of them (work queued on this device after the call) after the copy.
  // The host tensors may be freed or changed as soon as upload_async returns. The ticket holds the
  // device tensors as well and, dropped without wait_upload, waits for its copy before it lets them
  // go, so their memory is never reused mid-copy, whatever is done with the PendingUpload.
  // Default (the CPU, and any device without a copy stream): the tensors themselves on the CPU,
  // synchronous copies elsewhere; nothing to wait for.
  struct UploadTicket {
    virtual ~UploadTicket() = default;
  };
  struct PendingUpload {
    std::vector<Tensor> tensors;          // on this device, each with its host tensor's shape and values
    std::shared_ptr<UploadTicket> ready;  // null when there is nothing to wait for
  };
  virtual PendingUpload upload_async(const std::vector<Tensor>& host);
  virtual void wait_upload(const PendingUpload& upload);
  virtual void fill(const Tensor& dst, double value) = 0;
  // dst[i] = start + i * step (dst contiguous).
  virtual void arange(const Tensor& dst, double start, double step) = 0;
  // dst[i] = the i-th element of the Philox stream (seed, offset + i) (dst contiguous, f32 or f64).
  virtual void random(const Tensor& dst, RandomKind kind, uint64_t seed, uint64_t offset) = 0;

  // --- elementwise ---
  virtual void unary(UnaryOp op, const Tensor& x, const Tensor& out, double scalar) = 0;
  // out = grad * f'(x) for the unary op f (its derivative column in unary_ops.h); x and grad already
  // have out's shape and its dtype (floating point): the fused backward of every unary op.
  virtual void unary_backward(UnaryOp op, const Tensor& x, const Tensor& grad, const Tensor& out, double scalar) = 0;
  // a and b already have out's shape; comparisons write bool.
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out = cond ? a : b; all have out's shape, cond is bool.
  virtual void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) = 0;

  // --- reductions ---
  // x's shape is out's shape followed by the reduced dims; argmax writes int64 indices into the
  // flattened reduced dims (first maximum wins). Results must not depend on the thread count.
  virtual void reduce(ReduceOp op, const Tensor& x, const Tensor& out) = 0;
  // Softmax or log-softmax over the last axis.
  virtual void softmax(const Tensor& x, const Tensor& out, bool log) = 0;

  // --- a linear layer's incoming gradient ---
  // out = x converted to bfloat16 (as copy) and sums = x's column sums (as reduce over x's rows,
  // bit for bit); x (R, C) contiguous float32, out bfloat16 of its shape, sums float32 (C): the
  // backward's products' operand and the layer's bias gradient. The default runs the two; a backend
  // may read x once for both.
  virtual void convert_with_column_sums(const Tensor& x, const Tensor& out, const Tensor& sums);

  // --- linear algebra ---
  // out (..., M, N) = a (..., M, K) @ b (..., K, N); batch dims already broadcast to out's. Operands
  // f32 or f64 with out of their dtype, or both bf16 with out f32 (products summed in f32), or with
  // out bf16 where rounds_products_to_bf16.
  virtual void matmul(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out (N, O) = x (N, I) @ weight (O, I)^T + bias (O), bias possibly undefined (nn.Linear). The
  // default is matmul then an in-place add; a backend may fold the bias into its GEMM instead.
  // dtypes as matmul's; the bias has out's dtype, f32 for bf16 operands.
  virtual void linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out);
  // Whether matmul and linear also take bf16 operands with a bf16 out: the f32 sums rounded to
  // nearest even as they are written (ops::matmul and ops::linear ask for it where a bfloat16
  // result is wanted; elsewhere they narrow an f32 out afterwards, the same values up to the
  // order of the sums).
  virtual bool rounds_products_to_bf16() const { return false; }

  // --- precision ---
  // Whether this device computes bfloat16 products natively (AMX or AVX512-BF16 on the CPU, tensor
  // cores from compute capability 8.0 on CUDA), and in a few words what it has: for the logs.
  struct Bf16Support {
    bool native = false;
    std::string what;
  };
  virtual Bf16Support bf16_support() = 0;

  // --- indexing (every dtype for src/dst; index is int32 or int64 and already range-checked) ---
  // out = src.index_select(axis, index) with index 1-d.
  virtual void index_select(const Tensor& src, int axis, const Tensor& index, const Tensor& out) = 0;
  // out[..., i, ...] = src[..., index[..., i, ...], ...] along axis; index has out's shape.
  virtual void gather(const Tensor& src, int axis, const Tensor& index, const Tensor& out) = 0;
  // dst.index_select(axis, index) += src, in place; repeated indices accumulate.
  virtual void index_add(const Tensor& dst, int axis, const Tensor& index, const Tensor& src) = 0;
  // dst[..., index[..., i, ...], ...] += src[..., i, ...] along axis, in place.
  virtual void scatter_add(const Tensor& dst, int axis, const Tensor& index, const Tensor& src) = 0;

  // --- fused kernels (each has a reference built from the ops above, tested against it) ---
};

// The backend of a device: the CPU always; CUDA when built and a GPU is present (otherwise a clear error).
Backend& backend_for(Device device);
// True when CUDA was built in and at least one GPU is visible.
bool cuda_available();
int cuda_device_count();
// Why cuda_available() is false: `reason` in a few words ("this build has no CUDA backend", "no CUDA
// GPU is visible", or the runtime's error, "" when available); `error` when the CUDA runtime failed
// (a driver older than the runtime, a broken install) rather than finding no GPU.
struct CudaStatus {
  bool available = false;
  bool error = false;
  std::string reason;
};
CudaStatus cuda_status();

}  // namespace mvgpt
