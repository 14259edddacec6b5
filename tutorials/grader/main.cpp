// A lab's grader executable, built once per lab and implementation: labN_grader
// links lab N's starter code, labN_grader_solution its reference solution
// (tutorials/CMakeLists.txt). `gradsleuth lab` (cli/cmd_lab.cpp) runs labN_grader;
// CTest runs both.
//   labN_grader list [--json]
//   labN_grader check N [--json | --gradescope FILE|-] [--task K] [--verbose] [--expect full|consistent]
//               [--seed S [--show-hidden]] [--events]
//   labN_grader lint DIR1 DIR2 ...   (every lab folder in course order, from tutorials/CMakeLists.txt)
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "tutorials/grader/grader.h"

// The results channel is taken before any constructor runs (the student's code is linked into
// this executable): .preinit_array entries run first.
extern "C" {
static void gs_take_results_channel(int, char**, char** envp) { gs::labs::take_results_channel(envp); }
__attribute__((section(".preinit_array"), used)) static void (*gs_preinit_channel)(int, char**,
                                                                                   char**) = gs_take_results_channel;
}

namespace {

std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

// Checks that this grader's lab, its folder and its README agree: lab N is the
// Nth folder, its README has a "Task N.k" section for every graded task and its
// starter file exists; and that grader/ has one grade_labN.cpp per folder. Missing
// TODO markers only warn (a student removes them). The labs_lint test runs every
// lab's grader.
int lint(const std::vector<std::string>& dirs) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(GS_SOURCE_DIR);
  int errors = 0;
  auto error = [&](const std::string& m) {
    std::cout << "error: " << m << "\n";
    ++errors;
  };
  size_t graders = 0;
  for (const auto& e : fs::directory_iterator(root / "tutorials" / "grader")) {
    const std::string f = e.path().filename().string();
    graders += f.rfind("grade_lab", 0) == 0 && e.path().extension() == ".cpp";
  }
  size_t present = 0;  // a released tree may hold some of the labs only
  for (const std::string& d : dirs) present += fs::is_directory(root / "tutorials" / d);
  if (present != graders)
    error("tutorials/CMakeLists.txt lists " + std::to_string(present) +
          " lab folders that exist, tutorials/grader/ has " + std::to_string(graders) + " grade_labN.cpp files");
  for (const gs::labs::Lab& l : gs::labs::all_labs()) {
    const std::string n = std::to_string(l.number);
    if (l.number < 1 || l.number > static_cast<int>(dirs.size()))
      error("lab " + n + ": tutorials/CMakeLists.txt lists " + std::to_string(dirs.size()) + " labs");
    else if (dirs[l.number - 1] != l.dir)
      error("lab " + n + ": the grader says tutorials/" + l.dir + ", CMake says tutorials/" + dirs[l.number - 1]);
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
      if (starter.find(todo) == std::string::npos)
        std::cout << "warning: " << l.starter << " has no " << todo << " marker\n";
    }
    // tutorials/labs.txt (what `gradsleuth lab list` shows before the graders are built) must
    // hold this lab's list as this grader prints it.
    {
      std::ostringstream mine;
      gs::labs::print_list(mine);
      const std::string listed = read_text(root / "tutorials" / "labs.txt");
      const size_t at = listed.find("\nlab " + n + ": ");
      const size_t end = at == std::string::npos ? at : listed.find("\nlab ", at + 1);
      const std::string block =
          at == std::string::npos ? "" : listed.substr(at + 1, end == std::string::npos ? std::string::npos : end - at);
      if (block != mine.str())
        error("lab " + n +
              ": tutorials/labs.txt does not list this lab's tasks and points as its grader does: run "
              "scripts/update_lab_list.sh");
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
  ::unsetenv("GS_GRADER_CHANNEL");  // taken (and wiped) before any constructor ran
  labs::CommandOptions o;
  auto usage = [&] {
    std::cerr << "usage: " << argv[0] << " list [--json]\n       " << argv[0]
              << " check N [--json | --gradescope FILE|-] [--task K] [--verbose] [--expect full|consistent]\n"
              << "          [--seed S [--show-hidden]] [--events]\n       " << argv[0] << " lint LAB_DIR...\n"
              << "--seed S grades on the inputs drawn from S (default: GS_GRADER_SEED, else the public inputs, "
              << gs::labs::kPublicInputs
              << "); with a seed other than the public one a failed case hides its "
                 "values unless --show-hidden.\n";
    return 2;
  };
  if (argc >= 2 && std::strcmp(argv[1], "lint") == 0) return lint(std::vector<std::string>(argv + 2, argv + argc));
  std::string seed;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json")
      o.json = true;
    else if (a == "--seed" && i + 1 < argc)
      seed = argv[++i];
    else if (a == "--show-hidden")
      o.show_hidden = true;
    else if (a == "--events")
      o.events = true;
    else if (a == "--gradescope" && i + 1 < argc)
      o.gradescope = argv[++i];
    else if (a == "--verbose")
      o.verbose = true;
    else if (a == "--task" && i + 1 < argc)
      o.task = std::atoi(argv[++i]);
    else if (a == "--expect" && i + 1 < argc)
      o.expect = argv[++i];
    else if (a == "--help" || a == "-h")
      return usage(), 0;
    else if (a.rfind("--", 0) == 0)
      return usage();
    else if (o.action.empty())
      o.action = a;
    else if (o.lab.empty())
      o.lab = a;
    else
      return usage();
  }
  if (o.action.empty() || (o.action == "check" && o.lab.empty())) return usage();
  try {
    if (!seed.empty())
      o.seed = labs::parse_input_seed(seed, "--seed"), o.has_seed = true;
    else if (const char* env = std::getenv("GS_GRADER_SEED"); env && *env)
      o.seed = labs::parse_input_seed(env, "GS_GRADER_SEED"), o.has_seed = true;
    labs::set_input_seed(o.seed, o.show_hidden);
    return labs::run_command(o, std::cout);
  } catch (const std::exception& e) {
    // The program's name only: `gradsleuth lab` runs it by its full path in the build tree.
    std::cerr << std::filesystem::path(argv[0]).filename().string() << ": error: " << e.what() << "\n";
    return 2;
  }
}
