// gradsleuth: the command-line tool. Each subcommand lives in its own file
// (cli/cmd_*.cpp) and registers itself in the table below.
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "core/error.h"
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
  for (const auto& c : commands())
    os << "  " << c.name << std::string(c.name.size() < 14 ? 14 - c.name.size() : 1, ' ') << c.summary << "\n";
  os << "\nRun 'gradsleuth <command> --help' for a command's options.\n";
}

// What the user sees of an error: "gradsleuth <command>: error: <message>". A gs::Error's
// what() is "op: message"; its op is dropped when it repeats the command the user typed
// ("zoo: ...", "zoo --distributed: ...") or is the name of a C++ function inside the tool
// ("parse_bug", "gradcheck_all_ops", "nn::load"): messages name what they are about themselves.
std::string user_message(const std::string& command, const std::exception& e) {
  const auto* ge = dynamic_cast<const gs::Error*>(&e);
  if (!ge) return e.what();
  const std::string& op = ge->op();
  const std::string what = e.what();
  const bool repeats_command = op == command || op.rfind(command + " ", 0) == 0;
  const bool function_name = op.find('_') != std::string::npos || op.find("::") != std::string::npos;
  if ((repeats_command || function_name) && what.rfind(op + ": ", 0) == 0) return what.substr(op.size() + 2);
  return what;
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
        gs::dist::abort_job("gradsleuth " + name + ": error: " + user_message(name, e));
      std::cerr << "gradsleuth " << name << ": error: " << user_message(name, e) << "\n";
      return 1;
    }
  }
  std::cerr << "gradsleuth: unknown command '" << name << "'\n\n";
  usage(std::cerr);
  return 2;
}
