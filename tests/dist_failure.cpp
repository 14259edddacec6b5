// Hang protection, run by CTest under mpirun -np 2 (tests/CMakeLists.txt):
//   dist_failure throw     rank 1 throws mid-run while rank 0 waits in an all-reduce: the
//                          terminate handler prints which rank failed and why, and MPI_Abort
//                          ends the whole job at once.
//   dist_failure timeout   rank 1 never joins the all-reduce: rank 0's watchdog (2 s) raises a
//                          clear error, which ends the job the same way.
// CTest passes when the output holds the expected message; its TIMEOUT is the backstop that
// turns a hang into a failure. Not a doctest program: it is meant to die.
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

#include "core/ops.h"
#include "distributed/process_group.h"

int main(int argc, char** argv) {
  namespace dist = gradsleuth::dist;
  const std::string mode = argc > 1 ? argv[1] : "";
  auto& pg = dist::ProcessGroup::world();
  if (pg.world_size() < 2) {
    std::printf("dist_failure needs 2 ranks (run it under mpirun -np 2)\n");
    return 77;
  }
  pg.set_timeout(mode == "timeout" ? 2.0 : 60.0);
  gradsleuth::Tensor t = gradsleuth::ones({4});
  pg.all_reduce(t);  // a first collective that works
  if (mode == "throw") {
    if (pg.rank() == 1) throw std::runtime_error("injected failure on rank 1");
    pg.all_reduce(t);  // rank 0 waits here for a rank that is gone
  } else if (mode == "timeout") {
    if (pg.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(60));  // never joins
      return 0;
    }
    pg.all_reduce(t);
  } else {
    std::fprintf(stderr, "usage: dist_failure throw|timeout\n");
    return 2;
  }
  std::printf("unreachable: rank %d finished\n", pg.rank());
  return 0;
}
