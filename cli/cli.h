// The command table of the gradsleuth tool and a small argument parser.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace gradsleuth::cli {

struct Command {
  std::string name;
  std::string summary;
  std::function<int(const std::vector<std::string>&)> run;  // returns the exit status
};

// Every command, in the order `gradsleuth --help` lists them (cli/commands.cpp).
std::vector<Command> all_commands();

// Parses "--flag", "--key value" and "--key=value". Unknown options are an
// error naming the option and the command's valid ones.
class Args {
 public:
  Args(std::string command, std::vector<std::string> args);
  // Declare options first (for --help and validation), then call parse().
  Args& flag(const std::string& name, const std::string& help);
  Args& option(const std::string& name, const std::string& metavar, const std::string& help,
               const std::string& default_value = "", bool repeatable = false);
  // Returns false when --help was given (help already printed): exit 0.
  bool parse();
  bool has(const std::string& name) const;
  std::string get(const std::string& name) const;
  std::vector<std::string> get_all(const std::string& name) const;
  int get_int(const std::string& name) const;
  double get_double(const std::string& name) const;
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
  std::string command_;
  std::vector<std::string> raw_, positional_;
  std::vector<Opt> opts_;
};

}  // namespace gradsleuth::cli
