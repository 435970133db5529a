// Reading the launcher's environment: shared by the MPI and the MPI-less builds.
#include <cstdlib>
#include <string>

#include "dist/world.h"

namespace mvgpt::dist {

int launched_size() {
  // Open MPI's mpirun, then the PMI of MPICH/Hydra and Slurm's srun.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* v = std::getenv(name)) {
      char* end = nullptr;
      long n = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && n >= 1) return int(n);
    }
  }
  return 1;
}

bool from_root(bool value, int root) {
  if (size() == 1) return value;
  char flag = value ? 1 : 0;
  broadcast(&flag, 1, root);
  return flag != 0;
}

}  // namespace mvgpt::dist
