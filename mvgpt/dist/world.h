#pragma once
// The processes of one data-parallel run and the few collectives it needs.
//
// NOTE [ One process, or many under a launcher ]
// A process started by `mpirun` (or another PMI launcher) joins the run with init(); a process
// started on its own is a world of one and touches no MPI at all, so a plain `pretrain` behaves
// exactly as without this module. The transport is MPI when CMake found it (MVGPT_DIST_MPI); a
// build without MPI still links (no_mpi.cpp) and reports one rank, but refuses to start when the
// launcher says there are more, since N copies of one run would each train alone and overwrite
// each other's checkpoints. Collectives are called from the main thread only.
#include <cstddef>
#include <cstdint>
#include <string>

namespace mvgpt::dist {

// Ranks the launcher announced in the environment (OMPI_COMM_WORLD_SIZE, PMI_SIZE), 1 without one.
int launched_size();
// This process's rank among those of the launch on the same machine (OMPI_COMM_WORLD_LOCAL_RANK,
// MPI_LOCALRANKID, SLURM_LOCALID), 0 without a launcher: which GPU of the machine it should use.
int local_rank();

// Joins the run (idempotent). Throws std::runtime_error when the launcher announced several ranks
// and this build has no MPI, or when MPI's world size disagrees with the launcher's.
void init();
bool initialized();
int rank();  // 0 before init()
int size();  // 1 before init()
inline bool is_root() { return rank() == 0; }
// "MPI (Open MPI v4.1.4)", followed by " and NCCL 2.28.9 on cuda:0" once collectives on CUDA
// tensors have created the NCCL communicator (dist/nccl.h); "none (built without MPI)".
std::string transport();

// In-place sums over every rank (MPI_Allreduce with MPI_IN_PLACE). Nothing with one rank.
void all_reduce_sum(float* data, int64_t count);
void all_reduce_sum(double* data, int64_t count);
// Copies `bytes` bytes at `data` from `root` to every other rank.
void broadcast(void* data, size_t bytes, int root = 0);
void barrier();
// Rank `root`'s `value` on every rank: decisions every rank must take together (stop, skip).
bool from_root(bool value, int root = 0);

// Ends the run and returns the exit code to give main(). A failure (code not 0 and not 130, an
// interrupted run) with several ranks aborts them all (MPI_Abort), so that no rank waits forever
// in a collective its failed peer will never join; otherwise MPI_Finalize.
int finalize(int exit_code);

}  // namespace mvgpt::dist
