// The autograder's engine: runs each case under try/catch, turns the result into
// points and feedback, and prints the text and JSON reports (see grader.h).
#include "tutorials/grader/grader.h"

#include "core/autograd.h"
#include "core/format.h"
#include "core/generator.h"
#include "core/observer.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <string_view>
#include <unordered_set>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/json.h"

namespace gradsleuth::labs {

// ---- helpers --------------------------------------------------------------------------
std::string fixed(double v, int digits) { return str_printf("%.*f", digits, v); }

std::string sci(double v) { return str_printf("%.3g", v); }

std::string g9(double v) { return std::isnan(v) ? "nan" : str_printf("%.9g", v); }

// ---- the input seed ------------------------------------------------------------------
namespace {
uint64_t g_input_seed = kPublicInputs;
bool g_show_hidden = false;
// The case now running (lab, task, case index), for vary(): each case draws its own sizes.
thread_local uint64_t t_case_key = 0;

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

void set_input_seed(uint64_t seed, bool show_hidden_values) {
  g_input_seed = seed;
  g_show_hidden = show_hidden_values;
}
uint64_t input_seed() { return g_input_seed; }
bool hidden_inputs() { return g_input_seed != kPublicInputs; }
bool show_hidden_values() { return g_show_hidden; }

uint64_t input_seed(uint64_t stream) {
  return hidden_inputs() ? splitmix64(stream ^ splitmix64(g_input_seed)) : stream;
}

int64_t vary(int64_t size) {
  if (!hidden_inputs() || size <= 1) return size;
  const int64_t k = 1 + static_cast<int64_t>(splitmix64(t_case_key ^ splitmix64(g_input_seed)) % 2);  // 1 or 2
  return size + k * (size - 1);
}

Shape vary(const Shape& s) {
  Shape out = s;
  for (auto& n : out) n = vary(n);
  return out;
}

uint64_t parse_input_seed(const std::string& text, const std::string& where) {
  bool ok = !text.empty() && text.size() <= 19;
  for (char ch : text) ok = ok && ch >= '0' && ch <= '9';
  GS_CHECK(ok, "lab", where, " '", text,
           "' is not an input seed: give a decimal integer from 0 to 999999999999999999 (", kPublicInputs,
           " is the public one)");
  return std::stoull(text);
}

Tensor randn_seeded(const Shape& s, uint64_t seed, double scale, DType dt) {
  Generator gen(input_seed(seed));
  return randn(s, dt, &gen) * scale;
}

std::string num(double v) {
  std::ostringstream os;
  os << std::setprecision(6) << v;
  return os.str();
}

bool within_storage(const Tensor& t, std::string* why) {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  if (!t.defined()) return no("the tensor is undefined");
  if (!t.storage()) return no("the tensor has no storage");
  if (t.is_cuda()) return no("the tensor is on the GPU; the grader reads CPU tensors");
  for (int64_t s : t.shape())
    if (s < 0) return no("negative size in shape " + shape_str(t.shape()));
  if (t.numel() == 0) return true;
  const int64_t capacity = static_cast<int64_t>(t.storage()->nbytes() / t.element_size());
  int64_t lo = t.offset(), hi = t.offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t span = (t.shape()[d] - 1) * t.strides()[d];
    (span < 0 ? lo : hi) += span;
  }
  if (lo < 0 || hi >= capacity)
    return no("its elements would lie at storage positions " + std::to_string(lo) + ".." + std::to_string(hi) +
              ", outside its storage of " + std::to_string(capacity) + " elements (shape " + shape_str(t.shape()) +
              ", strides " + shape_str(t.strides()) + ", offset " + std::to_string(t.offset()) +
              "): the offset or a stride is wrong");
  return true;
}

std::string values_str(const Tensor& t, int64_t max_elements) {
  if (!within_storage(t)) return "<unreadable>";
  const std::vector<double> v = t.to_vector<double>();
  if (t.dim() == 0) return num(v.empty() ? 0.0 : v[0]);
  std::string s;
  const int64_t n = static_cast<int64_t>(v.size());
  for (int64_t i = 0; i < n && i < max_elements; ++i) {
    // Open a bracket for every dim that starts at element i.
    int64_t block = 1;
    std::string open, close;
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      block *= t.shape()[d];
      if (i % block == 0) open += "[";
      if ((i + 1) % block == 0) close += "]";
    }
    if (i > 0) s += ", ";
    s += open + num(v[i]) + close;
  }
  if (n > max_elements) s += ", ...";
  return n == 0 ? "[]" : s;
}

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined Tensor";
  std::string s = t.str() + " strides " + shape_str(t.strides()) + " offset " + std::to_string(t.offset());
  if (t.numel() <= 12) s += " = " + values_str(t);
  return s;
}

// ---- Check ---------------------------------------------------------------------------
void Check::fail(const std::string& message) const {
  throw CaseFailed{input_.empty() ? message : message + "\ninput: " + input_};
}

void Check::require_dims(const DimVector& got, const DimVector& want, const std::string& what) const {
  if (got != want) fail(what + ": expected " + shape_str(want) + ", got " + shape_str(got));
}

void Check::require_eq(int64_t got, int64_t want, const std::string& what) const {
  if (got != want) fail(what + ": expected " + std::to_string(want) + ", got " + std::to_string(got));
}

void Check::require_near(double got, double want, double tol, const std::string& what) const {
  if (!(std::fabs(got - want) <= tol))  // NaN fails too
    fail(what + ": expected " + num(want) + ", got " + num(got) + " (tolerance " + num(tol) + ")");
}

void Check::require_tensor(const Tensor& got, const Shape& want_shape, const std::string& what) const {
  if (!got.defined()) fail(what + ": got an undefined Tensor (did the function return Tensor()?)");
  if (got.shape() != want_shape)
    fail(what + ": expected shape " + shape_str(want_shape) + ", got " + got.str() + " (strides " +
         shape_str(got.strides()) + ")");
  std::string why;
  if (!within_storage(got, &why)) fail(what + ": " + why);
}

void Check::require_close(const Tensor& got, const Tensor& want, const std::string& what, double rtol,
                          double atol) const {
  require_tensor(got, want.shape(), what);
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  int64_t worst = -1, bad = 0;
  double worst_excess = 0.0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double tol = atol + rtol * std::fabs(w[i]);
    const double err = std::fabs(g[i] - w[i]);
    const bool same_special = (std::isnan(g[i]) && std::isnan(w[i])) || (std::isinf(w[i]) && g[i] == w[i]);
    if (same_special || err <= tol) continue;
    ++bad;
    const double excess = std::isnan(err) ? INFINITY : err - tol;
    if (worst < 0 || excess > worst_excess) worst = static_cast<int64_t>(i), worst_excess = excess;
  }
  if (worst < 0) return;
  std::ostringstream os;
  os << what << ": " << bad << " of " << g.size() << " elements differ; worst at "
     << coords_str(unravel(worst, want.shape())) << ": expected " << num(w[worst]) << ", got " << num(g[worst]);
  if (g.size() <= 12) os << "\nexpected " << values_str(want) << "\ngot      " << values_str(got);
  fail(os.str());
}

void Check::require_throws(const std::function<void()>& f, const std::string& what) const {
  try {
    f();
  } catch (const Error& e) {
    if (not_implemented_task(e.what()).first != 0) throw;
    return;
  } catch (const CaseFailed&) {
    throw;
  } catch (const std::exception& e) {
    fail(what + ": expected a gs::Error, got another exception: " + e.what());
  }
  fail(what + ": expected a gs::Error (bad input must fail loudly), but nothing was thrown");
}

// ---- the student's own backward ----------------------------------------------------
// A pre-hook on the student's node says that its backward is starting; the observer's
// on_backward (called right after a node's backward returned) says that it finished, and
// checks the shapes of the gradients it returned. A backward that raises never finishes, so
// the case's catch (run_case) finds its name here. The observer is attached (for this thread
// only) by the first such hook of a case and detached when the case ends.
namespace {

// True when `from` broadcasts to `to` (the mistake of a backward that forgot to sum).
bool broadcasts_to(const Shape& from, const Shape& to) {
  try {
    return broadcast_shapes(from, to, "grader") == to;
  } catch (const Error&) {
    return false;
  }
}

struct BackwardWatch final : OpObserver {
  const Node* running = nullptr;  // the student's node whose backward started and has not returned
  std::string node;               // its name
  std::string shape_error;        // set when it returned a gradient of the wrong shape
  bool attached = false;
  // The nodes of this case that watch_backward has seen (held, so that a freed node's address
  // cannot be mistaken for a new node's).
  std::unordered_set<std::shared_ptr<Node>> hooked;

  void on_backward(const BackwardEvent& e) override {
    if (e.node != running) return;
    for (size_t i = 0; i < e.num_grad_inputs && i < e.node->next_edges.size(); ++i) {
      const Edge& edge = e.node->next_edges[i];
      const Tensor& g = e.grad_inputs[i];
      if (!edge.fn || !g.defined() || g.shape() == edge.shape) continue;
      // The engine raises next; leave `running` set so the case reports it as this backward's.
      const bool broadcast = g.numel() > numel_of(edge.shape) && broadcasts_to(edge.shape, g.shape());
      shape_error = "the gradient it returned for input " + std::to_string(i) + ": expected shape " +
                    shape_str(edge.shape) + " (the input's shape), got " + shape_str(g.shape()) +
                    (broadcast ? ". The input was broadcast in the forward: sum the gradient over the broadcast "
                                 "dims (sum_to(grad, input shape)) before returning it"
                               : ". A backward returns one gradient per input, with that input's shape");
      return;
    }
    running = nullptr;
  }
  void detach() {
    if (attached) remove_observer(this);
    attached = false;
    running = nullptr;
    node.clear();
    shape_error.clear();
    hooked.clear();
  }
};

thread_local BackwardWatch t_watch;

// The case's feedback for an exception: prefixed with the student's backward it came from.
std::string in_backward_prefix() {
  if (!t_watch.running) return "";
  return "in your backward of " + t_watch.node + ": ";
}

}  // namespace

const Tensor& watch_backward(const Tensor& out, const std::string& prefix) {
  if (!out.defined() || !out.grad_fn()) return out;
  std::vector<std::shared_ptr<Node>> todo{out.grad_fn()};
  while (!todo.empty()) {
    Node* n = todo.back().get();
    if (!t_watch.hooked.insert(std::move(todo.back())).second) {  // seen (or hooked earlier in this case)
      todo.pop_back();
      continue;
    }
    todo.pop_back();
    for (const Edge& e : n->next_edges)
      if (e.fn) todo.push_back(e.fn);
    if (std::string_view(n->name()).rfind(prefix, 0) != 0) continue;
    n->pre_hooks.push_back([n](const Tensor&) {
      if (!t_watch.attached) {
        add_observer(&t_watch, ObserverScope::ThisThread);
        t_watch.attached = true;
      }
      t_watch.running = n;
      t_watch.node = n->name();
      t_watch.shape_error.clear();
      return Tensor();  // the gradient unchanged
    });
  }
  return out;
}

// ---- labs ----------------------------------------------------------------------------
int Lab::max_points() const {
  int p = 0;
  for (const Task& t : tasks) p += t.points;
  return p;
}

const Lab* find_lab(int number) {
  for (const Lab& l : all_labs())
    if (l.number == number) return &l;
  return nullptr;
}

const char* status_name(Status s) {
  switch (s) {
    case Status::Passed: return "passed";
    case Status::Partial: return "partial";
    case Status::Failed: return "failed";
    case Status::NotImplemented: return "not_implemented";
    case Status::Skipped: return "skipped";
  }
  return "?";
}

std::pair<int, int> not_implemented_task(const std::string& message) {
  const char* key = "not implemented: lab ";
  const size_t at = message.find(key);
  if (at == std::string::npos) return {0, 0};
  int lab = 0, task = 0;
  if (std::sscanf(message.c_str() + at + std::strlen(key), "%d task %d", &lab, &task) != 2) return {0, 0};
  return {lab, task};
}

// ---- crash report --------------------------------------------------------------------
// A segfault in student code cannot be recovered from; at least say which task
// was running (async-signal-safe: a preformatted message and write()).
namespace {
char g_crash_message[1024];

extern "C" void on_crash(int sig) {
  ssize_t ignored = ::write(2, g_crash_message, std::strlen(g_crash_message));
  (void)ignored;
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

struct CrashReporter {
  struct sigaction old_segv {
  }, old_bus{}, old_fpe{};
  CrashReporter() {
    struct sigaction sa {};
    sa.sa_handler = on_crash;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
    sigaction(SIGBUS, &sa, &old_bus);
    sigaction(SIGFPE, &sa, &old_fpe);
  }
  ~CrashReporter() {
    sigaction(SIGSEGV, &old_segv, nullptr);
    sigaction(SIGBUS, &old_bus, nullptr);
    sigaction(SIGFPE, &old_fpe, nullptr);
  }
  static void now_running(const Lab& lab, const Task& t, const Case& c) {
    std::snprintf(g_crash_message, sizeof g_crash_message,
                  "\ngrader: the program crashed in Task %d.%d (%s), case '%s'. The usual cause is reading or "
                  "writing outside a tensor's storage: check the offsets and strides your code computes (%s). "
                  "The tasks above were graded; grade the ones after it with --task K.\n",
                  lab.number, t.number, t.title.c_str(), c.name.c_str(), lab.starter.c_str());
  }
};

// Runs one case under try/catch. A starter stub's error is recorded in
// `stub` ({lab, task} and the message) so the task can report it.
struct Stub {
  int lab = 0, task = 0;
  std::string message;
};

CaseResult run_case(const Case& c, Stub& stub) {
  CaseResult r;
  r.name = c.name;
  Check check;
  struct Detach {
    ~Detach() { t_watch.detach(); }
  } detach_watch;
  t_watch.detach();
  auto with_input = [&](std::string m) { return check.input().empty() ? m : m + "\ninput: " + check.input(); };
  // An exception from the student's own backward (watch_backward): say so, with the shapes
  // when the gradient it returned had the wrong one.
  auto raised = [&](const std::string& what, const std::string& message) {
    const std::string where = in_backward_prefix();
    if (!where.empty() && !t_watch.shape_error.empty()) return with_input(where + t_watch.shape_error);
    return with_input(where + what + message);
  };
  try {
    c.run(check);
    r.passed = true;
  } catch (const CaseFailed& f) {
    r.message = f.message;
  } catch (const Skip&) {
    throw;
  } catch (const Error& e) {
    const auto [lab, task] = not_implemented_task(e.what());
    if (lab != 0) {
      if (stub.lab == 0) stub = Stub{lab, task, e.what()};
      r.message = std::string("not implemented yet (") + e.what() + ")";
    } else {
      r.message = raised("raised gs::Error: ", e.what());
    }
  } catch (const std::exception& e) {
    r.message = raised("raised an exception: ", e.what());
  } catch (...) {
    r.message = raised("raised an exception that is not a std::exception", "");
  }
  r.notes = check.notes();
  r.hidden = hidden_inputs();
  if (r.hidden && !r.passed && !show_hidden_values() && r.message.rfind("not implemented yet", 0) != 0) {
    // What failed (the text before the first ':' of the first line: "narrow_view offset"), not the values.
    std::string what = r.message.substr(0, r.message.find('\n'));
    what = what.substr(0, what.find(':'));
    if (what.size() > 100) what = what.substr(0, 100) + "...";
    r.message = what + ": wrong on the instructor's input of this kind (its values are hidden)";
  }
  return r;
}

// Runs every case of a task and turns them into points and one line of feedback.
TaskResult run_task(const Lab& lab, const Task& t) {
  TaskResult r;
  r.lab = lab.number;
  r.number = t.number;
  r.title = t.title;
  r.writes = t.writes;
  r.max_points = t.points;
  const auto t0 = std::chrono::steady_clock::now();
  int total_w = 0, passed_w = 0, failed = 0;
  Stub stub;
  try {
    for (size_t i = 0; i < t.cases.size(); ++i) {
      const Case& c = t.cases[i];
      t_case_key = splitmix64((static_cast<uint64_t>(lab.number) << 40) ^ (static_cast<uint64_t>(t.number) << 20) ^ i);
      CrashReporter::now_running(lab, t, c);
      r.cases.push_back(run_case(c, stub));
      total_w += c.weight;
      if (r.cases.back().passed)
        passed_w += c.weight;
      else
        ++failed;
    }
    if (stub.lab != 0) {  // unfinished: this task's stub, or one of a task it builds on
      r.points = 0;
      r.status = Status::NotImplemented;
      if (stub.lab == lab.number && stub.task == t.number) {
        // A stub that names its own file ("... in tutorials/lab9_cuda/lab9_kernels.cu)") is
        // not in the lab's main starter file: name that one.
        std::string file = lab.starter;
        if (const size_t at = stub.message.find("tutorials/"); at != std::string::npos)
          file = stub.message.substr(at, stub.message.find_first_of(") ,", at) - at);
        r.feedback = "not implemented yet: write " + t.writes + " in " + file + " (TODO(lab " +
                     std::to_string(lab.number) + ", task " + std::to_string(t.number) + "))";
      } else
        r.feedback = "not implemented yet: this task needs Task " + std::to_string(stub.lab) + "." +
                     std::to_string(stub.task) + " first (" + stub.message + ")";
    } else {
      r.points = total_w == 0 ? 0 : t.points * passed_w / total_w;
      r.status = passed_w == total_w ? Status::Passed : passed_w == 0 ? Status::Failed : Status::Partial;
      r.feedback = failed == 0 ? "all " + std::to_string(r.cases.size()) + " checks passed"
                               : std::to_string(failed) + " of " + std::to_string(r.cases.size()) + " checks failed";
    }
  } catch (const Skip& s) {
    // Neither passed nor failed: 0/0, so the lab's total is what this machine could grade.
    r.points = 0;
    r.max_points = 0;
    r.status = Status::Skipped;
    r.feedback = std::string("skipped: ") + s.what();
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}
}  // namespace

LabResult grade(const Lab& lab, int only_task, const std::function<void(const TaskResult&)>& on_task) {
  LabResult r;
  r.number = lab.number;
  r.title = lab.title;
  r.dir = lab.dir;
  const auto t0 = std::chrono::steady_clock::now();
  CrashReporter reporter;
  for (const Task& t : lab.tasks) {
    if (only_task > 0 && t.number != only_task) continue;
    r.tasks.push_back(run_task(lab, t));
    if (on_task) on_task(r.tasks.back());
    r.points += r.tasks.back().points;
    r.max_points += r.tasks.back().max_points;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// ---- reports ------------------------------------------------------------------------
namespace {
// Indents the continuation lines of a multi-line message.
std::string indented(const std::string& s, const std::string& pad) {
  std::string o;
  for (char ch : s) {
    o += ch;
    if (ch == '\n') o += pad;
  }
  return o;
}
}  // namespace

void print_lab_header(std::ostream& os, const Lab& lab) {
  os << "lab " << lab.number << ": " << lab.title << "  (tutorials/" << lab.dir << "/README.md)\n";
}

void print_task(std::ostream& os, const TaskResult& t, bool verbose) {
  std::ostringstream head;
  head << "Task " << t.lab << "." << t.number << "  " << t.title;
  std::string h = head.str();
  if (h.size() < 50) h += std::string(50 - h.size(), ' ');
  os << "  " << h << std::setw(3) << t.points << "/" << std::left << std::setw(3) << t.max_points << std::right << "  "
     << t.feedback << "\n";
  for (const CaseResult& c : t.cases) {
    if (c.passed && !verbose && c.notes.empty()) continue;
    // An unfinished task: its stub's error is already the task's feedback.
    if (!verbose && c.message.rfind("not implemented yet", 0) == 0) continue;
    os << "      " << (c.passed ? "ok   " : "FAIL ") << c.name
       << (c.hidden && !c.passed ? "  (the instructor's input)" : "") << "\n";
    if (!c.passed)
      os << "           " << indented(c.message, "           ") << "\n";
    else
      for (const std::string& n : c.notes) os << "           " << n << "\n";
  }
}

void print_summary(std::ostream& os, const LabResult& r) {
  os << "lab " << r.number << ": " << r.points << "/" << r.max_points << " points\n";
}

void print_report(std::ostream& os, const LabResult& r, bool verbose) {
  os << "lab " << r.number << ": " << r.title << "  (tutorials/" << r.dir << "/README.md)\n";
  for (const TaskResult& t : r.tasks) print_task(os, t, verbose);
  print_summary(os, r);
}

std::string report_json(const LabResult& r) {
  std::ostringstream os;
  os << "{\"lab\":" << r.number << ",\"title\":" << json_str(r.title) << ",\"dir\":" << json_str("tutorials/" + r.dir)
     << ",\"points\":" << r.points << ",\"max_points\":" << r.max_points << ",\"seconds\":" << json_num(r.seconds)
     << ",\"tasks\":[";
  for (size_t i = 0; i < r.tasks.size(); ++i) {
    const TaskResult& t = r.tasks[i];
    os << (i ? "," : "") << "{\"task\":" << json_str(std::to_string(r.number) + "." + std::to_string(t.number))
       << ",\"number\":" << t.number << ",\"title\":" << json_str(t.title) << ",\"writes\":" << json_str(t.writes)
       << ",\"points\":" << t.points << ",\"max_points\":" << t.max_points
       << ",\"status\":" << json_str(status_name(t.status)) << ",\"feedback\":" << json_str(t.feedback)
       << ",\"seconds\":" << json_num(t.seconds) << ",\"cases\":[";
    for (size_t j = 0; j < t.cases.size(); ++j) {
      const CaseResult& c = t.cases[j];
      os << (j ? "," : "") << "{\"name\":" << json_str(c.name) << ",\"passed\":" << json_bool(c.passed)
         << ",\"message\":" << json_str(c.message) << ",\"notes\":[";
      for (size_t k = 0; k < c.notes.size(); ++k) os << (k ? "," : "") << json_str(c.notes[k]);
      os << "]}";
    }
    os << "]}";
  }
  os << "]}";
  return os.str();
}

std::string gradescope_json(const LabResult& r, double execution_seconds) {
  // https://gradescope-autograders.readthedocs.io/en/latest/specs/ (results.json): "score",
  // "execution_time", "output", "tests" [{"score","max_score","status","name","number","output",
  // "visibility"}]. A test's visibility: "visible" for the public inputs; "after_due_date" for the
  // instructor's, so a student cannot probe the hidden inputs by resubmitting.
  const char* visibility = hidden_inputs() ? "after_due_date" : "visible";
  std::ostringstream os;
  os << "{\"score\":" << r.points << ",\"execution_time\":" << static_cast<long>(std::ceil(execution_seconds))
     << ",\"output\":"
     << json_str("lab " + std::to_string(r.number) + ": " + r.title + ": " + std::to_string(r.points) + "/" +
                 std::to_string(r.max_points) + " points" +
                 (hidden_inputs() ? " (graded on the instructor's inputs)" : ""))
     << ",\"visibility\":\"visible\",\"stdout_visibility\":\"hidden\",\"tests\":[";
  for (size_t i = 0; i < r.tasks.size(); ++i) {
    const TaskResult& t = r.tasks[i];
    std::ostringstream out;
    print_task(out, t);
    os << (i ? "," : "")
       << "{\"name\":" << json_str("Task " + std::to_string(r.number) + "." + std::to_string(t.number) + ": " + t.title)
       << ",\"number\":" << json_str(std::to_string(r.number) + "." + std::to_string(t.number))
       << ",\"score\":" << t.points << ",\"max_score\":" << t.max_points
       << ",\"status\":" << json_str(t.points == t.max_points ? "passed" : "failed")
       << ",\"output\":" << json_str(out.str()) << ",\"visibility\":" << json_str(visibility) << "}";
  }
  os << "]}";
  return os.str();
}

void print_list(std::ostream& os) {
  for (const Lab& l : all_labs()) {
    os << "lab " << l.number << ": " << l.title << "  (tutorials/" << l.dir << ", " << l.max_points()
       << " points; you edit " << l.starter << ")\n";
    for (const Task& t : l.tasks) {
      std::ostringstream head;
      head << "Task " << l.number << "." << t.number << "  " << t.title;
      std::string h = head.str();
      if (h.size() < 50) h += std::string(50 - h.size(), ' ');
      os << "  " << h << std::setw(3) << t.points << " points  " << t.writes << "\n";
    }
  }
}

std::string list_json() {
  std::ostringstream os;
  os << "{\"labs\":[";
  const auto& labs = all_labs();
  for (size_t i = 0; i < labs.size(); ++i) {
    const Lab& l = labs[i];
    os << (i ? "," : "") << "{\"lab\":" << l.number << ",\"title\":" << json_str(l.title)
       << ",\"dir\":" << json_str("tutorials/" + l.dir) << ",\"starter\":" << json_str(l.starter)
       << ",\"max_points\":" << l.max_points() << ",\"tasks\":[";
    for (size_t j = 0; j < l.tasks.size(); ++j) {
      const Task& t = l.tasks[j];
      os << (j ? "," : "") << "{\"task\":" << json_str(std::to_string(l.number) + "." + std::to_string(t.number))
         << ",\"number\":" << t.number << ",\"title\":" << json_str(t.title) << ",\"writes\":" << json_str(t.writes)
         << ",\"points\":" << t.points << ",\"cases\":" << t.cases.size() << "}";
    }
    os << "]}";
  }
  os << "]}";
  return os.str();
}

void set_grading_threads() {
#ifdef _OPENMP
  if (!std::getenv("OMP_NUM_THREADS")) omp_set_num_threads(1);
#endif
}

}  // namespace gradsleuth::labs
