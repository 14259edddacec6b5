// gradsleuth lab: lists the course labs (tutorials/) and grades the student's
// code for one of them. Each lab has its own grader executable in the build tree
// (build/tutorials/labN_grader: that lab's code and its autograder, tutorials/grader/),
// which this command runs: the CLI links no lab code, so it builds without the labs
// and a lab that does not compile stops only its own grading.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli.h"
#include "cli/lab_grade_all.h"
#include "core/error.h"
#include "core/json.h"

namespace gradsleuth::cli {

#ifdef GS_WITH_LABS
namespace {

namespace fs = std::filesystem;

// Where the graders are: $GRADSLEUTH_LAB_GRADERS when set; else the build tree this
// binary sits in (build/bin/gradsleuth -> build/tutorials/); else the build tree it was
// built in.
fs::path grader_dir() {
  if (const char* env = std::getenv("GRADSLEUTH_LAB_GRADERS"); env && *env) return env;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path d = self.parent_path().parent_path() / "tutorials";
    if (fs::is_directory(d, ec)) return d;
  }
  return GS_LAB_GRADER_DIR;
}

// The labs of this tree, in course order (a released tree may hold some of them only).
const std::vector<int>& lab_numbers() {
  static const std::vector<int> numbers{GS_LAB_NUMBERS};
  return numbers;
}
bool is_lab(int n) {
  for (int k : lab_numbers())
    if (k == n) return true;
  return false;
}
std::string lab_numbers_str() {
  std::string s;
  for (int k : lab_numbers()) s += (s.empty() ? "" : ", ") + std::to_string(k);
  return s;
}

// "3" -> 3, for a lab of this tree; anything else is an error listing the labs.
int lab_number(const std::string& which) {
  int n = 0;
  try {
    size_t used = 0;
    n = std::stoi(which, &used);
    if (used != which.size()) n = 0;
  } catch (const std::exception&) {
    n = 0;
  }
  GS_CHECK(is_lab(n), "lab", "there is no lab '", which, "'; the labs are ", lab_numbers_str(),
           " (gradsleuth lab list shows them)");
  return n;
}

// Lab N's folder under tutorials/ ("lab1_tensors").
std::string lab_dir(int lab) {
  std::error_code ec;
  const std::string prefix = "lab" + std::to_string(lab) + "_";
  for (const auto& d : fs::directory_iterator(fs::path(GS_SOURCE_DIR) / "tutorials", ec))
    if (d.is_directory() && d.path().filename().string().rfind(prefix, 0) == 0) return d.path().filename().string();
  GS_FAIL("lab", "lab ", lab, " has no folder tutorials/", prefix, "* in ", GS_SOURCE_DIR);
}

fs::path grader_path(int lab) { return grader_dir() / ("lab" + std::to_string(lab) + "_grader"); }

// A path as the user would type it: relative to the current directory when below it.
std::string shown(const fs::path& p) {
  std::error_code ec;
  const fs::path rel = fs::proximate(p, ec);
  return !ec && !rel.empty() && rel.native().rfind("..", 0) != 0 ? rel.string() : p.string();
}

// What to run to build lab N's grader, for the messages below.
std::string build_hint(int lab) {
  const std::string n = std::to_string(lab);
  return "build it with: cmake --build " + shown(GS_BUILD_DIR) + " --target lab" + n +
         "_grader (or ./run.sh lab check " + n + ", which builds it, shows the compiler's errors and grades)";
}

std::string not_built(int lab) {
  return "lab " + std::to_string(lab) + "'s grader is not built (" + shown(grader_path(lab)) + " is missing); " +
         build_hint(lab);
}

bool built(int lab) { return ::access(grader_path(lab).c_str(), X_OK) == 0; }

// A lab's code edited after its grader was built is not what the grader grades: say so
// (`gradsleuth lab check N` run without rebuilding; ./run.sh always rebuilds first).
void warn_if_stale(int lab) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_time_type built_at = fs::last_write_time(grader_path(lab), ec);
  if (ec) return;
  const std::string prefix = "lab" + std::to_string(lab) + "_";
  for (const auto& d : fs::directory_iterator(fs::path(GS_SOURCE_DIR) / "tutorials", ec)) {
    if (!d.is_directory() || d.path().filename().string().rfind(prefix, 0) != 0) continue;
    for (const auto& f : fs::directory_iterator(d.path(), ec)) {
      const std::string ext = f.path().extension().string();
      if (!f.is_regular_file() || (ext != ".cpp" && ext != ".h" && ext != ".cu")) continue;  // code only
      if (fs::last_write_time(f.path(), ec) <= built_at || ec) continue;
      std::cerr << "gradsleuth lab: warning: " << shown(f.path()) << " changed after " << shown(grader_path(lab))
                << " was built: this grades your previous code. Rebuild first: ./run.sh lab check " << lab
                << " (or cmake --build " << shown(GS_BUILD_DIR) << " --target lab" << lab << "_grader)\n";
      return;
    }
  }
}

// The exit status of a waited-for child: its own, or 128 + the signal that ended it (as a shell says).
int exit_status(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1; }

// Runs lab N's grader with `args`; its stderr passes through. Its stdout is returned, and
// also copied to std::cout as it arrives when `echo` (a student sees each task as it is
// graded, and what came before a crash).
int run_grader(int lab, const std::vector<std::string>& args, bool echo, std::string& out) {
  const std::string exe = grader_path(lab).string();
  std::vector<char*> argv{const_cast<char*>(exe.c_str())};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int fd[2];
  GS_CHECK(::pipe(fd) == 0, "lab", "cannot create a pipe to run ", exe, ": ", std::strerror(errno));
  std::cout.flush();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fd[0]);
    ::close(fd[1]);
    GS_FAIL("lab", "cannot start ", exe, ": ", std::strerror(errno));
  }
  if (pid == 0) {
    ::dup2(fd[1], STDOUT_FILENO);
    ::close(fd[0]);
    ::close(fd[1]);
    ::execv(exe.c_str(), argv.data());
    const std::string m = "gradsleuth lab: cannot run " + exe + ": " + std::strerror(errno) + "\n";
    ssize_t ignored = ::write(STDERR_FILENO, m.data(), m.size());
    (void)ignored;
    ::_exit(127);
  }
  ::close(fd[1]);
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (echo) std::cout.write(buf, n).flush();
  }
  ::close(fd[0]);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return exit_status(st);
}

// A top-level integer of a grader's one-lab JSON report ({"lab":1,"title":...,"points":X,...}).
// Strings come first and escape their quotes, so the first `,"key":` is the top-level one.
int json_int(const std::string& json, const std::string& key) {
  const size_t at = json.find(",\"" + key + "\":");
  return at == std::string::npos ? 0 : std::atoi(json.c_str() + at + key.size() + 4);
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

// The labs whose grader is missing or failed, for the closing line and the exit status.
struct NotGraded {
  int lab;
  std::string reason;
};

int report_not_graded(const std::vector<NotGraded>& missed) {
  if (missed.empty()) return 0;
  for (const NotGraded& m : missed) std::cerr << "gradsleuth lab: lab " << m.lab << " not graded: " << m.reason << "\n";
  return 1;
}

// Lab N's part of tutorials/labs.txt (its tasks and points as its grader lists them), for
// `lab list` before the grader is built; empty when it is not there.
std::string listed(int lab) {
  std::ifstream f(fs::path(GS_SOURCE_DIR) / "tutorials" / "labs.txt");
  std::string line, block;
  bool in = false;
  const std::string head = "lab " + std::to_string(lab) + ": ";
  while (std::getline(f, line)) {
    if (line.rfind("lab ", 0) == 0) in = line.rfind(head, 0) == 0;
    if (in) block += line + "\n";
  }
  return block;
}

// `lab list`: every lab's grader lists its lab; a lab whose grader is not built is listed from
// tutorials/labs.txt, and one line at the end says how to build the graders. --json: the graders'
// lists joined in course order, the labs without a grader under "not_graded".
int list(bool json) {
  std::vector<NotGraded> missed;
  std::vector<std::string> entries;
  std::vector<int> unbuilt;
  for (int n : lab_numbers()) {
    if (!built(n)) {
      const std::string text = json ? "" : listed(n);
      if (!text.empty()) {
        std::cout << text;
        unbuilt.push_back(n);
      } else {
        missed.push_back({n, not_built(n)});
        if (!json) std::cout << "lab " << n << ": (its grader is not built; see below)\n";
      }
      continue;
    }
    std::string out;
    const int st =
        run_grader(n, json ? std::vector<std::string>{"list", "--json"} : std::vector<std::string>{"list"}, !json, out);
    if (st != 0) {
      missed.push_back({n, shown(grader_path(n)) + " list exited with status " + std::to_string(st)});
      continue;
    }
    // {"labs":[{...}]} -> {...}
    const std::string s = trimmed(out), head = "{\"labs\":[";
    if (json) {
      GS_CHECK(s.rfind(head, 0) == 0 && s.size() >= head.size() + 2, "lab", "unexpected output from ",
               shown(grader_path(n)), " list --json: ", s.substr(0, 80));
      entries.push_back(s.substr(head.size(), s.size() - head.size() - 2));
    }
  }
  if (!unbuilt.empty()) {
    const std::string n = std::to_string(unbuilt.front());
    std::cout << "\n"
              << (unbuilt.size() == lab_numbers().size()
                      ? std::string("No lab's grader is built yet")
                      : std::to_string(unbuilt.size()) + " labs' graders are not built yet")
              << ". Build and grade a lab with ./run.sh lab check N (e.g. ./run.sh lab check " << n
              << "), or build its grader alone with cmake --build " << shown(GS_BUILD_DIR)
              << " --target labN_grader.\n";
  }
  if (json) {
    std::cout << "{\"labs\":[";
    for (size_t i = 0; i < entries.size(); ++i) std::cout << (i ? "," : "") << entries[i];
    std::cout << "]";
    if (!missed.empty()) {
      std::cout << ",\"not_graded\":[";
      for (size_t i = 0; i < missed.size(); ++i)
        std::cout << (i ? "," : "") << "{\"lab\":" << missed[i].lab << ",\"reason\":" << json_str(missed[i].reason)
                  << "}";
      std::cout << "]";
    }
    std::cout << "}\n";
  }
  return report_not_graded(missed);
}

// `lab check all`: each lab's grader in turn. A lab whose grader is missing (it did not
// compile) or crashed is reported and the others are still graded.
int check_all(bool json, bool verbose) {
  std::vector<NotGraded> missed;
  std::vector<std::string> reports;
  int points = 0, max_points = 0;
  for (int n : lab_numbers()) {
    if (!built(n)) {
      missed.push_back({n, not_built(n)});
      if (!json) std::cout << "lab " << n << ": not graded: its grader is not built (see the end)\n";
      continue;
    }
    warn_if_stale(n);
    std::vector<std::string> args{"check", std::to_string(n)};
    if (json) args.push_back("--json");
    if (verbose) args.push_back("--verbose");
    std::string out;
    const int st = run_grader(n, args, !json, out);
    if (st != 0) {
      missed.push_back({n, shown(grader_path(n)) + " exited with status " + std::to_string(st) +
                               (st > 128 ? " (it crashed: see its message above)" : "")});
      continue;
    }
    if (json) {
      reports.push_back(trimmed(out));
      points += json_int(reports.back(), "points");
      max_points += json_int(reports.back(), "max_points");
    } else {
      // The grader's last line: "lab N: X/Y points".
      const std::string s = trimmed(out);
      const std::string last = s.substr(s.find_last_of('\n') == std::string::npos ? 0 : s.find_last_of('\n') + 1);
      int x = 0, y = 0, lab = 0;
      if (std::sscanf(last.c_str(), "lab %d: %d/%d points", &lab, &x, &y) == 3) points += x, max_points += y;
    }
  }
  if (json) {
    std::cout << "{\"labs\":[";
    for (size_t i = 0; i < reports.size(); ++i) std::cout << (i ? "," : "") << reports[i];
    std::cout << "],\"points\":" << points << ",\"max_points\":" << max_points;
    if (!missed.empty()) {
      std::cout << ",\"not_graded\":[";
      for (size_t i = 0; i < missed.size(); ++i)
        std::cout << (i ? "," : "") << "{\"lab\":" << missed[i].lab << ",\"reason\":" << json_str(missed[i].reason)
                  << "}";
      std::cout << "]";
    }
    std::cout << "}\n";
  } else {
    std::cout << "all labs: " << points << "/" << max_points << " points";
    if (!missed.empty()) {
      std::cout << " (not graded:";
      for (const NotGraded& m : missed) std::cout << " lab " << m.lab;
      std::cout << ")";
    }
    std::cout << "\n";
  }
  return report_not_graded(missed);
}

}  // namespace
#endif

int cmd_lab(const std::vector<std::string>& raw_args) {
  // -j J / -jJ as make and ninja spell it: --jobs.
  std::vector<std::string> args;
  for (const std::string& s : raw_args) {
    if (s == "-j")
      args.push_back("--jobs");
    else if (s.size() > 2 && s.rfind("-j", 0) == 0 && s.find_first_not_of("0123456789", 2) == std::string::npos)
      args.push_back("--jobs=" + s.substr(2));
    else
      args.push_back(s);
  }
  Args a("lab", args);
  a.about(
      "The course labs in tutorials/, in course order, each with starter code for you to complete.\n"
      "  gradsleuth lab list            the labs and their tasks, with points\n"
      "  gradsleuth lab check N         grades your code for lab N (e.g. tutorials/lab1_tensors/lab1.cpp):\n"
      "                                 each task's points and what is wrong, then \"lab N: X/Y points\"\n"
      "  gradsleuth lab check all       every lab in turn; one that does not build is reported, not graded\n"
      "For instructors (tutorials/INSTRUCTORS.md):\n"
      "  gradsleuth lab check N --seed S [--show-hidden]   grade on inputs the student has not seen\n"
      "  gradsleuth lab check N --gradescope [--out results.json]   Gradescope's results.json\n"
      "  gradsleuth lab release OUT [--labs 1,2,...]   write a student repository without solutions\n"
      "  gradsleuth lab grade-all N SUBMISSIONS --out gradebook.csv [-j J] [--timeout S] [--memory MB]\n"
      "                                 grade one folder per student, each built and run on its own\n"
      "Each lab has its own grader program, build/tutorials/labN_grader, built from that lab's code:\n"
      "rebuild it after editing your code. `./run.sh lab check N` does both (and shows the compiler's\n"
      "errors). Exits 0 whenever grading ran, whatever the points; 1 when a lab's grader is missing.");
  a.positionals("list | check N|all | release OUT | grade-all N SUBMISSIONS", "what to do");
  a.flag("json", "print one JSON object instead of the text report");
  a.option("task", "K", "grade only task K of the lab");
  a.flag("verbose", "show every check, the passed ones too");
  a.option("seed", "S",
           "grade on the inputs drawn from S (instructors; default: $GS_GRADER_SEED, else the public inputs)");
  a.flag("show-hidden", "with a secret --seed: print the values of a failed case's input");
  a.flag("gradescope", "write Gradescope's results.json (to --out, default results.json) instead of the report");
  a.option("out", "FILE", "with --gradescope: where to write results.json; with grade-all: the CSV gradebook");
  a.option("labs", "1,2,...", "release: the labs to hand out (default: all)");
  a.option("jobs", "J", "grade-all: submissions graded at a time (-j J; default: the number of cores)");
  a.option("timeout", "S", "grade-all: wall-clock seconds for grading one submission (default 60)");
  a.option("memory", "MB", "grade-all: memory limit of one submission's grading, in MB (default 2048)");
  a.option("feedback", "DIR", "grade-all: where the feedback files go (default: OUT.feedback/)");
  a.flag("overwrite", "grade-all: replace an earlier gradebook and its feedback folder");
  a.option("sandbox", "auto|bwrap|fallback",
           "grade-all: bubblewrap, required (bwrap), where it works (auto, the default), or never (fallback: "
           "Landlock, seccomp and the write guard only)");
  if (!a.parse()) return 0;
  const auto& pos = a.positional();
  GS_CHECK(!pos.empty() && (pos[0] == "list" || pos[0] == "check" || pos[0] == "release" || pos[0] == "grade-all"),
           "lab", "expected 'list', 'check N', 'release OUT' or 'grade-all N SUBMISSIONS' (see gradsleuth lab --help)");
  if (pos[0] == "list") GS_CHECK(pos.size() == 1, "lab", "'list' takes no argument");
  if (pos[0] == "check") GS_CHECK(pos.size() == 2, "lab", "'check' takes one argument: the lab number (or all)");
  if (pos[0] == "release") GS_CHECK(pos.size() == 2, "lab", "'release' takes one argument: the folder to write");
  if (pos[0] == "grade-all")
    GS_CHECK(pos.size() == 3, "lab", "'grade-all' takes two arguments: the lab number and the submissions folder");
  const bool grade_all = pos[0] == "grade-all";
  for (const char* opt : {"jobs", "timeout", "memory", "feedback", "sandbox", "overwrite"})
    GS_CHECK(grade_all || !a.has(opt), "lab", "--", opt, " is an option of grade-all");
  GS_CHECK(pos[0] == "release" || !a.has("labs"), "lab", "--labs is an option of release");
#ifdef GS_WITH_LABS
  const bool json = a.has("json"), verbose = a.has("verbose");
  if (pos[0] == "release") {
    // The release is a shell script (scripts/release_labs.sh): it copies what git tracks.
    const std::string script = (fs::path(GS_SOURCE_DIR) / "scripts" / "release_labs.sh").string();
    std::vector<std::string> cmd{script, pos[1]};
    if (a.has("labs")) cmd.push_back("--labs"), cmd.push_back(a.get_nonempty("labs"));
    std::vector<char*> argv;
    for (std::string& c : cmd) argv.push_back(c.data());
    argv.push_back(nullptr);
    std::cout.flush();
    ::execv(script.c_str(), argv.data());
    GS_FAIL("lab release", "cannot run ", script, ": ", std::strerror(errno));
  }
  if (grade_all) {
    GradeAllOptions g;
    g.lab = lab_number(pos[1]);
    g.lab_dir = lab_dir(g.lab);
    g.submissions = pos[2];
    GS_CHECK(a.has("out"), "lab grade-all", "give the gradebook to write: --out gradebook.csv");
    g.out = a.get_nonempty("out");
    a.check_writable_file("out");
    if (a.has("feedback")) g.feedback = a.get_nonempty("feedback");
    const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
    g.jobs = static_cast<int>(a.has("jobs") ? a.get_int_in("jobs", 1, 256) : cores);
    if (a.has("timeout")) g.timeout_s = a.get_double_in("timeout", 0, true, 86400, false);
    if (a.has("memory")) g.memory_mb = a.get_int_in("memory", 64, 1 << 20);
    if (a.has("seed")) g.seed = std::to_string(a.get_seed("seed"));
    g.gradescope = a.has("gradescope");
    g.overwrite = a.has("overwrite");
    if (a.has("sandbox")) {
      g.sandbox = a.get_nonempty("sandbox");
      GS_CHECK(g.sandbox == "auto" || g.sandbox == "bwrap" || g.sandbox == "fallback", "lab grade-all", "--sandbox '",
               g.sandbox, "': use auto, bwrap or fallback");
    }
    GS_CHECK(!json && !a.has("task") && !a.has("show-hidden"), "lab grade-all",
             "--json, --task and --show-hidden are options of check, not grade-all");
    return lab_grade_all(g);
  }
  if (pos[0] == "list") return list(json);
  const std::string& which = pos[1];
  if (which == "all") {
    GS_CHECK(!a.has("task"), "lab", "--task needs a single lab, not 'all'");
    GS_CHECK(!a.has("gradescope"), "lab", "--gradescope grades one lab: lab check N --gradescope");
    GS_CHECK(!a.has("seed") && !a.has("show-hidden"), "lab",
             "--seed and --show-hidden grade one lab (lab check N --seed S); for all labs set GS_GRADER_SEED");
    return check_all(json, verbose);
  }
  const int n = lab_number(which);
  GS_CHECK(built(n), "lab", not_built(n));
  warn_if_stale(n);
  // One lab: the grader's report and exit status as they are.
  std::vector<std::string> grader_args{"check", std::to_string(n)};
  if (json) grader_args.push_back("--json");
  if (verbose) grader_args.push_back("--verbose");
  if (a.has("task")) grader_args.push_back("--task"), grader_args.push_back(std::to_string(a.get_int("task")));
  if (a.has("seed")) grader_args.push_back("--seed"), grader_args.push_back(a.get_nonempty("seed"));
  if (a.has("show-hidden")) grader_args.push_back("--show-hidden");
  GS_CHECK(!a.has("out") || a.has("gradescope"), "lab",
           "--out is where --gradescope writes results.json: add --gradescope");
  GS_CHECK(!(a.has("gradescope") && json), "lab", "--gradescope and --json are two output formats: choose one");
  if (a.has("gradescope"))
    grader_args.push_back("--gradescope"), grader_args.push_back(a.has("out") ? a.get_nonempty("out") : "results.json");
  std::string ignored;
  return run_grader(n, grader_args, true, ignored);
#else
  GS_FAIL("lab", "this gradsleuth was built without the labs; configure with -DGRADSLEUTH_BUILD_LABS=ON");
#endif
}

}  // namespace gradsleuth::cli
