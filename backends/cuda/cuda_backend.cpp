// Devices, streams and host <-> device transfers of the CUDA backend (host code only).
#include <mvgpt/backends/cuda/cuda_backend.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include <mvgpt/backends/cuda/cuda_backend_impl.h>
#include <mvgpt/backends/deferred_checks.h>
#include <mvgpt/backends/ops.h>  // contiguous
#include <mvgpt/backends/cuda/cuda_check.h>

namespace mvgpt::cuda {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error ") + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) +
                           ") in " + call + " at " + file + ":" + std::to_string(line));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw std::runtime_error(std::string("cuBLAS error ") + cublasGetStatusName(status) + " (" +
                           cublasGetStatusString(status) + ") in " + call + " at " + file + ":" + std::to_string(line));
}

namespace {
std::atomic<int64_t> g_launches{0};
}  // namespace

void count_launches(int64_t n) { g_launches.fetch_add(n, std::memory_order_relaxed); }
int64_t kernel_launches() { return g_launches.load(std::memory_order_relaxed); }

void require_on(const Tensor& t, Device device, const char* op) {
  if (t.defined() && !(t.device() == device))
    throw std::logic_error(std::string(op) + ": a tensor on " + t.device().str() + " reached the backend of " +
                           device.str());
}

bool built_with_cuda() { return true; }

namespace {

// What cudaGetDeviceCount said, asked once. No GPU, or no NVIDIA driver at all, is an answer (0
// devices, CPU-only runs go on); any other error (a driver older than the runtime, a broken install)
// also counts as 0 devices but is marked failed and keeps its reason, so that --device auto can say
// why it runs on the CPU.
struct DeviceCount {
  int count = 0;
  bool failed = false;
  std::string error;
};

const DeviceCount& device_count_answer() {
  static const DeviceCount answer = [] {
    DeviceCount a;
    const cudaError_t status = cudaGetDeviceCount(&a.count);
    if (status == cudaSuccess) {
      if (a.count == 0) a.error = "no CUDA GPU is visible";
      return a;
    }
    cudaGetLastError();  // clear the error so later calls start clean
    a.count = 0;
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);  // 0 when no driver is installed
    const auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
    if (status == cudaErrorNoDevice) {
      a.error = "no CUDA GPU is visible";
    } else if (driver == 0) {
      a.error = "no CUDA GPU is visible (no NVIDIA driver is installed)";
    } else {
      a.failed = true;
      a.error = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(status) + " (" +
                cudaGetErrorString(status) + ")";
      if (status == cudaErrorInsufficientDriver || driver < runtime)
        a.error += "; the NVIDIA driver supports CUDA " + version(driver) + ", this build needs " + version(runtime) +
                   ": update the driver";
    }
    return a;
  }();
  return answer;
}

}  // namespace

int device_count() { return device_count_answer().count; }

std::string device_count_error() { return device_count_answer().error; }

bool device_count_failed() { return device_count_answer().failed; }

namespace {
constexpr int kMaxDevices = 64;
}  // namespace

Backend& backend(int index) {
  const int n = device_count();
  if (index < 0 || index >= n)
    throw std::runtime_error("cuda:" + std::to_string(index) + " requested, but " +
                             (n == 0 ? device_count_error() + "; use --device cpu"
                                     : std::to_string(n) + " CUDA device(s) are visible"));
  if (index >= kMaxDevices) throw std::runtime_error("cuda:" + std::to_string(index) + ": too many devices");
  // Created on first use and never destroyed: tensors held in static objects may free memory at exit.
  static std::array<CudaBackend*, kMaxDevices> backends{};
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  if (!backends[size_t(index)]) backends[size_t(index)] = new CudaBackend(index);
  return *backends[size_t(index)];
}

MemoryInfo memory_info(int index) {
  const int n = device_count();
  if (index < 0 || index >= n)
    throw std::runtime_error("cuda:" + std::to_string(index) + ": no such GPU (" + std::to_string(n) + " visible)");
  // cudaMemGetInfo answers for the current device: switch to it and back.
  int current = 0;
  MVGPT_CUDA_CHECK(cudaGetDevice(&current));
  MVGPT_CUDA_CHECK(cudaSetDevice(index));
  MemoryInfo info;
  const cudaError_t status = cudaMemGetInfo(&info.free, &info.total);
  MVGPT_CUDA_CHECK(cudaSetDevice(current));
  MVGPT_CUDA_CHECK(status);
  return info;
}

CudaBackend::CudaBackend(int index) : index_(index), allocator_(index) {
  MVGPT_CUDA_CHECK(cudaSetDevice(index_));
  MVGPT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  MVGPT_CUBLAS_CHECK(cublasCreate(&cublas_));
  MVGPT_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  // Full float32 GEMMs (no TF32): results stay comparable with the CPU's.
  MVGPT_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
  MVGPT_CUDA_CHECK(cudaDeviceGetAttribute(&cc_major_, cudaDevAttrComputeCapabilityMajor, index_));
  MVGPT_CUDA_CHECK(cudaDeviceGetAttribute(&cc_minor_, cudaDevAttrComputeCapabilityMinor, index_));
  register_allocator(device(), &allocator_);
}

CudaBackend::~CudaBackend() {
  // Not reached in practice (backends live until exit); errors cannot be reported from here.
  if (cublas_) cublasDestroy(cublas_);
  if (stream_) cudaStreamDestroy(stream_);
  if (copy_stream_) cudaStreamDestroy(copy_stream_);
  if (staging_) cudaFreeHost(staging_);
  for (UploadBuffer& b : upload_buffers_)
    if (b.host) cudaFreeHost(b.host);
}

cudaStream_t CudaBackend::activate() const {
  MVGPT_CUDA_CHECK(cudaSetDevice(index_));
  return stream_;
}

void CudaBackend::synchronize() {
  ops::count_host_sync();
  MVGPT_CUDA_CHECK(cudaStreamSynchronize(activate()));
}

// NOTE [ Transfers through a pinned buffer ]
// Host tensors live in pageable memory; the copy engine reads and writes only pinned memory. Data
// goes through one pinned staging buffer in chunks: host -> pinned by memcpy, then an asynchronous
// copy on this device's stream (ordered after the kernels that produce or consume the device side),
// then a stream sync before the buffer is reused or the host reads it. The call returns when the
// data has arrived, so the host tensor may be used or freed at once.
void CudaBackend::copy_between_devices(const Tensor& src, const Tensor& dst) {
  const bool to_device = src.device().is_cpu();
  if (to_device == dst.device().is_cpu() || !((to_device ? dst : src).device() == device()))
    throw std::logic_error("CudaBackend::copy_between_devices: " + src.device().str() + " -> " + dst.device().str() +
                           " is not a transfer between the host and " + device().str());
  if (src.dtype() != dst.dtype() || !src.is_contiguous() || !dst.is_contiguous() || src.numel() != dst.numel())
    throw std::logic_error("CudaBackend::copy_between_devices: expects contiguous tensors of one dtype and size");
  const size_t nbytes = src.nbytes();
  if (nbytes == 0) return;
  ops::count_host_sync();  // the host waits for the stream (below), whichever the direction
  cudaStream_t stream = activate();
  constexpr size_t kChunk = size_t(32) << 20;
  std::lock_guard lock(staging_mutex_);
  const size_t want = std::min(nbytes, kChunk);
  if (staging_bytes_ < want) {
    if (staging_) MVGPT_CUDA_CHECK(cudaFreeHost(staging_));
    staging_ = nullptr;
    staging_bytes_ = 0;
    MVGPT_CUDA_CHECK(cudaMallocHost(&staging_, want));
    staging_bytes_ = want;
  }
  char* host = static_cast<char*>(to_device ? src.raw_data() : dst.raw_data());
  char* dev = static_cast<char*>(to_device ? dst.raw_data() : src.raw_data());
  for (size_t done = 0; done < nbytes; done += kChunk) {
    const size_t n = std::min(kChunk, nbytes - done);
    if (to_device) {
      std::memcpy(staging_, host + done, n);
      MVGPT_CUDA_CHECK(cudaMemcpyAsync(dev + done, staging_, n, cudaMemcpyHostToDevice, stream));
      MVGPT_CUDA_CHECK(cudaStreamSynchronize(stream));
    } else {
      MVGPT_CUDA_CHECK(cudaMemcpyAsync(staging_, dev + done, n, cudaMemcpyDeviceToHost, stream));
      MVGPT_CUDA_CHECK(cudaStreamSynchronize(stream));
      std::memcpy(host + done, staging_, n);
    }
  }
}

// NOTE [ Uploads on a copy stream ]
// upload_async copies host tensors (the next training batch) without the host waiting: they are
// packed into one of two pinned buffers, used in turn, and copied on a stream of this device's own
// for copies, after an event that the compute stream records first. That event is what makes the
// device tensors safe: they come from the caching allocator, which orders the reuse of a block by
// the compute stream alone, so a block freed by the host may still be read by queued kernels; the
// copy starts only when the work queued before it is done. wait_upload makes the compute stream wait
// for the copy's own event, so every kernel queued after it sees the data, and the tensors, freed
// later, return to the cache in the compute stream's order. A pinned buffer is refilled only after
// the copy that read it has finished (two uploads back: long done in a training loop). A ticket
// dropped unwaited waits for its copy on the host before its tensors go back to the cache.
// What it saves: the host's waits. A synchronous upload drains the compute stream (copy_between_
// devices), twice a step for inputs and targets; the upload adds no host wait at all.

struct CudaEvent {
  cudaEvent_t event = nullptr;
  CudaEvent() { MVGPT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming)); }
  ~CudaEvent() {
    if (event) cudaEventDestroy(event);  // returns at once; released when the event completes
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
};

namespace {

// Holds the device tensors too: however the upload is dropped, moved from or overwritten, their
// blocks go back to the cache only after this wait.
struct CudaUploadTicket final : Backend::UploadTicket {
  std::shared_ptr<CudaEvent> copied;
  std::vector<Tensor> tensors;
  std::atomic<bool> ordered{false};  // wait_upload has put the compute stream after it
  ~CudaUploadTicket() override {
    // Unwaited: the copy may still be writing into the tensors. No error can be thrown from here,
    // and a failed wait means the context is gone anyway.
    if (copied && !ordered.load()) cudaEventSynchronize(copied->event);
    tensors.clear();
  }
};

size_t aligned(size_t n) { return (n + 255) / 256 * 256; }

}  // namespace

Backend::PendingUpload CudaBackend::upload_async(const std::vector<Tensor>& host) {
  std::vector<Tensor> packed;
  std::vector<size_t> offsets;
  size_t total = 0;
  for (const Tensor& t : host) {
    if (!t.device().is_cpu())
      throw std::logic_error("CudaBackend::upload_async: expects host tensors, found one on " + t.device().str());
    Tensor p = ops::contiguous(t);
    offsets.push_back(total);
    total += aligned(p.nbytes());
    packed.push_back(p);
  }
  cudaStream_t stream = activate();
  PendingUpload u;
  for (const Tensor& p : packed) u.tensors.push_back(Tensor::empty(p.shape(), p.dtype(), device()));
  if (total == 0) return u;  // nothing to copy, nothing to wait for

  std::lock_guard lock(upload_mutex_);
  if (!copy_stream_) MVGPT_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  UploadBuffer& buffer = upload_buffers_[next_upload_buffer_];
  next_upload_buffer_ ^= 1;
  if (buffer.last) MVGPT_CUDA_CHECK(cudaEventSynchronize(buffer.last->event));  // its last copy has read it
  if (buffer.bytes < total) {
    if (buffer.host) MVGPT_CUDA_CHECK(cudaFreeHost(buffer.host));
    buffer.host = nullptr;
    buffer.bytes = 0;
    MVGPT_CUDA_CHECK(cudaMallocHost(&buffer.host, total));
    buffer.bytes = total;
  }
  char* pinned = static_cast<char*>(buffer.host);
  for (size_t i = 0; i < packed.size(); ++i)
    if (packed[i].nbytes() > 0) std::memcpy(pinned + offsets[i], packed[i].raw_data(), packed[i].nbytes());

  auto ticket = std::make_shared<CudaUploadTicket>();  // made before any copy is queued
  ticket->copied = std::make_shared<CudaEvent>();
  ticket->tensors = u.tensors;
  const CudaEvent queued;  // after the work queued so far on the compute stream
  try {
    MVGPT_CUDA_CHECK(cudaEventRecord(queued.event, stream));
    MVGPT_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, queued.event, 0));
    for (size_t i = 0; i < packed.size(); ++i)
      if (packed[i].nbytes() > 0)
        MVGPT_CUDA_CHECK(cudaMemcpyAsync(u.tensors[i].raw_data(), pinned + offsets[i], packed[i].nbytes(),
                                         cudaMemcpyHostToDevice, copy_stream_));
    MVGPT_CUDA_CHECK(cudaEventRecord(ticket->copied->event, copy_stream_));
  } catch (...) {
    // Copies may be queued: neither the tensors nor the pinned buffer may be reused before they end.
    cudaStreamSynchronize(copy_stream_);
    ticket->ordered = true;  // nothing left to wait for
    throw;
  }
  buffer.last = ticket->copied;
  u.ready = ticket;
  return u;
}

void CudaBackend::wait_upload(const PendingUpload& upload) {
  auto* ticket = dynamic_cast<CudaUploadTicket*>(upload.ready.get());
  if (!ticket) return;  // nothing was copied (or not by this backend's copy stream)
  MVGPT_CUDA_CHECK(cudaStreamWaitEvent(activate(), ticket->copied->event, 0));
  ticket->ordered.store(true);
}

}  // namespace mvgpt::cuda
