// Reading the launcher's environment: shared by the MPI and the MPI-less builds.
#include <climits>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include <mvgpt/dist/world.h>

namespace mvgpt::dist {

namespace {

// The first of `names` set to an integer >= `least`, else `otherwise`.
int first_env_int(std::initializer_list<const char*> names, long least, int otherwise) {
  for (const char* name : names) {
    if (const char* v = std::getenv(name)) {
      char* end = nullptr;
      long n = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && n >= least && n <= INT_MAX) return int(n);
    }
  }
  return otherwise;
}

}  // namespace

int launched_size() {
  // Open MPI's mpirun, then the PMI of MPICH/Hydra and Slurm's srun.
  return first_env_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, 1, 1);
}

int local_rank() {
  return first_env_int({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}, 0, 0);
}

bool from_root(bool value, int root) {
  if (size() == 1) return value;
  char flag = value ? 1 : 0;
  broadcast(&flag, 1, root);
  return flag != 0;
}

}  // namespace mvgpt::dist
