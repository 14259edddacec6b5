// gradsleuth lab: lists the course labs (tutorials/) and grades the student's
// code for one of them with its autograder (tutorials/grader/).
#include <iostream>

#include "cli/cli.h"
#include "core/error.h"
#ifdef GS_WITH_LABS
#include "tutorials/grader/grader.h"
#endif

namespace gradsleuth::cli {

int cmd_lab(const std::vector<std::string>& args) {
  Args a("lab", args);
  a.about(
      "The course labs in tutorials/, in course order, each with starter code for you to complete.\n"
      "  gradsleuth lab list            the labs and their tasks, with points\n"
      "  gradsleuth lab check N         grades your code for lab N (e.g. tutorials/lab1_tensors/lab1.cpp):\n"
      "                                 each task's points and what is wrong, then \"lab N: X/Y points\"\n"
      "Rebuild after editing your code first; `./run.sh lab check N` does both. Exits 0 whenever grading\n"
      "ran, whatever the points.");
  a.positionals("list | check N|all", "what to do");
  a.flag("json", "print one JSON object instead of the text report");
  a.option("task", "K", "grade only task K of the lab");
  a.flag("verbose", "show every check, the passed ones too");
  if (!a.parse()) return 0;
  const auto& pos = a.positional();
  GS_CHECK(!pos.empty() && (pos[0] == "list" || pos[0] == "check"), "lab",
           "expected 'list' or 'check N' (see gradsleuth lab --help)");
  GS_CHECK(pos[0] == "list" ? pos.size() == 1 : pos.size() == 2, "lab",
           pos[0] == "list" ? "'list' takes no argument" : "'check' takes one argument: the lab number (or all)");
#ifdef GS_WITH_LABS
  labs::CommandOptions o;
  o.action = pos[0];
  if (pos.size() > 1) o.lab = pos[1];
  o.json = a.has("json");
  o.verbose = a.has("verbose");
  if (a.has("task")) o.task = a.get_int("task");
  return labs::run_command(o, std::cout);
#else
  GS_FAIL("lab", "this gradsleuth was built without the labs; configure with -DGRADSLEUTH_BUILD_LABS=ON");
#endif
}

}  // namespace gradsleuth::cli
