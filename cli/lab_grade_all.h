// `gradsleuth lab grade-all` (cli/lab_grade_all.cpp): grades one folder per student.
#pragma once
#include <cstdint>
#include <string>

namespace gradsleuth::cli {

struct GradeAllOptions {
  int lab = 0;
  std::string lab_dir;      // "lab1_tensors"
  std::string submissions;  // one folder per student
  std::string out;          // the CSV gradebook
  std::string feedback;     // one file per student (default: OUT.feedback/)
  std::string work;         // build and run folders (default: OUT.work/)
  int jobs = 1;
  double timeout_s = 60;
  int64_t memory_mb = 2048;
  std::string seed;         // passed to the grader as --seed when set
  bool gradescope = false;  // each grader's results.json also goes to OUT.work/<student>/run/results.json
  // "auto": bubblewrap where it can make its namespaces, else the fallback (Landlock, seccomp and
  // the grader's write guard); "bwrap": bubblewrap or an error; "fallback": never bubblewrap.
  std::string sandbox = "auto";
  bool overwrite = false;  // replace an earlier gradebook and feedback folder (refused without)
};

int lab_grade_all(const GradeAllOptions& o);

}  // namespace gradsleuth::cli
