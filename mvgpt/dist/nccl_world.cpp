// NCCL collectives on the CUDA backend's stream (see the NOTE in nccl.h). Built only with
// MVGPT_DIST_NCCL, which implies MPI and the CUDA backend.
#include <nccl.h>

#include <stdexcept>
#include <string>

#include <mvgpt/backends/cuda/cuda_backend.h>
#include <mvgpt/backends/cuda/cuda_backend_impl.h>
#include <mvgpt/dist/nccl.h>
#include <mvgpt/dist/world.h>

// Every NCCL call is checked: a failure throws std::runtime_error naming the call, file and line.
#define MVGPT_NCCL_CHECK(call)                                                                   \
  do {                                                                                           \
    const ncclResult_t mvgpt_nccl_status_ = (call);                                              \
    if (mvgpt_nccl_status_ != ncclSuccess)                                                       \
      ::mvgpt::dist::nccl::throw_nccl_error(mvgpt_nccl_status_, #call, __FILE__, __LINE__);      \
  } while (0)

namespace mvgpt::dist::nccl {

namespace {

[[noreturn]] void throw_nccl_error(ncclResult_t status, const char* call, const char* file, int line) {
  std::string detail = ncclGetErrorString(status);
  if (const char* last = ncclGetLastError(nullptr); last && *last) detail += " (" + std::string(last) + ")";
  throw std::runtime_error(std::string("NCCL call ") + call + " failed at " + file + ":" + std::to_string(line) + ": " +
                           detail);
}

ncclComm_t g_comm = nullptr;
int g_device = -1;  // the CUDA device index of g_comm

cuda::CudaBackend& backend_of(Device device) { return static_cast<cuda::CudaBackend&>(cuda::backend(device.index)); }

// The communicator, created on `device` by the first call (collective: every rank calls it).
ncclComm_t communicator(Device device, const char* op) {
  if (g_comm) {
    if (device.index != g_device)
      throw std::invalid_argument(std::string(op) + ": a tensor on " + device.str() +
                                  ", but this rank's NCCL communicator is on cuda:" + std::to_string(g_device) +
                                  "; keep every CUDA tensor of a rank on one device (dist::local_device)");
    return g_comm;
  }
  ncclUniqueId id{};
  if (rank() == 0) MVGPT_NCCL_CHECK(ncclGetUniqueId(&id));
  dist::broadcast(&id, sizeof id, 0);
  backend_of(device).activate();  // ncclCommInitRank binds the current device
  ncclComm_t comm = nullptr;
  MVGPT_NCCL_CHECK(ncclCommInitRank(&comm, size(), id, rank()));
  g_comm = comm;
  g_device = device.index;
  return g_comm;
}

void check_tensor(const Tensor& t, const char* op) {
  if (!t.defined()) throw std::invalid_argument(std::string(op) + ": undefined tensor");
  if (!handles(t.device()))
    throw std::invalid_argument(std::string(op) + ": expected a CUDA tensor with several ranks, found " + t.describe() +
                                " with " + std::to_string(size()) + " rank(s)");
  if (!t.is_contiguous())
    throw std::invalid_argument(std::string(op) + ": expected a contiguous tensor, found " + t.describe());
}

}  // namespace

bool handles(Device device) { return device.is_cuda() && size() > 1; }

void all_reduce_mean(const Tensor& t) {
  constexpr const char* op = "dist::nccl::all_reduce_mean";
  check_tensor(t, op);
  if (t.dtype() != DType::f32 && t.dtype() != DType::f64)
    throw std::invalid_argument(std::string(op) + ": expected float32 or float64, found " + t.describe());
  if (t.numel() == 0) return;
  ncclComm_t comm = communicator(t.device(), op);
  cudaStream_t stream = backend_of(t.device()).activate();
  // ncclAvg: NCCL scales each rank's floats by 1/N before summing them; for N a power of two that
  // is exact, as the MPI path's division of the sum is.
  MVGPT_NCCL_CHECK(ncclAllReduce(t.raw_data(), t.raw_data(), size_t(t.numel()),
                                 t.dtype() == DType::f32 ? ncclFloat32 : ncclFloat64, ncclAvg, comm, stream));
}

void broadcast(const Tensor& t, int root) {
  constexpr const char* op = "dist::nccl::broadcast";
  check_tensor(t, op);
  if (root < 0 || root >= size())
    throw std::invalid_argument(std::string(op) + ": root " + std::to_string(root) + " outside [0, " +
                                std::to_string(size()) + ")");
  if (t.nbytes() == 0) return;
  ncclComm_t comm = communicator(t.device(), op);
  cudaStream_t stream = backend_of(t.device()).activate();
  MVGPT_NCCL_CHECK(ncclBroadcast(t.raw_data(), t.raw_data(), t.nbytes(), ncclUint8, root, comm, stream));
}

std::string in_use() {
  if (!g_comm) return "";
  int v = 0;
  MVGPT_NCCL_CHECK(ncclGetVersion(&v));
  // Since 2.9 the code is major * 10000 + minor * 100 + patch.
  return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100) +
         " on cuda:" + std::to_string(g_device);
}

void finalize() {
  if (!g_comm) return;
  backend_of(Device::cuda(g_device)).activate();
  ncclComm_t comm = g_comm;
  g_comm = nullptr;
  MVGPT_NCCL_CHECK(ncclCommFinalize(comm));  // waits for this rank's outstanding operations
  MVGPT_NCCL_CHECK(ncclCommDestroy(comm));
}

}  // namespace mvgpt::dist::nccl
