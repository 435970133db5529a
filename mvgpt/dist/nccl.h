#pragma once
// Collectives on CUDA memory through NCCL, used by data_parallel.cpp for tensors on a CUDA device.
// Built (nccl_world.cpp) when the build has the CUDA backend, MPI and NCCL (MVGPT_DIST_NCCL);
// otherwise the inline stubs below say that no device is handled, and CUDA tensors go through the
// host and MPI as CPU tensors do.
//
// NOTE [ One communicator per process ]
// NCCL bootstraps over MPI: the first collective on a CUDA tensor creates the communicator (rank 0
// makes an ncclUniqueId, MPI broadcasts it, every rank joins on the tensor's device). That first
// call is therefore collective like the rest, and every rank must keep its CUDA tensors on that one
// device (dist::local_device picks cuda:<local rank>, one GPU per process as NCCL requires). The
// operations run on the CUDA backend's stream of that device, ordered with its kernels, so nothing
// is synchronised with the host.
#include <stdexcept>
#include <string>

#include <mvgpt/tensor/tensor.h>

namespace mvgpt::dist::nccl {

#if defined(MVGPT_DIST_NCCL)

// True when collectives on tensors of `device` go through NCCL: a CUDA device and several ranks.
bool handles(Device device);
// Replaces `t` (contiguous, float32 or float64, on a handled device) by its mean over the ranks
// (ncclAllReduce with ncclAvg). Throws std::invalid_argument for another tensor, std::runtime_error
// naming the NCCL call for a failure.
void all_reduce_mean(const Tensor& t);
// Overwrites `t` (contiguous, any dtype, on a handled device) with rank `root`'s bytes.
void broadcast(const Tensor& t, int root);
// "NCCL 2.28.9 on cuda:0" once a communicator exists, "" before.
std::string in_use();
// Destroys the communicator (nothing when there is none); part of dist::finalize on success.
void finalize();

#else

inline bool handles(Device) { return false; }
[[noreturn]] inline void all_reduce_mean(const Tensor&) {
  throw std::logic_error("dist::nccl::all_reduce_mean: this build has no NCCL");
}
[[noreturn]] inline void broadcast(const Tensor&, int) {
  throw std::logic_error("dist::nccl::broadcast: this build has no NCCL");
}
inline std::string in_use() { return ""; }
inline void finalize() {}

#endif

}  // namespace mvgpt::dist::nccl
