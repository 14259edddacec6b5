// A standalone lab grader, built twice: linked with the starter code
// (lab_grader) and with the reference solutions (lab_grader_solution). CTest
// runs them; students use `gradsleuth lab` (the same grading, cli/cmd_lab.cpp).
//   lab_grader list [--json]
//   lab_grader check N|all [--json] [--task K] [--verbose] [--expect full|consistent]
//   lab_grader lint DIR1 DIR2 ...   (the lab folders in course order, from tutorials/CMakeLists.txt)
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "tutorials/grader/grader.h"

namespace {

std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

// Checks that the graders, the folders and the READMEs agree: lab N is the Nth
// folder, its README has a "Task N.k" section for every graded task and its
// starter file exists. Missing TODO markers only warn (a student removes them).
int lint(const std::vector<std::string>& dirs) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(GS_SOURCE_DIR);
  const auto& labs = gs::labs::all_labs();
  int errors = 0;
  auto error = [&](const std::string& m) {
    std::cout << "error: " << m << "\n";
    ++errors;
  };
  if (dirs.size() != labs.size())
    error("tutorials/CMakeLists.txt lists " + std::to_string(dirs.size()) + " labs, the grader (grader/labs.cpp) " +
          std::to_string(labs.size()));
  for (size_t i = 0; i < labs.size(); ++i) {
    const gs::labs::Lab& l = labs[i];
    const std::string n = std::to_string(l.number);
    if (l.number != static_cast<int>(i + 1)) error("lab " + n + " is number " + std::to_string(i + 1) + " in grader/labs.cpp");
    if (i < dirs.size() && dirs[i] != l.dir) error("lab " + n + ": the grader says tutorials/" + l.dir + ", CMake says tutorials/" + dirs[i]);
    const fs::path readme = root / "tutorials" / l.dir / "README.md";
    if (!fs::exists(readme)) {
      error("lab " + n + ": " + readme.string() + " is missing");
      continue;
    }
    if (!fs::exists(root / l.starter)) error("lab " + n + ": the starter file " + l.starter + " is missing");
    const std::string text = read_text(readme), starter = read_text(root / l.starter);
    for (const gs::labs::Task& t : l.tasks) {
      const std::string id = n + "." + std::to_string(t.number);
      if (text.find("Task " + id) == std::string::npos) error("lab " + n + ": README.md has no section for Task " + id);
      const std::string todo = "TODO(lab " + n + ", task " + std::to_string(t.number) + ")";
      if (starter.find(todo) == std::string::npos) std::cout << "warning: " << l.starter << " has no " << todo << " marker\n";
    }
    std::cout << "lab " << n << " (tutorials/" << l.dir << "): " << l.tasks.size() << " tasks, " << l.max_points()
              << " points\n";
  }
  std::cout << (errors ? "lint: " + std::to_string(errors) + " errors\n" : std::string("lint: ok\n"));
  return errors ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  namespace labs = gs::labs;
  labs::CommandOptions o;
  auto usage = [&] {
    std::cerr << "usage: " << argv[0] << " list [--json]\n       " << argv[0]
              << " check N|all [--json] [--task K] [--verbose] [--expect full|consistent]\n       " << argv[0]
              << " lint LAB_DIR...\n";
    return 2;
  };
  if (argc >= 2 && std::strcmp(argv[1], "lint") == 0) return lint(std::vector<std::string>(argv + 2, argv + argc));
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json") o.json = true;
    else if (a == "--verbose") o.verbose = true;
    else if (a == "--task" && i + 1 < argc) o.task = std::atoi(argv[++i]);
    else if (a == "--expect" && i + 1 < argc) o.expect = argv[++i];
    else if (a == "--help" || a == "-h") return usage(), 0;
    else if (a.rfind("--", 0) == 0) return usage();
    else if (o.action.empty()) o.action = a;
    else if (o.lab.empty()) o.lab = a;
    else return usage();
  }
  if (o.action.empty() || (o.action == "check" && o.lab.empty())) return usage();
  try {
    return labs::run_command(o, std::cout);
  } catch (const std::exception& e) {
    std::cerr << argv[0] << ": error: " << e.what() << "\n";
    return 2;
  }
}
