// gradsleuth lab grade-all N SUBMISSIONS --out gradebook.csv: grades a class. Each student's
// folder (SUBMISSIONS/<student>/, holding that student's copy of lab N's files) is compiled on its
// own against lab N's grader as already built (only the student's files are compiled; the
// grader's objects and the engine are linked as they are), then graded in a child process with a
// wall-clock limit, a memory limit (RLIMIT_AS), a CPU-time limit, and writes allowed only in the
// student's work folder (Landlock, where the kernel has it, and the grader's own write guard,
// tutorials/grader/sandbox.cpp). A submission that does not compile, crashes, hangs or writes
// elsewhere gets its points so far and a status saying so; the batch goes on.
#ifdef GS_WITH_LABS
#include <fcntl.h>
#include <linux/landlock.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/lab_grade_all.h"
#include "core/error.h"
#include "core/io.h"

namespace gradsleuth::cli {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream is(s);
  std::vector<std::string> w;
  for (std::string x; is >> x;) w.push_back(x);
  return w;
}

// The output of a command run with /bin/sh (for `ninja -t commands`); throws on failure.
std::string capture(const std::string& cmd) {
  FILE* p = ::popen(cmd.c_str(), "r");
  GS_CHECK(p != nullptr, "lab grade-all", "cannot run ", cmd);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int st = ::pclose(p);
  GS_CHECK(st == 0, "lab grade-all", "'", cmd, "' failed (status ", st, ")");
  return out;
}

// How lab N's grader is built, from the build tree's own commands: the compile command of each
// of the lab's starter files, and the link command with those objects in it.
struct Kit {
  struct Unit {
    std::string file;                 // "lab1.cpp": the name the student's copy has
    std::vector<std::string> compile; // argv; the source and object paths are replaced per student
    size_t source_arg = 0, object_arg = 0;
    std::string object;               // the starter's object in the link command
  };
  std::vector<Unit> units;
  std::vector<std::string> link;      // argv
  size_t exe_arg = 0;
  fs::path build_dir;
};

Kit make_kit(int lab, const std::string& lab_dir) {
  Kit kit;
  kit.build_dir = GS_BUILD_DIR;
  const std::string target = "lab" + std::to_string(lab) + "_grader";
  GS_CHECK(fs::exists(kit.build_dir / "build.ninja"), "lab grade-all",
           "grade-all reuses lab ", lab, "'s grader as built in ", kit.build_dir.string(),
           " with Ninja (scripts/build.sh configures it so), and there is no build.ninja there");
  GS_CHECK(fs::exists(kit.build_dir / "tutorials" / target), "lab grade-all", "lab ", lab,
           "'s grader is not built: cmake --build ", kit.build_dir.string(), " --target ", target,
           " (grade-all compiles only each student's files and links them with its objects)");
  const std::string text = capture("'" + std::string(GS_NINJA) + "' -C '" + kit.build_dir.string() +
                                   "' -t commands " + target + " 2>&1");
  const std::string own = "/tutorials/" + lab_dir + "/";
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> w = split_words(line);
    auto find = [&](const std::string& flag) {
      for (size_t i = 0; i + 1 < w.size(); ++i)
        if (w[i] == flag) return i + 1;
      return size_t(0);
    };
    const size_t c = find("-c"), o = find("-o");
    if (c && o && w[c].find(own) != std::string::npos && w[c].find("/solution/") == std::string::npos &&
        w[c].size() > 4 && w[c].substr(w[c].size() - 4) == ".cpp") {
      Kit::Unit u;
      u.file = fs::path(w[c]).filename().string();
      u.object = w[o];
      // Without the dependency-file flags (-MD -MT x -MF y): a student's build is thrown away.
      for (size_t i = 0; i < w.size(); ++i) {
        if (w[i] == "-MD") continue;
        if (w[i] == "-MT" || w[i] == "-MF") {
          ++i;
          continue;
        }
        if (i == c) u.source_arg = u.compile.size();
        if (i == o) u.object_arg = u.compile.size();
        u.compile.push_back(w[i]);
      }
      kit.units.push_back(u);
    } else if (o && w[o] == "tutorials/" + target) {
      // ": && c++ ... -o tutorials/labN_grader ... && :"
      std::vector<std::string> cmd;
      for (size_t i = 0; i < w.size(); ++i) {
        if (w[i] == ":" || w[i] == "&&") continue;
        if (i == o) kit.exe_arg = cmd.size();
        cmd.push_back(w[i]);
      }
      kit.link = cmd;
    }
  }
  GS_CHECK(!kit.units.empty() && !kit.link.empty(), "lab grade-all", "could not read how ", target,
           " is compiled and linked from 'ninja -t commands ", target, "' in ", kit.build_dir.string());
  return kit;
}

// Restricts this process (and what it runs) to writing inside `dir` and /dev, with Landlock.
// False where the kernel has no Landlock (the grader's own write guard still applies).
bool landlock_writes_to(const fs::path& dir) {
  const long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi < 1) return false;
  uint64_t write_rights = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                          LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |
                          LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK |
                          LANDLOCK_ACCESS_FS_MAKE_FIFO | LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
#ifdef LANDLOCK_ACCESS_FS_REFER
  if (abi >= 2) write_rights |= LANDLOCK_ACCESS_FS_REFER;
#endif
#ifdef LANDLOCK_ACCESS_FS_TRUNCATE
  if (abi >= 3) write_rights |= LANDLOCK_ACCESS_FS_TRUNCATE;
#endif
  landlock_ruleset_attr attr{};
  attr.handled_access_fs = write_rights;
  const int rs = static_cast<int>(::syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0));
  if (rs < 0) return false;
  auto allow = [&](const fs::path& p, uint64_t rights) {
    landlock_path_beneath_attr pb{};
    pb.allowed_access = rights;
    pb.parent_fd = ::open(p.c_str(), O_PATH | O_CLOEXEC);
    if (pb.parent_fd < 0) return;
    ::syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
    ::close(pb.parent_fd);
  };
  allow(dir, write_rights);
  allow("/dev", LANDLOCK_ACCESS_FS_WRITE_FILE);
  ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  const bool ok = ::syscall(SYS_landlock_restrict_self, rs, 0) == 0;
  ::close(rs);
  return ok;
}

struct Limits {
  double seconds = 60;
  int64_t memory_mb = 2048;
};

struct Run {
  int status = 0;          // exit status, or 128 + signal
  bool timed_out = false;
  double seconds = 0;
};

// Runs argv in `cwd` with stdout/stderr to files, in its own process group, under the limits;
// `sandbox` (when not empty): writes only there.
Run run_limited(const std::vector<std::string>& argv, const fs::path& cwd, const fs::path& out, const fs::path& err,
                const Limits& lim, const fs::path& sandbox) {
  Run r;
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  GS_CHECK(pid >= 0, "lab grade-all", "cannot fork: ", std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = err == out ? o : ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int in = ::open("/dev/null", O_RDONLY);
    if (o < 0 || e < 0 || in < 0 || ::chdir(cwd.c_str()) != 0) ::_exit(126);
    ::dup2(in, 0), ::dup2(o, 1), ::dup2(e, 2);
    if (!sandbox.empty()) {
      const rlim_t mem = static_cast<rlim_t>(lim.memory_mb) << 20;
      rlimit as{mem, mem};
      ::setrlimit(RLIMIT_AS, &as);
      const rlim_t cpu = static_cast<rlim_t>(lim.seconds) + 5;
      rlimit c{cpu, cpu + 5};
      ::setrlimit(RLIMIT_CPU, &c);
      rlimit core{0, 0};
      ::setrlimit(RLIMIT_CORE, &core);
      ::setenv("GS_GRADER_SANDBOX", sandbox.c_str(), 1);
      ::setenv("TMPDIR", sandbox.c_str(), 1);
      ::setenv("HOME", sandbox.c_str(), 1);
      ::setenv("OMP_NUM_THREADS", "1", 1);
      landlock_writes_to(sandbox);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    dprintf(2, "cannot run %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  int st = 0;
  for (;;) {
    const pid_t w = ::waitpid(pid, &st, WNOHANG);
    if (w == pid) break;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r.seconds > lim.seconds) {
      r.timed_out = true;
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
  if (!r.timed_out) ::kill(-pid, SIGKILL);  // anything it left running
  return r;
}

// A student's result, written by the worker that graded them (one line per field).
struct Result {
  std::string student, status;
  std::map<std::string, int> points;  // "1.3" -> points
  int total = 0;
};

std::string first_error(const std::string& log) {
  std::istringstream is(log);
  for (std::string line; std::getline(is, line);)
    if (line.find("error") != std::string::npos) return line.size() > 200 ? line.substr(0, 200) + "..." : line;
  return "see the feedback file";
}

std::string signal_name(int sig) {
  const char* s = ::strsignal(sig);
  return std::string(s ? s : "signal") + " (signal " + std::to_string(sig) + ")";
}

std::string seconds_str(double s) {
  std::ostringstream os;
  os << static_cast<long>(s + 0.5) << " s";
  return os.str();
}

// Grades one student (in a worker process): compile, link, run; writes WORK/result and the feedback.
void grade_student(const GradeAllOptions& o, const Kit& kit, const std::string& student, const fs::path& src,
                   const fs::path& work, const fs::path& feedback) {
  std::error_code ec;
  fs::remove_all(work, ec);
  fs::create_directories(work / "build");
  fs::create_directories(work / "run");
  std::ostringstream fb;  // the feedback file
  std::string status = "graded";
  std::vector<std::string> tasks;
  std::map<std::string, int> points;
  const Limits build_limits{std::max(o.timeout_s, 300.0), 0};

  // 1. Compile the student's files, each with its starter's command, into work/build.
  std::vector<std::string> link = kit.link;
  link[kit.exe_arg] = (work / "build" / "grader").string();
  bool built = true;
  for (const Kit::Unit& u : kit.units) {
    fs::path mine;
    for (auto it = fs::recursive_directory_iterator(src, ec); !ec && it != fs::recursive_directory_iterator(); ++it)
      if (it->is_regular_file() && it->path().filename() == u.file) {
        mine = it->path();
        break;
      }
    if (mine.empty()) {
      status = "missing file: " + u.file;
      built = false;
      break;
    }
    std::vector<std::string> cc = u.compile;
    cc[u.source_arg] = fs::absolute(mine).string();
    cc[u.object_arg] = (work / "build" / (u.file + ".o")).string();
    const Run r = run_limited(cc, kit.build_dir, work / "compile.log", work / "compile.log", build_limits, {});
    if (r.status != 0 || r.timed_out) {
      const std::string log = read_text(work / "compile.log");
      status = r.timed_out ? "did not compile: the compiler ran past " + seconds_str(build_limits.seconds)
                           : "did not compile: " + first_error(log);
      fb << "The compiler's output for " << mine.filename().string() << ":\n" << log << "\n";
      built = false;
      break;
    }
    for (std::string& a : link)
      if (a == u.object) a = cc[u.object_arg];
  }
  if (built) {
    const Run r = run_limited(link, kit.build_dir, work / "link.log", work / "link.log", build_limits, {});
    if (r.status != 0) {
      const std::string log = read_text(work / "link.log");
      status = "did not link: " + first_error(log);
      fb << "The linker's output:\n" << log << "\n";
      built = false;
    }
  }
  // 2. Grade it, sandboxed in work/run.
  if (built) {
    std::vector<std::string> cmd{(work / "build" / "grader").string(), "check", std::to_string(o.lab), "--events"};
    if (!o.seed.empty()) cmd.push_back("--seed"), cmd.push_back(o.seed);
    if (o.gradescope) cmd.push_back("--gradescope"), cmd.push_back("results.json");
    const Limits lim{o.timeout_s, o.memory_mb};
    const Run r = run_limited(cmd, work / "run", work / "report.txt", work / "events.log", lim, work / "run");
    const std::string report = read_text(work / "report.txt"), events = read_text(work / "events.log");
    std::istringstream is(events);
    std::string denied, other_stderr;
    for (std::string line; std::getline(is, line);) {
      char id[32];
      int p = 0, m = 0;
      if (std::sscanf(line.c_str(), "@task-done %31s %d %d", id, &p, &m) == 3) points[id] = p;
      else if (std::sscanf(line.c_str(), "@task %31s", id) == 1) tasks.push_back(id);
      else if (line.rfind("@write-denied ", 0) == 0) denied = line.substr(14);
      else other_stderr += line + "\n";
    }
    std::string running;  // the first task without a result
    for (const std::string& t : tasks)
      if (!points.count(t)) {
        running = t;
        break;
      }
    const std::string in_task = running.empty() ? "" : " in Task " + running;
    if (r.timed_out) status = "timed out" + in_task + " after " + seconds_str(o.timeout_s);
    else if (r.status == 128 + SIGXCPU) status = "ran out of CPU time" + in_task;
    else if (r.status > 128) status = "crashed" + in_task + ": " + signal_name(r.status - 128);
    else if (r.status != 0) status = "the grader exited with status " + std::to_string(r.status) + in_task;
    if (!denied.empty())
      status = "tried to write outside its folder (" + denied + ", refused)" + (status == "graded" ? "" : "; " + status);
    fb << report;
    if (!other_stderr.empty()) fb << "\n" << other_stderr;
  }
  int total = 0;
  for (const auto& [t, p] : points) total += p;
  std::ofstream res(work / "result.txt");
  res << "status " << status << "\n";
  for (const auto& [t, p] : points) res << "task " << t << " " << p << "\n";
  res.close();
  std::ostringstream head;
  head << "student: " << student << "\nlab " << o.lab << ": " << total << " points\nstatus: " << status << "\n\n";
  write_file_atomic(feedback.string(), head.str() + fb.str(), "lab grade-all");
}

Result read_result(const std::string& student, const fs::path& work) {
  Result r;
  r.student = student;
  std::istringstream is(read_text(work / "result.txt"));
  for (std::string line; std::getline(is, line);) {
    if (line.rfind("status ", 0) == 0) r.status = line.substr(7);
    char id[32];
    int p = 0;
    if (std::sscanf(line.c_str(), "task %31s %d", id, &p) == 2) r.points[id] = p, r.total += p;
  }
  if (r.status.empty()) r.status = "not graded: its grading process failed (see " + (work / "worker.log").string() + ")";
  return r;
}

std::string csv(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

}  // namespace

int lab_grade_all(const GradeAllOptions& o) {
  const fs::path subs = o.submissions;
  GS_CHECK(fs::is_directory(subs), "lab grade-all", "'", o.submissions,
           "' is not a folder: give the folder that holds one folder per student");
  std::vector<std::string> students;
  for (const auto& e : fs::directory_iterator(subs))
    if (e.is_directory()) students.push_back(e.path().filename().string());
  std::sort(students.begin(), students.end());
  GS_CHECK(!students.empty(), "lab grade-all", "'", o.submissions, "' holds no student folders");
  const Kit kit = make_kit(o.lab, o.lab_dir);
  const fs::path out = fs::absolute(o.out);
  const fs::path work = o.work.empty() ? fs::path(out.string() + ".work") : fs::absolute(o.work);
  const fs::path feedback = o.feedback.empty() ? fs::path(out.string() + ".feedback") : fs::absolute(o.feedback);
  fs::create_directories(work);
  fs::create_directories(feedback);
  std::cerr << "lab grade-all: lab " << o.lab << ", " << students.size() << " submissions, " << o.jobs
            << " at a time, " << o.timeout_s << " s and " << o.memory_mb << " MB each\n";

  // A pool of worker processes, one per student at a time.
  std::map<pid_t, std::string> running;
  size_t next = 0, done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto reap = [&](bool block) {
    int st = 0;
    const pid_t p = ::waitpid(-1, &st, block ? 0 : WNOHANG);
    if (p <= 0 || !running.count(p)) return;
    ++done;
    const Result r = read_result(running[p], work / running[p]);
    std::cerr << "  [" << done << "/" << students.size() << "] " << r.student << ": " << r.total << " points, "
              << r.status << "\n";
    running.erase(p);
  };
  while (next < students.size() || !running.empty()) {
    if (next < students.size() && static_cast<int>(running.size()) < o.jobs) {
      const std::string s = students[next++];
      std::cout.flush(), std::cerr.flush();
      const pid_t p = ::fork();
      GS_CHECK(p >= 0, "lab grade-all", "cannot fork: ", std::strerror(errno));
      if (p == 0) {
        int rc = 0;
        try {
          grade_student(o, kit, s, subs / s, work / s, feedback / (s + ".txt"));
        } catch (const std::exception& e) {
          std::cerr << "lab grade-all: " << s << ": " << e.what() << "\n";
          rc = 1;
        }
        std::cout.flush(), std::cerr.flush();
        ::_exit(rc);
      }
      running[p] = s;
      continue;
    }
    reap(true);
  }

  // The gradebook: one row per student, one column per task.
  std::vector<Result> results;
  std::vector<std::string> tasks;
  for (const std::string& s : students) {
    results.push_back(read_result(s, work / s));
    for (const auto& [t, p] : results.back().points)
      if (std::find(tasks.begin(), tasks.end(), t) == tasks.end()) tasks.push_back(t);
  }
  std::sort(tasks.begin(), tasks.end(), [](const std::string& a, const std::string& b) {
    return std::stoi(a.substr(a.find('.') + 1)) < std::stoi(b.substr(b.find('.') + 1));
  });
  std::ostringstream csvs;
  csvs << "student";
  for (const std::string& t : tasks) csvs << ",Task " << t;
  csvs << ",total,status\n";
  for (const Result& r : results) {
    csvs << csv(r.student);
    for (const std::string& t : tasks) csvs << "," << (r.points.count(t) ? std::to_string(r.points.at(t)) : "0");
    csvs << "," << r.total << "," << csv(r.status) << "\n";
  }
  write_file_atomic(out.string(), csvs.str(), "lab grade-all");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "lab grade-all: " << results.size() << " students graded in " << seconds_str(secs) << "; gradebook "
            << o.out << ", feedback in " << feedback.string() << "/\n";
  return 0;
}

}  // namespace gradsleuth::cli
#endif
