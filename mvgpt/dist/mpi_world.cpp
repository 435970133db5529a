// The world over MPI. MPI is initialised only under a launcher (see world.h).
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <stdexcept>
#include <string>

#include <mvgpt/dist/nccl.h>
#include <mvgpt/dist/world.h>

namespace mvgpt::dist {

namespace {

bool g_initialized = false;
bool g_mpi = false;  // MPI_Init was called
int g_rank = 0, g_size = 1;

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  throw std::runtime_error(std::string(what) + ": " + std::string(text, size_t(len)));
}

// MPI counts are int: long buffers go in pieces.
constexpr int64_t kMaxCount = INT_MAX / 2;

template <typename T>
void all_reduce(T* data, int64_t count, MPI_Datatype type, const char* what) {
  if (count < 0) throw std::invalid_argument(std::string(what) + ": negative count " + std::to_string(count));
  if (g_size == 1) return;
  for (int64_t done = 0; done < count;) {
    const int n = int(std::min(count - done, kMaxCount));
    check(MPI_Allreduce(MPI_IN_PLACE, data + done, n, type, MPI_SUM, MPI_COMM_WORLD), what);
    done += n;
  }
}

}  // namespace

void init() {
  if (g_initialized) return;
  const int launched = launched_size();
  if (launched > 1) {
    int already = 0;
    MPI_Initialized(&already);
    if (!already) check(MPI_Init(nullptr, nullptr), "dist::init: MPI_Init");
    g_mpi = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    if (g_size != launched)
      throw std::runtime_error("dist::init: the launcher announced " + std::to_string(launched) +
                               " ranks but MPI_COMM_WORLD has " + std::to_string(g_size) +
                               " (is this binary linked against the same MPI as mpirun?)");
  }
  g_initialized = true;
}

bool initialized() { return g_initialized; }
int rank() { return g_rank; }
int size() { return g_size; }

std::string transport() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);
  std::string v(version, size_t(len));
  if (auto cut = v.find_first_of(",\n"); cut != std::string::npos) v.resize(cut);
  const std::string on_gpus = nccl::in_use();
  return "MPI (" + v + ")" + (on_gpus.empty() ? "" : " and " + on_gpus);
}

void all_reduce_sum(float* data, int64_t count) { all_reduce(data, count, MPI_FLOAT, "dist::all_reduce_sum"); }
void all_reduce_sum(double* data, int64_t count) { all_reduce(data, count, MPI_DOUBLE, "dist::all_reduce_sum"); }

void broadcast(void* data, size_t bytes, int root) {
  if (g_size == 1) return;
  if (root < 0 || root >= g_size)
    throw std::invalid_argument("dist::broadcast: root " + std::to_string(root) + " outside [0, " +
                                std::to_string(g_size) + ")");
  auto* p = static_cast<char*>(data);
  for (size_t done = 0; done < bytes;) {
    const int n = int(std::min<size_t>(bytes - done, size_t(kMaxCount)));
    check(MPI_Bcast(p + done, n, MPI_BYTE, root, MPI_COMM_WORLD), "dist::broadcast");
    done += size_t(n);
  }
}

void barrier() {
  if (g_size > 1) check(MPI_Barrier(MPI_COMM_WORLD), "dist::barrier");
}

int finalize(int exit_code) {
  if (!g_mpi) return exit_code;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return exit_code;
  // 129, 130, 143: a stop by SIGHUP, SIGINT or SIGTERM that every rank made together after saving.
  const bool shared_stop = exit_code == 129 || exit_code == 130 || exit_code == 143;
  if (exit_code != 0 && !shared_stop && g_size > 1) MPI_Abort(MPI_COMM_WORLD, exit_code);
  try {
    nccl::finalize();  // every rank reaches here together (success or a shared stop)
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist::finalize: %s\n", e.what());
    if (exit_code == 0) exit_code = 1;
  }
  MPI_Finalize();
  return exit_code;
}

}  // namespace mvgpt::dist
