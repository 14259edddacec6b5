// Running the built gradsleuth tool (GS_CLI_PATH) from a test: its exit status
// and what it printed on stdout (stderr passes through, or is dropped).
#pragma once
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace clitest {

struct Run {
  int status = -1;  // exit status (-1: killed by a signal)
  std::string out;  // stdout only
};

// Runs a shell command line (e.g. the tool under mpirun): its exit status and stdout.
inline Run run_command(const std::string& cmd) {
  Run r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE_MESSAGE(p != nullptr, "could not start ", cmd);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// Runs `gradsleuth ARGS`; stderr is shown unless drop_stderr.
inline Run run_cli(const std::string& args, bool drop_stderr = false) {
  return run_command(std::string("\"") + GS_CLI_PATH + "\" " + args + (drop_stderr ? " 2>/dev/null" : ""));
}

// Runs `gradsleuth ARGS` and returns its exit status and stdout + stderr together.
inline Run run_cli_all(const std::string& args) { return run_cli(args + " 2>&1"); }

// The last line of a command's output (where a --json command prints its summary), without its newline.
inline std::string last_line(const std::string& s) {
  std::string t = s;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

}  // namespace clitest
