// The grader's command line, shared by `gradsleuth lab` (cli/cmd_lab.cpp) and
// the standalone graders that CTest runs (grader/main.cpp).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>

#include "core/io.h"
#include "tutorials/grader/grader.h"

namespace gradsleuth::labs {

namespace {

// The results channel (take_results_channel): a descriptor and the token every line carries.
int g_channel_fd = -1;
char g_channel_token[80] = {0};

}  // namespace

void take_results_channel(char** envp) {
  // Before the C library's own start-up (.preinit_array) getenv() does not work yet: read envp.
  static const char kName[] = "GS_GRADER_CHANNEL=";
  char* spec = nullptr;
  for (char** e = envp; e && *e && !spec; ++e)
    if (std::strncmp(*e, kName, sizeof kName - 1) == 0) spec = *e + sizeof kName - 1;
  if (!spec) spec = std::getenv("GS_GRADER_CHANNEL");
  if (!spec || !*spec) return;
  int fd = -1;
  char token[80] = {0};
  if (std::sscanf(spec, "%d %79s", &fd, token) == 2 && fd >= 0 && std::strlen(token) >= 16) {
    struct stat st;
    if (::fstat(fd, &st) == 0) {
      const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 200);
      if (moved >= 0) {
        ::close(fd);
        g_channel_fd = moved;
        std::memcpy(g_channel_token, token, sizeof g_channel_token);
      }
    }
  }
  // Wipe the value where /proc/self/environ shows it too (main() drops the variable).
  std::memset(spec, 'x', std::strlen(spec));
}

bool has_results_channel() { return g_channel_fd >= 0; }

void write_results_channel(const std::string& kind, const std::string& rest) {
  if (g_channel_fd < 0) return;
  const std::string line = "@" + kind + " " + g_channel_token + (rest.empty() ? "" : " " + rest) + "\n";
  for (size_t done = 0; done < line.size();) {
    const ssize_t n = ::write(g_channel_fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

namespace {

// The exit status that `expect` asks for (see CommandOptions).
int expected_status(const std::vector<LabResult>& results, const std::string& expect, std::ostream& out, bool json) {
  if (expect.empty()) return 0;
  GS_CHECK(expect == "full" || expect == "consistent", "lab", "unknown --expect '", expect,
           "': use full or consistent");
  std::ostream& log = json ? std::cerr : out;
  int status = 0;
  bool skipped = false;
  for (const LabResult& r : results) {
    for (const TaskResult& t : r.tasks) {
      const std::string id = "Task " + std::to_string(r.number) + "." + std::to_string(t.number);
      if (t.status == Status::Skipped) {
        skipped = true;
        continue;
      }
      if (expect == "full" && t.points != t.max_points) {
        log << "expect full: " << id << " got " << t.points << "/" << t.max_points << " points\n";
        status = 1;
      }
      if (expect == "consistent" && t.status == Status::NotImplemented &&
          (t.points != 0 || t.feedback.rfind("not implemented yet", 0) != 0)) {
        log << "expect consistent: " << id << " is not implemented but got " << t.points << " points and feedback '"
            << t.feedback << "'\n";
        status = 1;
      }
    }
  }
  if (status == 0 && skipped && expect == "full") {
    log << "expect full: some tasks were skipped (see their feedback)\n";
    return 77;
  }
  return status;
}

}  // namespace

int run_command(const CommandOptions& o, std::ostream& out) {
  if (o.action == "list") {
    if (o.json)
      out << list_json() << "\n";
    else
      print_list(out);
    return 0;
  }
  GS_CHECK(o.action == "check", "lab", "unknown action '", o.action, "': use list or check");
  std::vector<const Lab*> labs;
  if (o.lab == "all") {
    for (const Lab& l : all_labs()) labs.push_back(&l);
  } else {
    int n = 0;
    try {
      size_t used = 0;
      n = std::stoi(o.lab, &used);
      if (used != o.lab.size()) n = 0;
    } catch (const std::exception&) {
      n = 0;
    }
    const Lab* l = find_lab(n);
    std::string valid;
    for (const Lab& x : all_labs()) valid += (valid.empty() ? "" : ", ") + std::to_string(x.number);
    GS_CHECK(l != nullptr, "lab", "there is no lab '", o.lab, "'; the labs are ", valid,
             " (gradsleuth lab list shows them)");
    labs.push_back(l);
  }
  if (o.task > 0) {
    GS_CHECK(labs.size() == 1, "lab", "--task needs a single lab, not 'all'");
    bool found = false;
    for (const Task& t : labs[0]->tasks) found = found || t.number == o.task;
    GS_CHECK(found, "lab", "lab ", labs[0]->number, " has no task ", o.task, " (gradsleuth lab list shows them)");
  }

  GS_CHECK(o.gradescope.empty() || labs.size() == 1, "lab", "--gradescope needs a single lab, not 'all'");
  set_grading_threads();
  const auto t0 = std::chrono::steady_clock::now();
  // --events: the points and where a hang or a crash happened, for grade-all (on its results
  // channel; stderr, unbuffered, without one).
  auto event = [&](const std::string& kind, const std::string& rest) {
    if (!o.events) return;
    if (has_results_channel())
      write_results_channel(kind, rest);
    else
      std::fprintf(stderr, "@%s %s\n", kind.c_str(), rest.c_str());
  };
  auto on_event = [&](const TaskResult& t) {
    event("task-done", std::to_string(t.lab) + "." + std::to_string(t.number) + " " + std::to_string(t.points) + " " +
                           std::to_string(t.max_points) + " " + status_name(t.status));
  };
  for (const Lab* l : labs)
    for (const Task& t : l->tasks)
      if (o.task == 0 || t.number == o.task) event("task", std::to_string(l->number) + "." + std::to_string(t.number));
  std::vector<LabResult> results;
  for (const Lab* l : labs) {
    if (!o.gradescope.empty()) {
      results.push_back(grade(*l, o.task, on_event));
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const std::string text = gradescope_json(results.back(), seconds) + "\n";
      if (o.events) write_results_channel("gradescope", text.substr(0, text.size() - 1));
      if (o.gradescope == "-")
        out << text;
      else {
        write_file_atomic(o.gradescope, text, "lab check --gradescope");
        out << "lab " << l->number << ": " << results.back().points << "/" << results.back().max_points
            << " points; Gradescope results written to " << o.gradescope << "\n";
      }
      continue;
    }
    if (o.json) {
      results.push_back(grade(*l, o.task, on_event));
      continue;
    }
    // Text: each task as soon as it is graded (if student code crashes, what came before is on screen).
    print_lab_header(out, *l);
    out.flush();
    results.push_back(grade(*l, o.task, [&](const TaskResult& t) {
      print_task(out, t, o.verbose);
      out.flush();
      on_event(t);
    }));
    print_summary(out, results.back());
  }
  int points = 0, max_points = 0;
  for (const LabResult& r : results) points += r.points, max_points += r.max_points;
  event("end", std::to_string(points) + " " + std::to_string(max_points));
  if (!o.gradescope.empty()) {
  } else if (o.json) {
    if (results.size() == 1) {
      out << report_json(results[0]) << "\n";
    } else {
      out << "{\"labs\":[";
      for (size_t i = 0; i < results.size(); ++i) out << (i ? "," : "") << report_json(results[i]);
      out << "],\"points\":" << points << ",\"max_points\":" << max_points << "}\n";
    }
  } else if (results.size() > 1) {
    out << "all labs: " << points << "/" << max_points << " points\n";
  }
  return expected_status(results, o.expect, out, o.json || o.gradescope == "-");
}

}  // namespace gradsleuth::labs
