// The command table of the gradsleuth tool and a small argument parser.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/dtype.h"  // Device

namespace gradsleuth::cli {

struct Command {
  std::string name;
  std::string summary;
  std::function<int(const std::vector<std::string>&)> run;  // returns the exit status
};

// Every command, in the order `gradsleuth --help` lists them (cli/commands.cpp).
std::vector<Command> all_commands();

// The subcommands, one file each (cli/cmd_<name>.cpp).
int cmd_gradcheck(const std::vector<std::string>& args);
int cmd_ops(const std::vector<std::string>& args);
int cmd_demo(const std::vector<std::string>& args);
int cmd_train(const std::vector<std::string>& args);
int cmd_checks(const std::vector<std::string>& args);
int cmd_zoo(const std::vector<std::string>& args);
int cmd_graph(const std::vector<std::string>& args);
int cmd_explore(const std::vector<std::string>& args);    // cli/cmd_explore.cpp
int cmd_corpus(const std::vector<std::string>& args);     // cli/cmd_corpus.cpp
int cmd_mutate(const std::vector<std::string>& args);     // cli/cmd_mutate.cpp
int cmd_precision(const std::vector<std::string>& args);  // cli/cmd_precision.cpp
int cmd_scorecard(const std::vector<std::string>& args);  // cli/cmd_scorecard.cpp
int cmd_doctor(const std::vector<std::string>& args);
int cmd_lab(const std::vector<std::string>& args);
int cmd_kernels(const std::vector<std::string>& args);  // cli/cmd_kernels.cpp
int cmd_devices(const std::vector<std::string>& args);  // cli/cmd_kernels.cpp
int cmd_version(const std::vector<std::string>& args);  // also `gradsleuth --version`

// Sets the engine's thread count before any tensor op: `threads` when > 0, else
// OMP_NUM_THREADS when set, else one thread. One by default: on 2 cores a second
// OpenMP thread gains ~10% when the other core is free, but a step costs 10x and
// more when another process holds that core (docs/training.md, "Threads"). Returns the count set.
int set_thread_count(int threads = 0);

// The width of the terminal stdout writes to: $COLUMNS when set, else the terminal's (ioctl
// TIOCGWINSZ), else 100 (a pipe or a file); never below 40.
int terminal_width();
// `prefix` (the fixed-width columns of a table row) followed by `last`, the row's last column,
// wrapped at word ends to fit `width`; continuation lines are indented to the last column.
std::string wrap_last_column(const std::string& prefix, const std::string& last, int width);

class Args;
// The device of a command's --device option (cpu|cuda), validated before any work: an unknown
// name, or cuda when the CUDA backend is not available (not built in, or no device), is an error
// naming the command and the fix. For cuda the backend is registered; `note` (when given) gets
// " (CPU emulator of CUDA)" in the emulated build, for a header line.
Device device_option(const Args& a, const std::string& command, std::string* note = nullptr);
// "" when the CLI has its CUDA backend or was built where none can be; otherwise how to build the
// emulator that ./run.sh left out of a first build (GRADSLEUTH_CLI_CUDA_EMU=OFF).
std::string cuda_left_out();

// Parses "--flag", "--key value" and "--key=value". Unknown options are an
// error naming the option and the command's valid ones. Names are given
// without dashes: a.flag("json", "...") declares --json.
//
//   Args a("ops", args);
//   a.about("Lists the op registry.").flag("json", "print one JSON object");
//   if (!a.parse()) return 0;   // --help was printed
//   bool json = a.has("json");
class Args {
 public:
  Args(std::string command, std::vector<std::string> args);
  Args& about(const std::string& text);  // the paragraph --help prints under the usage line
  // Declare options first (for --help and validation), then call parse().
  Args& flag(const std::string& name, const std::string& help);
  Args& option(const std::string& name, const std::string& metavar, const std::string& help,
               const std::string& default_value = "", bool repeatable = false);
  // Accept positional arguments (otherwise any is an error).
  Args& positionals(const std::string& metavar, const std::string& help);
  // Returns false when --help was given (help already printed): exit 0.
  bool parse();
  bool has(const std::string& name) const;
  std::string get(const std::string& name) const;
  std::vector<std::string> get_all(const std::string& name) const;
  int get_int(const std::string& name) const;
  double get_double(const std::string& name) const;
  // Range-checked values, validated before any work: the error names the option,
  // the range and the value ("--lr must be a finite number > 0, got 'inf'").
  int64_t get_int_in(const std::string& name, int64_t lo, int64_t hi) const;  // lo <= v <= hi
  // A finite number in the range: lo/hi are excluded when *_open (e.g. (0, inf), [0, 1)).
  double get_double_in(const std::string& name, double lo, bool lo_open, double hi, bool hi_open) const;
  uint64_t get_seed(const std::string& name) const;         // an integer in [0, 2^63 - 1] (never a wrapped -1)
  std::string get_nonempty(const std::string& name) const;  // a non-empty string (a path, a name)
  // Output paths, checked before the run starts (so a long run never fails at its end):
  // a file path whose directory exists and accepts a new file, or a directory that
  // exists or can be created and accepts a new file. Both probe with a real file.
  void check_writable_file(const std::string& name) const;
  void check_writable_dir(const std::string& name) const;
  // Contradictory options, refused before any work: an error naming both when both were given.
  void refuse_together(const std::string& a, const std::string& b, const std::string& why = "") const;
  void print_help(std::ostream& os) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  struct Opt {
    std::string name, metavar, help, dflt;
    bool is_flag = false, repeatable = false;
    std::vector<std::string> values;
    bool seen = false;
  };
  const Opt* find(const std::string& name) const;
  Opt* find(const std::string& name);
  std::string command_, about_, pos_metavar_, pos_help_;
  bool allow_positional_ = false;
  std::vector<std::string> raw_, positional_;
  std::vector<Opt> opts_;
};

}  // namespace gradsleuth::cli

namespace gs = gradsleuth;  // same alias as core/tensor.h
