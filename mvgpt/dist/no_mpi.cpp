// The world of a build without MPI: one rank; collectives are identities.
#include <stdexcept>
#include <string>

#include <mvgpt/dist/world.h>

namespace mvgpt::dist {

namespace {
bool g_initialized = false;
}

void init() {
  if (g_initialized) return;
  if (int n = launched_size(); n > 1)
    throw std::runtime_error("dist::init: launched as " + std::to_string(n) +
                             " ranks, but this build has no MPI (CMake did not find it); install libopenmpi-dev "
                             "and reconfigure, or run a single process without mpirun");
  g_initialized = true;
}
bool initialized() { return g_initialized; }
int rank() { return 0; }
int size() { return 1; }
std::string transport() { return "none (built without MPI)"; }
void all_reduce_sum(float*, int64_t) {}
void all_reduce_sum(double*, int64_t) {}
void broadcast(void*, size_t, int) {}
void barrier() {}
int finalize(int exit_code) { return exit_code; }

}  // namespace mvgpt::dist
