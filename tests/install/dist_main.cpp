// Uses the installed gradsleuth::dist part: a process group outside mpirun is a world of 1.
#include <cstdio>

#include "distributed/dist.h"

int main() {
  namespace dist = gradsleuth::dist;
  dist::ProcessGroup& pg = dist::ProcessGroup::world();
  if (pg.world_size() != 1 || pg.rank() != 0) {
    std::fprintf(stderr, "install_check_dist: outside mpirun expected rank 0 of 1, got rank %d of %d\n", pg.rank(),
                 pg.world_size());
    return 1;
  }
  std::printf("install_check_dist: ok (rank 0 of 1, MPI %s)\n", dist::mpi_available() ? "linked" : "not linked");
  return 0;
}
