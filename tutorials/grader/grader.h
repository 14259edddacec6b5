// The lab autograder: a lab is a list of graded tasks ("Task N.k"), a task a
// list of cases, and a case runs the student's code on one input and says what
// is wrong (which input, expected vs got). Graders are written once against a
// lab's header and linked twice: with the starter code (what `gradsleuth lab
// check N` grades) and with the reference solution (which must get full marks).
//
//   Task{1, "contiguous_strides", 10, "contiguous_strides", {
//     {"shape (2, 3, 4)", [](Check& c) {
//        c.input("shape (2, 3, 4)");
//        c.require_dims(lab1::contiguous_strides({2, 3, 4}), {12, 4, 1}, "strides");
//     }},
//   }}
//
// Grading never throws and never stops early: each case runs under try/catch.
// The not-implemented error of a starter stub (gs::Error("lab N", "not
// implemented: lab N task k ...")) gives the task 0 points and "not implemented
// yet"; any other exception fails just that case. A task's points are its
// share of passed cases (by weight), rounded down.
#pragma once
#include <cstdint>
#include <functional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/coords.h"
#include "core/tensor.h"

namespace gradsleuth::labs {

// ---- the inputs a grader draws: public or the instructor's ----------------------
// Every input a grader draws at random (values through input_seed()/randn_seeded(), and in
// lab 1 the sizes through vary()) comes from one number, the input seed. A student's run
// uses the public one (kPublicInputs), so the feedback shows the same inputs on every run; the
// instructor grades with another (`check N --seed S`, or GS_GRADER_SEED), so a submission that
// special-cases the inputs it was shown does not pass. With a secret seed a failed case says
// what kind of input failed and which result was wrong, not the values, unless the
// instructor asks for them (--show-hidden).
constexpr uint64_t kPublicInputs = 0;
// Sets the input seed and whether hidden values may be printed. Call before all_labs().
void set_input_seed(uint64_t seed, bool show_hidden_values = false);
uint64_t input_seed();  // kPublicInputs unless set
bool hidden_inputs();   // input_seed() != kPublicInputs
bool show_hidden_values();
// The generator seed for the grader's stream `stream`: `stream` itself with the public
// inputs (what the graders always used), a mix of it and the secret seed otherwise.
uint64_t input_seed(uint64_t stream);
// A shape of the same kind as `s` for the case now running: the same dims, every size 0 or 1
// kept, every larger size mapped by one increasing map per case (n -> n + k (n - 1), k >= 1
// drawn from the case's seed), so sizes that were equal stay equal and a valid narrow or
// index into `s` stays valid. `s` itself with the public inputs.
Shape vary(const Shape& s);
int64_t vary(int64_t size);

// ---- writing a grader ---------------------------------------------------------

// Thrown by Check::require* to end a case as failed (the grader catches it).
struct CaseFailed {
  std::string message;
};

// Thrown to skip a task that cannot run on this machine (a data set that is not
// installed, no GPU): 0 points, status "skipped", and the reason as feedback.
class Skip : public std::runtime_error {
 public:
  explicit Skip(const std::string& why) : std::runtime_error(why) {}
};

// What a case's check function sees. require* ends the case on failure with a
// message naming the input; nothing reads a tensor's values before its shape
// and its memory bounds are checked, so a wrong answer cannot crash the grader.
class Check {
 public:
  // Describes the input under test; repeated in the feedback of a failure.
  void input(const std::string& description) { input_ = description; }
  const std::string& input() const { return input_; }
  // An extra line shown even when the case passes ("test accuracy 0.81 in 2.1 s").
  void note(const std::string& line) { notes_.push_back(line); }
  const std::vector<std::string>& notes() const { return notes_; }

  [[noreturn]] void fail(const std::string& message) const;
  void require(bool ok, const std::string& message) const {
    if (!ok) fail(message);
  }
  // Shapes, strides or dim lists: "strides: expected [12, 4, 1], got [4, 1]".
  void require_dims(const DimVector& got, const DimVector& want, const std::string& what) const;
  void require_eq(int64_t got, int64_t want, const std::string& what) const;
  void require_near(double got, double want, double tol, const std::string& what) const;
  // `got` is a defined tensor of `want_shape` whose strided elements all lie inside its storage.
  void require_tensor(const Tensor& got, const Shape& want_shape, const std::string& what) const;
  // require_tensor, then every element within atol + rtol * |want|; reports the
  // worst element's coordinates and both values.
  void require_close(const Tensor& got, const Tensor& want, const std::string& what, double rtol = 1e-5,
                     double atol = 1e-6) const;
  // `f` must throw gs::Error (bad input should fail loudly). A not-implemented
  // error is passed on, so an unfinished task still reads "not implemented yet".
  void require_throws(const std::function<void()>& f, const std::string& what) const;

 private:
  std::string input_;
  std::vector<std::string> notes_;
};

struct Case {
  std::string name;  // "shape (2, 3, 4)", "gradcheck, broadcast (3, 1) * (1, 4)"
  std::function<void(Check&)> run;
  int weight = 1;  // its share of the task's points
};

struct Task {
  int number = 0;     // k in "Task N.k"
  std::string title;  // "row-major strides"
  int points = 0;
  std::string writes;  // what the student writes: "contiguous_strides()", "Linear::forward()"
  std::vector<Case> cases;
};

struct Lab {
  int number = 0;
  std::string dir;  // "lab1_tensors", under tutorials/
  std::string title;
  std::string starter;  // the file the student edits: "tutorials/lab1_tensors/lab1.cpp"
  std::vector<Task> tasks;
  int max_points() const;
};

// ---- the student's own backward (lab 2) -------------------------------------------------
// Marks the nodes of `out`'s graph named `prefix`... (record("lab2::mul", out, ..., f)) as
// backwards the student wrote. When one raises, the case's feedback says "in your backward of
// lab2::mul: ..." (not as if the forward had failed); when one returns a gradient whose shape
// is not its input's (a broadcast dim not summed away), the feedback gives the expected and
// the got shapes. Returns `out`. Call it on the outputs of student code that a backward() runs
// through, inside a case.
const Tensor& watch_backward(const Tensor& out, const std::string& prefix);

// ---- helpers for writing feedback -------------------------------------------------------
std::string num(double v);                // 6 significant digits: "0.333333", "inf", "nan"
std::string fixed(double v, int digits);  // fixed-point: fixed(0.8123, 2) = "0.81"
std::string sci(double v);                // 3 significant digits: "3.7e-07", "0.39"
// 9 significant digits, so float values one rounding apart differ: "0.100000001"; "nan" for
// any NaN (not "-nan").
std::string g9(double v);
// N(0, scale^2) values from a generator seeded with input_seed(seed): the same inputs on every
// run and machine for a given input seed.
Tensor randn_seeded(const Shape& s, uint64_t seed, double scale = 1.0, DType dt = kFloat32);
// coords_str ("(1, 2)") and unravel (row-major flat index -> coordinates): core/coords.h.
// True when every element of t (by its shape, strides and offset) lies inside its
// storage; otherwise false, with the reason in *why. Check this before reading a
// tensor the student's code built.
bool within_storage(const Tensor& t, std::string* why = nullptr);
// "[[0, 1, 2], [3, 4, 5]]" (at most `max_elements` values, then "...").
std::string values_str(const Tensor& t, int64_t max_elements = 24);
// "float32[3, 2] strides [1, 3] offset 0", and the values when it has at most 12 elements.
std::string describe(const Tensor& t);

// ---- the labs this executable grades (grader/labs.cpp) -------------------------
// One per grader executable (labN_grader grades lab N only); a test may define its own.
const std::vector<Lab>& all_labs();
const Lab* find_lab(int number);  // nullptr when there is no lab `number`

// ---- grading ---------------------------------------------------------------------
enum class Status { Passed, Partial, Failed, NotImplemented, Skipped };
const char* status_name(Status s);  // "passed", "partial", "failed", "not_implemented", "skipped"

struct CaseResult {
  std::string name;
  bool passed = false;
  bool hidden = false;  // graded on the instructor's inputs (a secret input seed)
  std::string message;  // why it failed (with the input), empty when passed
  std::vector<std::string> notes;
};

struct TaskResult {
  int lab = 0, number = 0;
  std::string title, writes;
  int points = 0, max_points = 0;
  Status status = Status::Failed;
  std::string feedback;  // one line: what to do next
  std::vector<CaseResult> cases;
  double seconds = 0.0;
};

struct LabResult {
  int number = 0;
  std::string title, dir;
  std::vector<TaskResult> tasks;
  int points = 0, max_points = 0;
  double seconds = 0.0;
};

// Grades every task of `lab` (or only task `only_task` when > 0), calling
// `on_task` after each one (to print as it goes). Never throws.
LabResult grade(const Lab& lab, int only_task = 0, const std::function<void(const TaskResult&)>& on_task = nullptr);

// "not implemented: lab 3 task 4 ..." -> {3, 4}; {0, 0} when `message` is not a
// starter stub's error.
std::pair<int, int> not_implemented_task(const std::string& message);

// ---- reports -----------------------------------------------------------------------
// Text: one line per task with its points and feedback, the failed cases below
// it (all cases with verbose), and the summary line "lab N: X/Y points".
void print_report(std::ostream& os, const LabResult& r, bool verbose = false);
// The same report in pieces, for printing while grading runs.
void print_lab_header(std::ostream& os, const Lab& lab);
void print_task(std::ostream& os, const TaskResult& t, bool verbose = false);
void print_summary(std::ostream& os, const LabResult& r);
// One JSON object: {"lab":1,"title":...,"points":X,"max_points":Y,"tasks":[...]}.
std::string report_json(const LabResult& r);
// Gradescope's autograder results (results.json): one test per task, its output the task's
// feedback and failed checks; with a secret input seed the tests are visible after the due
// date only (the student sees them once grades are out).
std::string gradescope_json(const LabResult& r, double execution_seconds);
// The labs and their tasks with points, as a table or as JSON {"labs":[...]}.
void print_list(std::ostream& os);
std::string list_json();

// ---- the command line of a lab's grader (build/tutorials/labN_grader, run by `gradsleuth lab`) ----
struct CommandOptions {
  std::string action;  // "list" or "check"
  std::string lab;     // "1", "2", ... or "all" (check)
  bool json = false;
  int task = 0;          // > 0: grade only this task
  bool verbose = false;  // list every case, passed ones too
  // For tests: "full" exits 1 unless every task got full points (77 when a task
  // was skipped); "consistent" exits 1 unless every not-implemented task got 0
  // points and said so. Empty: exit 0 whenever grading ran.
  std::string expect;
  // The input seed (see set_input_seed): has_seed is false for the public inputs unless
  // GS_GRADER_SEED is set.
  bool has_seed = false;
  uint64_t seed = kPublicInputs;
  bool show_hidden = false;
  // Gradescope: write the autograder's results.json to this path ("-": stdout) instead of the report.
  std::string gradescope;
  // Report each task as it is graded (for `gradsleuth lab grade-all`, which learns from them the
  // points and where a hang or a crash was): "@task N.k" for each task to grade, then
  // "@task-done N.k POINTS MAX STATUS" and "@end POINTS MAX", on the results channel when
  // grade-all opened one (see take_results_channel), else on stderr.
  bool events = false;
};

// ---- the results channel of `lab grade-all` ----------------------------------------------
// grade-all hands the grader an open file and a random token in GS_GRADER_CHANNEL ("FD TOKEN").
// take_results_channel() (run from main.cpp's .preinit_array, before any constructor of the
// student's code) moves the file to a close-on-exec descriptor, wipes the variable from the
// environment and keeps the token; every result line then goes there as "@KIND TOKEN REST".
// What the student's code prints on stdout or stderr is never read as a result.
void take_results_channel(char** envp);
bool has_results_channel();
// Writes "@kind TOKEN rest\n" to the channel (nothing without one).
void write_results_channel(const std::string& kind, const std::string& rest);
// The input seed a command line asks for: --seed S, else GS_GRADER_SEED, else the public one.
// Throws gs::Error naming the value when it is not a decimal integer.
uint64_t parse_input_seed(const std::string& text, const std::string& where);
// Runs the action, printing to `out`; returns the exit status. Throws gs::Error
// for a lab or task that does not exist.
int run_command(const CommandOptions& o, std::ostream& out);

// Before the first tensor op of a grading run: one OpenMP thread unless
// OMP_NUM_THREADS is set (timings stay stable on a shared machine, and results
// do not depend on the thread count).
void set_grading_threads();

}  // namespace gradsleuth::labs
