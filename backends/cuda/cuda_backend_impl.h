#pragma once
// The CUDA backend of one device: its stream, cuBLAS handle, caching allocator and pinned staging
// buffer. The entry points live by group in cuda_backend.cpp (devices, transfers), cuda_matmul.cpp
// (cuBLAS), cuda_elementwise.cu, cuda_reduce.cu and cuda_index.cu (the fused ops' kernels are in
// autograd/fused/*.cu, which use this class for the stream); host-only code
// stays in .cpp files so that nvcc compiles only what runs on the device.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <vector>

#include <mvgpt/backends/backend.h>
#include <mvgpt/backends/cuda/cuda_allocator.h>

namespace mvgpt::cuda {

struct CudaEvent;  // an owned cudaEvent_t (cuda_backend.cpp)

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return Device::cuda(index_); }
  Allocator& allocator() override { return allocator_; }
  void synchronize() override;

  void copy(const Tensor& src, const Tensor& dst) override;
  void copy_between_devices(const Tensor& src, const Tensor& dst) override;
  PendingUpload upload_async(const std::vector<Tensor>& host) override;
  void wait_upload(const PendingUpload& upload) override;
  void fill(const Tensor& dst, double value) override;
  void arange(const Tensor& dst, double start, double step) override;
  void random(const Tensor& dst, RandomKind kind, uint64_t seed, uint64_t offset) override;

  void unary(UnaryOp op, const Tensor& x, const Tensor& out, double scalar) override;
  void unary_backward(UnaryOp op, const Tensor& x, const Tensor& grad, const Tensor& out, double scalar) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override;

  void reduce(ReduceOp op, const Tensor& x, const Tensor& out) override;
  void softmax(const Tensor& x, const Tensor& out, bool log) override;

  void matmul(const Tensor& a, const Tensor& b, const Tensor& out) override;

  void index_select(const Tensor& src, int axis, const Tensor& index, const Tensor& out) override;
  void gather(const Tensor& src, int axis, const Tensor& index, const Tensor& out) override;
  void index_add(const Tensor& dst, int axis, const Tensor& index, const Tensor& src) override;
  void scatter_add(const Tensor& dst, int axis, const Tensor& index, const Tensor& src) override;

  Bf16Support bf16_support() override;
  // bf16_support().native without building its text (sm_80 on), for per-call choices.
  bool bf16_tensor_cores() const { return cc_major_ >= 8; }

  // Makes this device current for the calling thread and returns its stream; every entry point
  // starts with it, so work always lands on the right device and stream.
  cudaStream_t activate() const;
  cublasHandle_t cublas() const { return cublas_; }
  // A scratch tensor on this device (from the caching allocator).
  Tensor scratch(const Shape& shape, DType dtype) const { return Tensor::empty(shape, dtype, device()); }

 private:
  int index_;
  int cc_major_ = 0, cc_minor_ = 0;  // compute capability
  CudaAllocator allocator_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::mutex staging_mutex_;  // one transfer at a time uses the pinned buffer
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
  // Uploads (NOTE [ Uploads on a copy stream ]): their own stream and two pinned buffers, used in
  // turn, each with the event of the last copy that read it.
  struct UploadBuffer {
    void* host = nullptr;
    size_t bytes = 0;
    std::shared_ptr<CudaEvent> last;  // recorded after the copy that last read this buffer
  };
  std::mutex upload_mutex_;
  cudaStream_t copy_stream_ = nullptr;
  UploadBuffer upload_buffers_[2];
  int next_upload_buffer_ = 0;
};

// Throws std::logic_error naming `op` when t is not on this backend's device (a bug in the caller).
void require_on(const Tensor& t, Device device, const char* op);

}  // namespace mvgpt::cuda
