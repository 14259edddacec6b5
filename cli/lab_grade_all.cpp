// gradsleuth lab grade-all N SUBMISSIONS --out gradebook.csv: grades a class. Each student's folder
// (SUBMISSIONS/<student>/, holding that student's copy of lab N's files) is checked (regular files of
// their own only), copied, compiled on its own against lab N's grader as already built, then graded in
// a sandbox: bubblewrap where it can make its namespaces (a mount namespace with only the student's
// build and run folders writable, its own PID namespace, no network), else Landlock, seccomp and the
// grader's write guard. The points come only from the grader's results channel (a file the student's
// output never reaches), each line checked against the lab's task list. The batch goes on whatever
// one submission does; tutorials/INSTRUCTORS.md says what is and is not protected.
#ifdef GS_WITH_LABS
#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/lab_grade_all.h"
#include "core/error.h"
#include "core/io.h"

// Landlock rights newer than some kernel headers (the values are the kernel's ABI).
#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13)
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif

namespace gradsleuth::cli {
namespace {

namespace fs = std::filesystem;

// What one submission may hand in and use.
constexpr int64_t kMaxSourceBytes = 1 << 20;        // one lab file
constexpr int64_t kRunOutputBytes = 64ll << 20;     // any one file the grading writes (RLIMIT_FSIZE)
constexpr int64_t kBuildOutputBytes = 256ll << 20;  // the compiler's and linker's files (the grader: ~5 MB)
constexpr int64_t kScratchBytes = 256ll << 20;      // the run folder and /tmp in the sandbox
constexpr rlim_t kProcesses = 64;                   // processes and threads (RLIMIT_NPROC)
constexpr rlim_t kOpenFiles = 256;
constexpr uid_t kSandboxUidBase = 0x3f000;  // when grade-all runs as root: one unused uid per job

// At most `limit` bytes of a file (a submission's output can be large).
std::string read_text(const fs::path& p, size_t limit = 16u << 20) {
  std::ifstream f(p, std::ios::binary);
  std::string s;
  char buf[65536];
  while (s.size() < limit && f.read(buf, static_cast<std::streamsize>(std::min(sizeof buf, limit - s.size()))),
         f.gcount() > 0)
    s.append(buf, static_cast<size_t>(f.gcount()));
  return s;
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
    std::string file;                  // "lab1.cpp": the name the student's copy has
    std::vector<std::string> compile;  // argv; the source and object paths are replaced per student
    size_t source_arg = 0, object_arg = 0;
    std::string object;  // the starter's object in the link command
  };
  std::vector<Unit> units;
  std::vector<std::string> link;  // argv
  size_t exe_arg = 0;
  fs::path build_dir, source_dir;
};

Kit make_kit(int lab, const std::string& lab_dir) {
  Kit kit;
  kit.build_dir = GS_BUILD_DIR;
  kit.source_dir = GS_SOURCE_DIR;
  const std::string target = "lab" + std::to_string(lab) + "_grader";
  GS_CHECK(fs::exists(kit.build_dir / "build.ninja"), "lab grade-all", "grade-all reuses lab ", lab,
           "'s grader as built in ", kit.build_dir.string(),
           " with Ninja (scripts/build.sh configures it so), and there is no build.ninja there");
  GS_CHECK(fs::exists(kit.build_dir / "tutorials" / target), "lab grade-all", "lab ", lab,
           "'s grader is not built: cmake --build ", kit.build_dir.string(), " --target ", target,
           " (grade-all compiles only each student's files and links them with its objects)");
  const std::string text =
      capture("'" + std::string(GS_NINJA) + "' -C '" + kit.build_dir.string() + "' -t commands " + target + " 2>&1");
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

// ---- the lab's tasks and points (tutorials/labs.txt, which labs_lint keeps equal to the graders) ----
struct TaskList {
  std::map<std::string, int> max;  // "1.3" -> 15
  std::vector<std::string> order;
  int total = 0;
};

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }
bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

// The digits at s[i...] (at most 9, so that they fit an int): their value, and i moved past them; -1 when
// there is no digit or more than 9.
int read_digits(const std::string& s, size_t& i) {
  const size_t from = i;
  while (i < s.size() && is_digit(s[i])) ++i;
  if (i == from || i - from > 9) return -1;
  return std::stoi(s.substr(from, i - from));
}

// One task line of labs.txt: "  Task 1.3  transpose as a view      15 points  transpose_view()", an
// indented "Task LAB.N", then its title, then the last "<points> points" that has white space on both
// sides. False for any other line.
bool read_task_line(const std::string& line, int& lab, int& task, int& points) {
  size_t i = 0;
  while (i < line.size() && is_space(line[i])) ++i;
  if (i == 0 || line.compare(i, 5, "Task ") != 0) return false;
  i += 5;
  if ((lab = read_digits(line, i)) < 0 || i >= line.size() || line[i] != '.') return false;
  ++i;
  if ((task = read_digits(line, i)) < 0 || i >= line.size() || !is_space(line[i])) return false;
  const size_t title = i;
  for (size_t at = line.rfind(" points"); at != std::string::npos && at > title; at = line.rfind(" points", at - 1)) {
    size_t from = at;
    while (from > title && is_digit(line[from - 1])) --from;
    if (from == at || from - 1 <= title || !is_space(line[from - 1]) || at + 7 >= line.size() || !is_space(line[at + 7])) continue;
    size_t d = from;
    if ((points = read_digits(line, d)) >= 0) return true;
  }
  return false;
}

TaskList read_task_list(int lab, const fs::path& source_dir) {
  TaskList t;
  const fs::path file = source_dir / "tutorials" / "labs.txt";
  std::istringstream is(read_text(file));
  for (std::string line; std::getline(is, line);) {
    int l = 0, n = 0, points = 0;
    if (read_task_line(line, l, n, points) && l == lab) {
      const std::string id = std::to_string(l) + "." + std::to_string(n);
      t.max[id] = points;
      t.order.push_back(id);
      t.total += points;
    }
  }
  GS_CHECK(!t.max.empty(), "lab grade-all", file.string(), " lists no task of lab ", lab,
           ": run scripts/update_lab_list.sh (grade-all checks every result against that list)");
  return t;
}

// ---- the sandbox ------------------------------------------------------------------------------
struct Sandbox {
  bool bwrap = false;  // else the fallback: Landlock, seccomp and the write guard
  std::string bwrap_path, prlimit_path;
  bool scratch_size = false;  // this bubblewrap has --size (a bounded tmpfs)
  bool drop_uid = false;      // grade-all runs as root: each job runs as its own unused uid
  // As root without its own uid per job: where each command's pids cgroup goes ("" where none).
  fs::path cgroup_base;
  // Files and folders others may not read (in /etc and the source tree), hidden in the sandbox when
  // it runs as grade-all's own user (a uid of its own cannot read them anyway).
  std::vector<fs::path> private_files, private_dirs;
  std::string protections;  // what runs, for the output
};

struct Limits {
  double seconds = 60;
  int64_t memory_mb = 0;  // 0: none
  int64_t file_bytes = kRunOutputBytes;
};

// Where a command may read and write in the sandbox (bubblewrap); the system folders are read-only.
struct Jail {
  std::vector<fs::path> read;   // read-only, at their own path
  std::vector<fs::path> hide;   // emptied (a tmpfs) after `read`: folders inside those that stay unseen
  std::vector<fs::path> late;   // read-only, after `hide`
  std::vector<fs::path> write;  // writable, at their own path, after `hide`
  fs::path scratch;             // a writable tmpfs at this path (the run folder), or empty
  fs::path cwd;
  std::vector<std::string> env;  // KEY=VALUE added to a clean environment
};

struct Run {
  int status = 0;  // exit status, or 128 + signal
  bool timed_out = false;
  double seconds = 0;
};

std::string path_under(const fs::path& p, const fs::path& dir) {
  const std::string a = p.lexically_normal().string(), b = dir.lexically_normal().string();
  return a.size() > b.size() && a.compare(0, b.size(), b) == 0 && (b.back() == '/' || a[b.size()] == '/') ? a : "";
}

// The folders of `j` are bound from descriptors opened before the sandbox's user is set (`fds`: path ->
// descriptor), so that a uid of its own needs no search permission on the folders above them.
std::vector<std::string> bwrap_argv(const Sandbox& sb, const Jail& j, const std::map<std::string, int>& fds) {
  std::vector<std::string> a{sb.bwrap_path, "--unshare-all", "--unshare-user", "--die-with-parent",
                             "--cap-drop",  "ALL",           "--hostname",     "grading"};
  for (const char* d : {"/usr", "/etc", "/opt"})
    if (fs::is_directory(d)) a.insert(a.end(), {"--ro-bind", d, d});
  for (const char* d : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    std::error_code ec;
    if (fs::is_symlink(d, ec))
      a.insert(a.end(), {"--symlink", fs::read_symlink(d, ec).string(), d});
    else if (fs::is_directory(d, ec))
      a.insert(a.end(), {"--ro-bind", d, d});
  }
  a.insert(a.end(), {"--ro-bind-try", "/sys", "/sys", "--dev", "/dev", "--proc", "/proc"});
  // A GPU for lab 9, where there is one.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev", ec))
    if (e.path().filename().string().rfind("nvidia", 0) == 0)
      a.insert(a.end(), {"--dev-bind-try", e.path().string(), e.path().string()});
  if (sb.scratch_size) a.insert(a.end(), {"--size", std::to_string(kScratchBytes)});
  a.insert(a.end(), {"--tmpfs", "/tmp"});
  auto bind = [&](const char* how, const fs::path& p) {
    a.insert(a.end(), {how, std::to_string(fds.at(p.string())), p.string()});
  };
  for (const fs::path& p : j.read) bind("--ro-bind-fd", p);
  // What others may not read, in what is bound so far, stays unreadable.
  auto bound = [&](const fs::path& p) {
    if (!path_under(p, "/etc").empty()) return true;
    for (const fs::path& r : j.read)
      if (!path_under(p, r).empty()) return true;
    return false;
  };
  for (const fs::path& d : sb.private_dirs)
    if (bound(d)) a.insert(a.end(), {"--tmpfs", d.string()});
  for (const fs::path& f : sb.private_files)
    if (bound(f)) a.insert(a.end(), {"--ro-bind", "/dev/null", f.string()});
  for (const fs::path& p : j.hide) a.insert(a.end(), {"--tmpfs", p.string()});
  for (const fs::path& p : j.late) bind("--ro-bind-fd", p);
  for (const fs::path& p : j.write) bind("--bind-fd", p);
  if (!j.scratch.empty()) {
    if (sb.scratch_size)
      a.insert(a.end(), {"--size", std::to_string(kScratchBytes), "--tmpfs", j.scratch.string()});
    else
      bind("--bind-fd", j.scratch);
  }
  a.insert(a.end(), {"--remount-ro", "/", "--chdir", j.cwd.string()});
  if (!sb.prlimit_path.empty()) a.insert(a.end(), {"--", sb.prlimit_path, "--nproc=" + std::to_string(kProcesses)});
  a.push_back("--");
  return a;
}

// What others may not read under `dir` (not following links), at most `limit` entries; a folder
// others may not read is listed and not entered.
void find_private(const fs::path& dir, std::vector<fs::path>& files, std::vector<fs::path>& dirs, size_t limit = 2000) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator() && files.size() + dirs.size() < limit; it.increment(ec)) {
    struct stat st;
    if (::lstat(it->path().c_str(), &st) != 0 || S_ISLNK(st.st_mode) || (st.st_mode & S_IROTH)) continue;
    if (S_ISDIR(st.st_mode)) {
      dirs.push_back(it->path());
      it.disable_recursion_pending();
    } else if (S_ISREG(st.st_mode)) {
      files.push_back(it->path());
    }
  }
}

// The fallback's kernel guards. Writes only under `dir` and /dev (Landlock; false where the kernel
// has none).
bool landlock_writes_to(const fs::path& dir) {
  const long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi < 1) return false;
  uint64_t write_rights = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                          LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR |
                          LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
                          LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
  if (abi >= 2) write_rights |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) write_rights |= LANDLOCK_ACCESS_FS_TRUNCATE;
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
  allow("/dev", LANDLOCK_ACCESS_FS_WRITE_FILE | (abi >= 3 ? LANDLOCK_ACCESS_FS_TRUNCATE : 0));
  ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  const bool ok = ::syscall(SYS_landlock_restrict_self, rs, 0) == 0;
  ::close(rs);
  return ok;
}

// Refuses (EPERM) what Landlock does not cover: changing modes and owners, truncating by path,
// setsid(), setpgid(), ptrace, and signals to any process but this one and its own group (seccomp).
bool seccomp_guard() {
#if defined(__x86_64__)
  constexpr uint32_t arch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
  constexpr uint32_t arch = AUDIT_ARCH_AARCH64;
#else
  return false;
#endif
  const uint32_t self = static_cast<uint32_t>(::getpid());
  const uint32_t deny = SECCOMP_RET_ERRNO | EPERM;
  std::vector<sock_filter> f;
  auto stmt = [&](uint16_t code, uint32_t k) { f.push_back(BPF_STMT(code, k)); };
  auto jump = [&](uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) { f.push_back(BPF_JUMP(code, k, jt, jf)); };
  stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch));
  jump(BPF_JMP | BPF_JEQ | BPF_K, arch, 1, 0);
  stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr));
#if defined(__x86_64__)
  // x32 system calls (numbers with bit 30 set) would slip past the numbers below: refused.
  jump(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1);
  stmt(BPF_RET | BPF_K, deny);
#endif
  std::vector<long> denied = {
#ifdef __NR_chmod
      __NR_chmod,
#endif
#ifdef __NR_chown
      __NR_chown,
#endif
#ifdef __NR_lchown
      __NR_lchown,
#endif
#ifdef __NR_fchmodat2
      __NR_fchmodat2,
#endif
      __NR_fchmod,    __NR_fchmodat, __NR_fchown, __NR_fchownat, __NR_truncate, __NR_setsid, __NR_setpgid, __NR_ptrace};
  for (long nr : denied) {
    jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1);
    stmt(BPF_RET | BPF_K, deny);
  }
  // kill(pid, sig), tkill(tid, sig), tgkill(tgid, tid, sig): only this process (pid, 0 or -pid).
  for (long nr : {long(__NR_kill), long(__NR_tkill), long(__NR_tgkill)}) {
    jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 6);
    stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0]));
    jump(BPF_JMP | BPF_JEQ | BPF_K, self, 2, 0);
    jump(BPF_JMP | BPF_JEQ | BPF_K, nr == __NR_kill ? 0u : self, 1, 0);
    jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(-static_cast<int32_t>(self)), 0, 1);
    stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    stmt(BPF_RET | BPF_K, deny);
  }
  stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  sock_fprog prog{static_cast<unsigned short>(f.size()), f.data()};
  ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  return ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

// A pids cgroup under `base` (cgroup v1's pids hierarchy or v2) that holds at most kProcesses
// processes; "" when it cannot be made (not root, a read-only cgroup file system).
fs::path make_pids_cgroup(const fs::path& base) {
  static int serial = 0;
  const fs::path dir = base / ("gradsleuth-" + std::to_string(::getpid()) + "-" + std::to_string(serial++));
  if (::mkdir(dir.c_str(), 0755) != 0) return {};
  std::ofstream(dir / "pids.max") << kProcesses << "\n";
  if (read_text(dir / "pids.max", 64).rfind(std::to_string(kProcesses), 0) != 0) {
    ::rmdir(dir.c_str());
    return {};
  }
  return dir;
}

// Kills every process left in the cgroup (a daemon, a process after setsid()), then removes it.
void remove_pids_cgroup(const fs::path& dir) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    std::istringstream procs(read_text(dir / "cgroup.procs", 1 << 20));
    bool any = false;
    for (long p; procs >> p;) any = true, ::kill(static_cast<pid_t>(p), SIGKILL);
    if (!any && ::rmdir(dir.c_str()) == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

fs::path find_pids_cgroup_base() {
  if (::geteuid() != 0) return {};
  for (const fs::path& base : {fs::path("/sys/fs/cgroup/pids"), fs::path("/sys/fs/cgroup")}) {
    if (base == "/sys/fs/cgroup") {
      if (read_text(base / "cgroup.controllers", 4096).find("pids") == std::string::npos) continue;
      std::ofstream(base / "cgroup.subtree_control") << "+pids\n";
    } else if (!fs::exists(base / "tasks")) {
      continue;
    }
    const fs::path test = make_pids_cgroup(base);
    if (test.empty()) continue;
    remove_pids_cgroup(test);
    return base;
  }
  return {};
}

// The processes and threads this user runs now (RLIMIT_NPROC counts them all).
rlim_t user_tasks() {
  rlim_t n = 0;
  std::error_code ec;
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    struct stat st;
    if (::stat(it->path().c_str(), &st) != 0 || st.st_uid != ::geteuid()) continue;
    std::istringstream is(read_text(it->path() / "status", 8192));
    for (std::string line; std::getline(is, line);)
      if (line.rfind("Threads:", 0) == 0) n += std::strtoul(line.c_str() + 8, nullptr, 10);
  }
  return n;
}

void set_limit(int what, rlim_t v) {
  rlimit r{v, v};
  ::setrlimit(what, &r);
}

// Runs argv with stdout/stderr to files (and the results channel, when given, as descriptor 3), in
// its own process group, under the limits: in bubblewrap with `jail` when `sb.bwrap`, else (when
// `fallback_dir` is set) with the fallback's guards writing only there. `uid` > 0: as that user.
Run run_limited(const std::vector<std::string>& argv, const fs::path& out, const fs::path& err, const Limits& lim,
                const Sandbox& sb, const Jail& jail, const fs::path& fallback_dir, const fs::path& channel,
                const std::string& channel_token, uid_t uid) {
  Run r;
  const fs::path cgroup = sb.cgroup_base.empty() ? fs::path() : make_pids_cgroup(sb.cgroup_base);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  GS_CHECK(pid >= 0, "lab grade-all", "cannot fork: ", std::strerror(errno));
  if (pid == 0) {
    // Its own process group, and no controlling terminal (nothing can be typed into the instructor's).
    ::setsid();
    if (!cgroup.empty()) std::ofstream(cgroup / "cgroup.procs") << "0\n";  // this process and all it starts
    ::signal(SIGPIPE, SIG_DFL);
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = err == out ? o : ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int in = ::open("/dev/null", O_RDONLY);
    const int ch = channel.empty() ? -1 : ::open(channel.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (o < 0 || e < 0 || in < 0 || (!channel.empty() && ch < 0) || ::chdir(sb.bwrap ? "/" : jail.cwd.c_str()) != 0) {
      dprintf(e >= 0 ? e : 2, "cannot set up the run: %s\n", std::strerror(errno));
      ::_exit(126);
    }
    ::dup2(in, 0), ::dup2(o, 1), ::dup2(e, 2);
    if (ch >= 0) ::dup2(ch, 3);
    for (int fd = ch >= 0 ? 4 : 3; fd < 1024; ++fd) ::close(fd);
    std::map<std::string, int> fds;  // the jail's folders, opened while this is still grade-all's user
    if (sb.bwrap) {
      std::vector<fs::path> all = jail.read;
      all.insert(all.end(), jail.late.begin(), jail.late.end());
      all.insert(all.end(), jail.write.begin(), jail.write.end());
      if (!jail.scratch.empty() && !sb.scratch_size) all.push_back(jail.scratch);
      for (const fs::path& p : all) {
        const int fd = ::open(p.c_str(), O_PATH | O_DIRECTORY);
        if (fd < 0) {
          dprintf(2, "cannot open %s for the sandbox: %s\n", p.c_str(), std::strerror(errno));
          ::_exit(126);
        }
        fds[p.string()] = fd;
      }
    }
    // A clean environment: nothing of the instructor's (a seed, tokens) reaches the student's code.
    ::clearenv();
    ::setenv("PATH", "/usr/local/bin:/usr/bin:/bin", 1);
    ::setenv("LANG", "C.UTF-8", 1);
    ::setenv("OMP_NUM_THREADS", "1", 1);
    ::setenv("CCACHE_DISABLE", "1", 1);
    // Temporary files: the run folder when grading (the write guard allows it), else /tmp.
    ::setenv("TMPDIR", jail.scratch.empty() ? "/tmp" : jail.scratch.c_str(), 1);
    ::setenv("HOME", jail.cwd.c_str(), 1);
    for (const std::string& kv : jail.env) ::putenv(const_cast<char*>(kv.c_str()));
    if (ch >= 0) ::setenv("GS_GRADER_CHANNEL", ("3 " + channel_token).c_str(), 1);
    set_limit(RLIMIT_CORE, 0);
    set_limit(RLIMIT_FSIZE, static_cast<rlim_t>(lim.file_bytes));
    set_limit(RLIMIT_NOFILE, kOpenFiles);
    const rlim_t cpu = static_cast<rlim_t>(lim.seconds) + 5;
    rlimit c{cpu, cpu + 5};
    ::setrlimit(RLIMIT_CPU, &c);
    if (lim.memory_mb > 0) set_limit(RLIMIT_AS, static_cast<rlim_t>(lim.memory_mb) << 20);
    std::vector<std::string> full;
    if (sb.bwrap) {
      full = bwrap_argv(sb, jail, fds);
      if (uid > 0) set_limit(RLIMIT_NPROC, kProcesses + 8);  // its own uid: counts only this sandbox
    } else if (!fallback_dir.empty()) {
      ::setenv("GS_GRADER_SANDBOX", fallback_dir.c_str(), 1);
      ::setenv("TMPDIR", fallback_dir.c_str(), 1);
      if (uid > 0)
        set_limit(RLIMIT_NPROC, kProcesses + 8);
      else if (::geteuid() != 0)
        set_limit(RLIMIT_NPROC, user_tasks() + kProcesses);  // counts all of this user's
    }
    full.insert(full.end(), argv.begin(), argv.end());
    if (uid > 0) {
      if (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 || ::setuid(uid) != 0) {
        dprintf(2, "cannot run as uid %u: %s\n", static_cast<unsigned>(uid), std::strerror(errno));
        ::_exit(126);
      }
    }
    if (!sb.bwrap && !fallback_dir.empty()) {
      landlock_writes_to(fallback_dir);
      seccomp_guard();
    }
    std::vector<char*> args;
    for (const std::string& a : full) args.push_back(const_cast<char*>(a.c_str()));
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
  if (!r.timed_out) ::kill(-pid, SIGKILL);  // anything it left running in its group
  if (!cgroup.empty()) remove_pids_cgroup(cgroup);
  return r;
}

// Whether bubblewrap runs here as grading needs it (its namespaces, folders bound from descriptors,
// as `uid` when > 0, a sized scratch tmpfs when `sb.scratch_size`): "" when it does, else why not.
std::string try_bwrap(const Sandbox& sb, const fs::path& work, const Kit& kit, uid_t uid) {
  const fs::path probe = work / ".sandbox-probe", log = work / ".sandbox-probe.log";
  std::error_code ec;
  fs::remove_all(probe, ec);
  fs::create_directories(probe / "run", ec);
  if (uid > 0) ::chown(probe.c_str(), uid, uid), ::chown((probe / "run").c_str(), uid, uid);
  Jail j;
  j.read = {kit.source_dir, kit.build_dir};
  j.write = {probe};
  j.scratch = probe / "run";
  j.cwd = probe / "run";
  const std::string test = "test -r '" + (kit.build_dir / "build.ninja").string() +
                           "' && echo ok > x && test -s x && echo ok > /tmp/y && test -s /tmp/y";
  const Run r = run_limited({"/bin/sh", "-c", test}, log, log, Limits{20, 0}, sb, j, {}, {}, {}, uid);
  std::string why = read_text(log, 4096);
  fs::remove_all(probe, ec);
  fs::remove(log, ec);
  while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
  if (r.status == 0) return "";
  return why.empty() ? "exit status " + std::to_string(r.status) : why;
}

std::string find_program(const char* name) {
  for (const char* dir : {"/usr/bin", "/bin", "/usr/local/bin", "/usr/sbin", "/sbin"}) {
    const fs::path p = fs::path(dir) / name;
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

Sandbox choose_sandbox(const std::string& want, const fs::path& work, const Kit& kit) {
  Sandbox sb;
  const bool root = ::geteuid() == 0;
  std::string why_not;
  if (want != "fallback") {
    sb.bwrap_path = find_program("bwrap");
    sb.prlimit_path = find_program("prlimit");
    if (sb.bwrap_path.empty()) {
      why_not = "bubblewrap (bwrap) is not installed: scripts/setup.sh installs it";
    } else {
      // As root, each job runs as its own unused uid, so that the process limit counts that job only.
      // The first of these that works: its own uid or not, a sized scratch tmpfs or not.
      sb.bwrap = true;
      std::string why;
      for (const auto& [drop, size] : {std::pair{true, true}, {true, false}, {false, true}, {false, false}}) {
        if (drop && !root) continue;
        sb.drop_uid = drop, sb.scratch_size = size;
        const std::string w = try_bwrap(sb, work, kit, drop ? kSandboxUidBase : 0);
        if (w.empty()) {
          why.clear();
          break;
        }
        if (why.empty()) why = w;
      }
      if (!why.empty()) why_not = "bubblewrap cannot make its namespaces here (" + why + ")";
      sb.bwrap = why_not.empty();
    }
  }
  // As root, without a uid of its own per job, a pids cgroup limits the processes instead, and what
  // others may not read in /etc and the source tree is hidden.
  if (root && !sb.drop_uid) sb.cgroup_base = find_pids_cgroup_base();
  if (sb.bwrap && !sb.drop_uid)
    for (const fs::path& d : {fs::path("/etc"), kit.source_dir}) find_private(d, sb.private_files, sb.private_dirs);
  if (want == "bwrap")
    GS_CHECK(sb.bwrap, "lab grade-all", "--sandbox bwrap: ", why_not,
             "; --sandbox auto falls back to Landlock, seccomp and the grader's write guard");
  if (sb.bwrap) {
    sb.protections =
        "bubblewrap (mount, PID, network and user namespaces; writes only in the student's build "
        "and run folders; other students' folders, the submissions and your files unseen)";
    if (sb.drop_uid) sb.protections += ", each job as its own unused uid";
    if (sb.drop_uid || (!root && !sb.prlimit_path.empty()))
      sb.protections += ", at most " + std::to_string(kProcesses) + " processes";
    else if (!sb.cgroup_base.empty())
      sb.protections += ", at most " + std::to_string(kProcesses) + " processes (a pids cgroup per command)";
    else if (root)
      sb.protections +=
          "; no process limit (as root it needs a uid of its own per job, and that uid cannot reach "
          "the build, source or --out folders: make them and their parents readable by others)";
    else
      sb.protections += "; no process limit (prlimit, from util-linux, is not installed)";
    if (!sb.scratch_size) sb.protections += "; the run folder is on disk (this bwrap has no --size)";
  } else {
    sb.protections =
        "fallback: Landlock (writes), seccomp (chmod, chown, truncate, setsid, signals to others) and "
        "the grader's write guard; reads, the network and other processes are not isolated (" +
        (why_not.empty() ? std::string("--sandbox fallback") : why_not) + ")";
    sb.protections += !sb.cgroup_base.empty() ? "; at most " + std::to_string(kProcesses) + " processes (a pids cgroup)"
                      : root                  ? "; no process limit (root, and no writable pids cgroup)"
                             : "; at most " + std::to_string(kProcesses) + " processes more than you run";
  }
  return sb;
}

// ---- the student's files -------------------------------------------------------------------------
std::string file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a folder";
  if (S_ISLNK(m)) return "a symbolic link";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device file";
  if (S_ISFIFO(m)) return "a named pipe";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

// Finds each of `files` in the student's folder (at any depth; symbolic links to folders are not
// followed) and copies it to `dest`. Returns "" or why the submission is refused.
std::string take_files(const fs::path& src, const std::vector<std::string>& files, const fs::path& dest) {
  struct stat st;
  if (::stat(src.c_str(), &st) != 0)
    return std::string("refused: the folder cannot be opened (") + std::strerror(errno) +
           (errno == ELOOP ? "; a symbolic link loop" : "") + ")";
  if (!S_ISDIR(st.st_mode)) return "refused: " + src.filename().string() + " is not a folder";
  std::map<std::string, fs::path> found;
  std::vector<fs::path> dirs{src};
  size_t seen = 0;
  while (!dirs.empty() && found.size() < files.size()) {
    const fs::path d = dirs.front();
    dirs.erase(dirs.begin());
    std::error_code ec;
    std::vector<fs::path> entries;
    for (fs::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec)) entries.push_back(it->path());
    if (ec) return "refused: cannot read " + d.lexically_relative(src).string() + " in the submission";
    std::sort(entries.begin(), entries.end());
    for (const fs::path& p : entries) {
      if (++seen > 100000) return "refused: the folder holds more than 100000 files";
      struct stat ls;
      if (::lstat(p.c_str(), &ls) != 0) continue;
      const std::string name = p.filename().string();
      if (S_ISDIR(ls.st_mode)) {
        dirs.push_back(p);
        continue;
      }
      if (std::find(files.begin(), files.end(), name) == files.end() || found.count(name)) continue;
      const std::string rel = p.lexically_relative(src).string();
      if (S_ISLNK(ls.st_mode)) {
        const fs::path to = fs::read_symlink(p, ec);
        return "refused: " + rel + " is a symbolic link (to " + to.string() + "); hand in the file itself";
      }
      if (!S_ISREG(ls.st_mode)) return "refused: " + rel + " is " + file_kind(ls.st_mode) + ", not a source file";
      if (ls.st_nlink > 1)
        return "refused: " + rel + " has " + std::to_string(ls.st_nlink) +
               " hard links (it may be a file outside the submission); hand in a copy";
      if (ls.st_size > kMaxSourceBytes)
        return "refused: " + rel + " is " + std::to_string(ls.st_size) + " bytes (the limit is " +
               std::to_string(kMaxSourceBytes) + ")";
      found[name] = p;
    }
  }
  for (const std::string& f : files)
    if (!found.count(f)) return "missing file: " + f;
  // Copy through one descriptor, checked again (a file swapped since the walk is refused too).
  for (const auto& [name, p] : found) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat fst;
    if (fd < 0 || ::fstat(fd, &fst) != 0 || !S_ISREG(fst.st_mode) || fst.st_nlink > 1 ||
        fst.st_size > kMaxSourceBytes) {
      if (fd >= 0) ::close(fd);
      return "refused: " + name + " changed while it was read (a link or not a regular file)";
    }
    std::string text(static_cast<size_t>(fst.st_size), '\0');
    size_t got = 0;
    for (ssize_t n; got < text.size() && (n = ::read(fd, text.data() + got, text.size() - got)) > 0;) got += n;
    ::close(fd);
    text.resize(got);
    std::ofstream(dest / name, std::ios::binary) << text;
  }
  return "";
}

// ---- the results channel ---------------------------------------------------------------------------
std::string random_token() {
  unsigned char b[16] = {0};
  std::ifstream("/dev/urandom", std::ios::binary).read(reinterpret_cast<char*>(b), sizeof b);
  static const char* hex = "0123456789abcdef";
  std::string t;
  for (unsigned char c : b) t += hex[c >> 4], t += hex[c & 15];
  return t;
}

struct Results {
  std::map<std::string, int> points;
  std::vector<std::string> started;  // "@task" lines: the tasks to grade, in order
  std::string review;                // why the results cannot be trusted ("" when they can)
  std::string denied;                // a write the guard refused
  bool ended = false;
  std::string gradescope;  // results.json, from the channel
};

// Reads the channel: every line must carry the token and agree with the lab's task list.
Results read_channel(const std::string& text, const std::string& token, const TaskList& list) {
  Results r;
  std::map<std::string, int> max_seen;
  int end_points = -1, end_max = -1;
  auto review = [&](const std::string& why) {
    if (r.review.empty()) r.review = why;
  };
  std::istringstream is(text);
  for (std::string line; std::getline(is, line);) {
    if (line.empty()) continue;
    const size_t sp1 = line.find(' '), sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
    const std::string kind = line.substr(0, sp1);
    const std::string tok =
        sp1 == std::string::npos ? "" : line.substr(sp1 + 1, sp2 == std::string::npos ? sp2 : sp2 - sp1 - 1);
    const std::string rest = sp2 == std::string::npos ? "" : line.substr(sp2 + 1);
    if (tok != token) {
      review("a line on the results channel without the grader's token");
      continue;
    }
    const std::vector<std::string> w = split_words(rest);
    if (kind == "@task" && w.size() == 1) {
      if (!list.max.count(w[0]))
        review("a result for Task " + w[0] + ", which lab has no such task");
      else
        r.started.push_back(w[0]);
    } else if (kind == "@task-done" && w.size() == 4) {
      int p = 0, m = 0;
      try {
        p = std::stoi(w[1]), m = std::stoi(w[2]);
      } catch (const std::exception&) {
        review("a result line that is not numbers: " + line.substr(0, 80));
        continue;
      }
      const auto it = list.max.find(w[0]);
      if (it == list.max.end())
        review("a result for Task " + w[0] + ", which the lab does not have");
      else if (r.points.count(w[0]))
        review("two results for Task " + w[0]);
      else if (!(m == it->second || (w[3] == "skipped" && m == 0)))
        review("Task " + w[0] + " reported out of " + std::to_string(m) + " points; it is worth " +
               std::to_string(it->second));
      else if (p < 0 || p > m)
        review("Task " + w[0] + " reported " + std::to_string(p) + " points out of " + std::to_string(m));
      else
        r.points[w[0]] = p, max_seen[w[0]] = m;
    } else if (kind == "@end" && w.size() == 2) {
      try {
        end_points = std::stoi(w[0]), end_max = std::stoi(w[1]);
      } catch (const std::exception&) {
        review("a summary line that is not numbers");
      }
      if (r.ended) review("two summary lines");
      r.ended = true;
    } else if (kind == "@gradescope") {
      r.gradescope = rest;
    } else if (kind == "@write-denied") {
      if (r.denied.empty()) r.denied = rest;
    } else {
      review("an unknown line on the results channel: " + line.substr(0, 80));
    }
  }
  int sum = 0, max_sum = 0;
  for (const auto& [t, p] : r.points) sum += p, max_sum += max_seen[t];
  if (r.ended && (end_points != sum || end_max != max_sum))
    review("the tasks add up to " + std::to_string(sum) + "/" + std::to_string(max_sum) + " points, the summary says " +
           std::to_string(end_points) + "/" + std::to_string(end_max));
  if (!r.gradescope.empty()) {
    // results.json opens with {"score":<the sum of the tasks>,
    const std::string& g = r.gradescope;
    const std::string head = "{\"score\":";
    size_t i = head.size();
    int score = -1;
    bool negative = false;
    if (g.compare(0, i, head) == 0) {
      negative = i < g.size() && g[i] == '-';
      i += negative ? 1 : 0;
      score = read_digits(g, i);
    }
    if (score < 0 || i >= g.size() || g[i] != ',' || (negative ? -score : score) != sum)
      review("results.json gives another score than the tasks (" + std::to_string(sum) + " points)");
  }
  return r;
}

// A student's result, written by the worker that graded them (one line per field).
struct Result {
  std::string student, status;
  std::map<std::string, int> points;  // "1.3" -> points
  int total = 0;
  bool review = false;
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

// The feedback never shows the instructor's seed (the student's code can print what the grader was given).
std::string redact(std::string text, const std::string& seed) {
  if (seed.size() < 4) return text;
  for (size_t at; (at = text.find(seed)) != std::string::npos;) text.replace(at, seed.size(), "<the grading seed>");
  return text;
}

void chown_tree(const fs::path& p, uid_t uid) {
  if (uid == 0) return;
  ::lchown(p.c_str(), uid, uid);
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    ::lchown(it->path().c_str(), uid, uid);
}

// Grades one student (in a worker process): check and copy the files, compile, link, run; writes
// WORK/result.txt and the feedback. `uid` > 0: the sandboxed commands run as that user.
void grade_student(const GradeAllOptions& o, const Kit& kit, const TaskList& list, const Sandbox& sb,
                   const std::string& student, const fs::path& src, const fs::path& work, const fs::path& feedback,
                   const fs::path& subs_root, const fs::path& work_root, uid_t uid) {
  std::error_code ec;
  fs::remove_all(work, ec);
  for (const char* d : {"src", "build", "run"}) fs::create_directories(work / d);
  ::chmod(work.c_str(), 0755);
  std::ostringstream fb;  // the feedback file
  std::string status = "graded";
  Results res;
  bool review = false;
  // The compiler gets the same memory as the grading (at least 2 GB): a template bomb stays bounded.
  const Limits build_limits{std::max(o.timeout_s, 300.0), std::max<int64_t>(o.memory_mb, 2048), kBuildOutputBytes};

  // 0. The student's own files only, copied.
  std::vector<std::string> files;
  for (const Kit::Unit& u : kit.units) files.push_back(u.file);
  std::string refused = take_files(src, files, work / "src");
  chown_tree(work / "build", uid);
  chown_tree(work / "run", uid);
  bool built = refused.empty();
  if (!built) status = refused;

  // The compiler and linker see the source and build trees read-only, the student's copy, and
  // write only in work/build; the other students and the submissions folder are hidden.
  Jail build_jail;
  build_jail.read = {kit.source_dir, kit.build_dir};
  for (const fs::path& h : {subs_root, work_root})
    for (const fs::path& r : {kit.source_dir, kit.build_dir})
      if (!path_under(h, r).empty() &&
          std::find(build_jail.hide.begin(), build_jail.hide.end(), h) == build_jail.hide.end())
        build_jail.hide.push_back(h);
  build_jail.late = {work / "src"};
  build_jail.write = {work / "build"};
  build_jail.cwd = kit.build_dir;

  // 1. Compile the student's files, each with its starter's command, into work/build.
  std::vector<std::string> link = kit.link;
  link[kit.exe_arg] = (work / "build" / "grader").string();
  for (const Kit::Unit& u : built ? kit.units : std::vector<Kit::Unit>{}) {
    std::vector<std::string> cc = u.compile;
    cc[u.source_arg] = (work / "src" / u.file).string();
    cc[u.object_arg] = (work / "build" / (u.file + ".o")).string();
    const Run r =
        run_limited(cc, work / "compile.log", work / "compile.log", build_limits, sb, build_jail, {}, {}, {}, uid);
    if (r.status != 0 || r.timed_out) {
      // The copy's path as the student's own file name.
      std::string log = read_text(work / "compile.log", 1 << 20);
      const std::string copy = (work / "src").string() + "/";
      for (size_t at; (at = log.find(copy)) != std::string::npos;) log.erase(at, copy.size());
      status = r.timed_out ? "did not compile: the compiler ran past " + seconds_str(build_limits.seconds)
                           : "did not compile: " + first_error(log);
      fb << "The compiler's output for " << u.file << ":\n" << log << "\n";
      built = false;
      break;
    }
    for (std::string& a : link)
      if (a == u.object) a = cc[u.object_arg];
  }
  if (built) {
    const Run r =
        run_limited(link, work / "link.log", work / "link.log", build_limits, sb, build_jail, {}, {}, {}, uid);
    if (r.status != 0) {
      const std::string log = read_text(work / "link.log", 1 << 20);
      status = "did not link: " + first_error(log);
      fb << "The linker's output:\n" << log << "\n";
      built = false;
    }
  }
  // 2. Grade it, sandboxed in work/run; the results come back on the channel (work/channel.log).
  if (built) {
    std::vector<std::string> cmd{(work / "build" / "grader").string(), "check", std::to_string(o.lab), "--events"};
    if (!o.seed.empty()) cmd.push_back("--seed"), cmd.push_back(o.seed);
    if (o.gradescope) cmd.push_back("--gradescope"), cmd.push_back("results.json");
    const Limits lim{o.timeout_s, o.memory_mb, kRunOutputBytes};
    Jail run_jail;
    run_jail.read = {work / "build"};
    run_jail.scratch = work / "run";
    run_jail.cwd = work / "run";
    // The write guard reports a refused write on the channel (and refuses it in the fallback).
    run_jail.env = {"GS_GRADER_SANDBOX=" + (work / "run").string()};
    const std::string token = random_token();
    const Run r = run_limited(cmd, work / "report.txt", work / "stderr.txt", lim, sb, run_jail, work / "run",
                              work / "channel.log", token, uid);
    const std::string report = read_text(work / "report.txt", 1 << 20), err = read_text(work / "stderr.txt", 1 << 20);
    res = read_channel(read_text(work / "channel.log", 4 << 20), token, list);
    std::string running;  // the first task without a result
    for (const std::string& t : res.started)
      if (!res.points.count(t)) {
        running = t;
        break;
      }
    const std::string in_task = running.empty() ? "" : " in Task " + running;
    if (r.timed_out)
      status = "timed out" + in_task + " after " + seconds_str(o.timeout_s);
    else if (r.status == 128 + SIGXCPU)
      status = "ran out of CPU time" + in_task;
    else if (r.status == 128 + SIGXFSZ)
      status = "wrote a file over " + std::to_string(kRunOutputBytes >> 20) + " MB" + in_task;
    else if (r.status > 128)
      status = "crashed" + in_task + ": " + signal_name(r.status - 128);
    else if (r.status != 0)
      status = "the grader exited with status " + std::to_string(r.status) + in_task;
    else if (!res.ended && res.review.empty())
      res.review = "the grader finished without its summary line";
    if (!res.denied.empty())
      status =
          "tried to write outside its folder (" + res.denied + ", refused)" + (status == "graded" ? "" : "; " + status);
    if (!res.review.empty()) {
      review = true;
      status = "needs review: " + res.review + " (" + status + ")";
    }
    fb << report;
    if (!err.empty()) fb << "\nstderr:\n" << err;
    // On disk (the fallback, or a bwrap without --size): a run folder over the scratch size is emptied.
    if (!(sb.bwrap && sb.scratch_size)) {
      uintmax_t bytes = 0;
      std::error_code e2;
      for (auto it = fs::recursive_directory_iterator(work / "run", e2);
           !e2 && it != fs::recursive_directory_iterator(); it.increment(e2))
        if (it->is_regular_file(e2)) bytes += it->file_size(e2);
      if (bytes > static_cast<uintmax_t>(kScratchBytes)) {
        fs::remove_all(work / "run", e2);
        fs::create_directories(work / "run", e2);
        fb << "\nThe run folder held " << (bytes >> 20) << " MB (more than " << (kScratchBytes >> 20)
           << " MB): its files were removed.\n";
      }
    }
    if (o.gradescope && !res.gradescope.empty() && !review) {
      std::error_code ec2;
      fs::remove_all(work / "run", ec2);
      fs::create_directories(work / "run", ec2);
      write_file_atomic((work / "run" / "results.json").string(), res.gradescope + "\n", "lab grade-all");
    }
  }
  int total = 0;
  for (const auto& [t, p] : res.points) total += p;
  std::ostringstream result;
  result << "status " << redact(status, o.seed) << "\n";
  if (review)
    result << "review\n";
  else
    for (const auto& [t, p] : res.points) result << "task " << t << " " << p << "\n";
  write_file_atomic((work / "result.txt").string(), result.str(), "lab grade-all");
  std::ostringstream head;
  head << "student: " << student << "\nlab " << o.lab << ": "
       << (review ? std::string("no points (needs review)") : std::to_string(total) + " points")
       << "\nstatus: " << status << "\n\n";
  write_file_atomic(feedback.string(), redact(head.str() + fb.str(), o.seed), "lab grade-all");
}

Result read_result(const std::string& student, const fs::path& work) {
  Result r;
  r.student = student;
  std::istringstream is(read_text(work / "result.txt", 1 << 20));
  for (std::string line; std::getline(is, line);) {
    if (line.rfind("status ", 0) == 0) r.status = line.substr(7);
    if (line == "review") r.review = true;
    char id[32];
    int p = 0;
    if (std::sscanf(line.c_str(), "task %31s %d", id, &p) == 2) r.points[id] = p, r.total += p;
  }
  if (r.status.empty())
    r.status = "not graded: its grading process failed (see " + (work / "worker.log").string() + ")";
  return r;
}

std::string csv(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

// Descriptors 0-2 open (a closed stdout must not become the gradebook's descriptor), SIGPIPE ignored.
void steady_stdio() {
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) < 0) {
      const int n = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
      if (n >= 0 && n != fd) ::dup2(n, fd), ::close(n);
    }
  ::signal(SIGPIPE, SIG_IGN);
}

}  // namespace

int lab_grade_all(const GradeAllOptions& opts) {
  steady_stdio();
  GradeAllOptions o = opts;
  if (o.seed.empty())
    if (const char* env = std::getenv("GS_GRADER_SEED"); env && *env) o.seed = env;
  const fs::path subs = o.submissions;
  std::error_code ec;
  GS_CHECK(fs::is_directory(subs, ec), "lab grade-all", "'", o.submissions, "' is not a folder",
           ec ? " (" + ec.message() + ")" : std::string(), ": give the folder that holds one folder per student");
  std::vector<std::string> students;
  for (fs::directory_iterator it(subs, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    const bool dir = it->is_directory(ec2);
    // A symbolic link loop or a dangling link among the students: graded as refused, not skipped.
    if (dir || ec2 || it->is_symlink(ec2)) students.push_back(it->path().filename().string());
  }
  GS_CHECK(!ec, "lab grade-all", "cannot list '", o.submissions, "': ", ec.message());
  std::sort(students.begin(), students.end());
  GS_CHECK(!students.empty(), "lab grade-all", "'", o.submissions, "' holds no student folders");
  const Kit kit = make_kit(o.lab, o.lab_dir);
  const TaskList list = read_task_list(o.lab, kit.source_dir);
  const fs::path out = fs::absolute(o.out);
  const fs::path work = o.work.empty() ? fs::path(out.string() + ".work") : fs::absolute(o.work);
  const fs::path feedback = o.feedback.empty() ? fs::path(out.string() + ".feedback") : fs::absolute(o.feedback);
  // An earlier gradebook and its feedback are results: replacing them takes --overwrite.
  {
    std::string existing;
    if (fs::exists(out, ec)) existing = out.string();
    if (fs::is_directory(feedback, ec) && !fs::is_empty(feedback, ec))
      existing += (existing.empty() ? "" : ", ") + feedback.string() + "/";
    GS_CHECK(existing.empty() || o.overwrite, "lab grade-all", "an earlier grading is there (", existing,
             "); pass --overwrite to replace it, or choose another --out");
  }
  fs::create_directories(work);
  fs::create_directories(feedback);
  ::chmod(work.c_str(), 0755);
  const Sandbox sb = choose_sandbox(o.sandbox, work, kit);
  std::cerr << "lab grade-all: lab " << o.lab << ", " << students.size() << " submissions, " << o.jobs << " at a time, "
            << o.timeout_s << " s and " << o.memory_mb << " MB each\n"
            << "lab grade-all: sandbox: " << sb.protections << "\n";

  // A pool of worker processes, one per student at a time; each job slot has its own uid (as root).
  std::map<pid_t, std::pair<std::string, int>> running;
  std::set<int> free_slots;
  for (int s = 0; s < o.jobs; ++s) free_slots.insert(s);
  size_t next = 0, done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const fs::path subs_abs = fs::absolute(subs).lexically_normal();
  auto reap = [&]() {
    int st = 0;
    const pid_t p = ::waitpid(-1, &st, 0);
    if (p <= 0) return;
    const auto it = running.find(p);
    if (it == running.end()) return;
    ++done;
    const Result r = read_result(it->second.first, work / it->second.first);
    std::cerr << "  [" << done << "/" << students.size() << "] " << r.student << ": "
              << (r.review ? std::string("no points") : std::to_string(r.total) + " points") << ", " << r.status
              << "\n";
    free_slots.insert(it->second.second);
    running.erase(it);
  };
  while (next < students.size() || !running.empty()) {
    if (next < students.size() && !free_slots.empty()) {
      const std::string s = students[next++];
      const int slot = *free_slots.begin();
      free_slots.erase(free_slots.begin());
      const uid_t uid = sb.drop_uid ? kSandboxUidBase + static_cast<uid_t>(slot) : 0;
      std::cout.flush(), std::cerr.flush();
      const pid_t p = ::fork();
      GS_CHECK(p >= 0, "lab grade-all", "cannot fork: ", std::strerror(errno));
      if (p == 0) {
        int rc = 0;
        try {
          std::error_code ec2;
          fs::create_directories(work / s, ec2);
          const int log = ::open((work / s / "worker.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
          if (log >= 0) ::dup2(log, 2), ::close(log);
          grade_student(o, kit, list, sb, s, subs / s, work / s, feedback / (s + ".txt"), subs_abs, work, uid);
        } catch (const std::exception& e) {
          std::cerr << "lab grade-all: " << s << ": " << e.what() << "\n";
          rc = 1;
        }
        std::cout.flush(), std::cerr.flush();
        ::_exit(rc);
      }
      running[p] = {s, slot};
      continue;
    }
    reap();
  }

  // The gradebook: one row per student, one column per task of the lab; no points for a row to review.
  std::vector<Result> results;
  for (const std::string& s : students) results.push_back(read_result(s, work / s));
  std::ostringstream csvs;
  csvs << "student";
  for (const std::string& t : list.order) csvs << ",Task " << t;
  csvs << ",total,status\n";
  size_t reviews = 0;
  for (const Result& r : results) {
    csvs << csv(r.student);
    for (const std::string& t : list.order)
      csvs << "," << (r.review ? std::string() : r.points.count(t) ? std::to_string(r.points.at(t)) : "0");
    csvs << "," << (r.review ? std::string() : std::to_string(r.total)) << "," << csv(r.status) << "\n";
    reviews += r.review;
  }
  write_file_atomic(out.string(), csvs.str(), "lab grade-all");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "lab grade-all: " << results.size() << " students graded in " << seconds_str(secs) << "; gradebook "
            << o.out << ", feedback in " << feedback.string() << "/"
            << (reviews ? "; " + std::to_string(reviews) + " need review (their status says why)" : std::string())
            << "\n";
  return 0;
}

}  // namespace gradsleuth::cli
#endif
