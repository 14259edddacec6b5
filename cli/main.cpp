// gradsleuth: the command-line tool. Each subcommand lives in its own file
// (cli/cmd_*.cpp) and registers itself in the table below.
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "distributed/process_group.h"

namespace {

const std::vector<gs::cli::Command>& commands() {
  static const std::vector<gs::cli::Command> table = gs::cli::all_commands();
  return table;
}

void usage(std::ostream& os) {
  os << "usage: gradsleuth <command> [options]\n\n"
        "gradsleuth: a tensor/autograd engine for learning how deep learning works and how it silently goes "
        "wrong.\n\ncommands:\n";
  for (const auto& c : commands()) os << "  " << c.name << std::string(c.name.size() < 14 ? 14 - c.name.size() : 1, ' ') << c.summary << "\n";
  os << "\nRun 'gradsleuth <command> --help' for a command's options.\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    usage(std::cout);
    return argc < 2 ? 2 : 0;
  }
  // `gradsleuth --version [--json]` is `gradsleuth version [--json]`.
  const std::string name = std::strcmp(argv[1], "--version") ? argv[1] : "version";
  for (const auto& c : commands()) {
    if (c.name != name) continue;
    std::vector<std::string> args(argv + 2, argv + argc);
    try {
      return c.run(args);
    } catch (const std::exception& e) {
      // Under mpirun, returning would leave the other ranks waiting in their next collective
      // (and MPI_Finalize at exit waiting for them): end the whole job, naming this rank.
      if (gs::dist::world_started() && gs::dist::ProcessGroup::world().world_size() > 1)
        gs::dist::abort_job("gradsleuth " + name + ": error: " + e.what());
      std::cerr << "gradsleuth " << name << ": error: " << e.what() << "\n";
      return 1;
    }
  }
  std::cerr << "gradsleuth: unknown command '" << name << "'\n\n";
  usage(std::cerr);
  return 2;
}
