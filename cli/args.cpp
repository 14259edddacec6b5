// The command-line argument parser of the gradsleuth tool (declared in cli/cli.h).
#include <iostream>
#include <stdexcept>

#include "cli/cli.h"

#include <cstdlib>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace gradsleuth::cli {

void set_thread_count(int threads) {
#ifdef _OPENMP
  if (threads > 0) omp_set_num_threads(threads);
  else if (!std::getenv("OMP_NUM_THREADS")) omp_set_num_threads(1);
#else
  (void)threads;
#endif
}

namespace {
std::invalid_argument usage_error(const std::string& command, const std::string& what) {
  return std::invalid_argument(what + " (see 'gradsleuth " + command + " --help')");
}
}  // namespace

Args::Args(std::string command, std::vector<std::string> args) : command_(std::move(command)), raw_(std::move(args)) {}

Args& Args::about(const std::string& text) {
  about_ = text;
  return *this;
}

Args& Args::flag(const std::string& name, const std::string& help) {
  Opt o;
  o.name = name;
  o.help = help;
  o.is_flag = true;
  opts_.push_back(o);
  return *this;
}

Args& Args::option(const std::string& name, const std::string& metavar, const std::string& help,
                   const std::string& default_value, bool repeatable) {
  Opt o;
  o.name = name;
  o.metavar = metavar;
  o.help = help;
  o.dflt = default_value;
  o.repeatable = repeatable;
  opts_.push_back(o);
  return *this;
}

Args& Args::positionals(const std::string& metavar, const std::string& help) {
  allow_positional_ = true;
  pos_metavar_ = metavar;
  pos_help_ = help;
  return *this;
}

const Args::Opt* Args::find(const std::string& name) const {
  for (const Opt& o : opts_)
    if (o.name == name) return &o;
  return nullptr;
}
Args::Opt* Args::find(const std::string& name) {
  for (Opt& o : opts_)
    if (o.name == name) return &o;
  return nullptr;
}

bool Args::parse() {
  for (size_t i = 0; i < raw_.size(); ++i) {
    const std::string& a = raw_[i];
    if (a == "--help" || a == "-h") {
      print_help(std::cout);
      return false;
    }
    if (a.rfind("--", 0) != 0 || a == "--") {
      if (!allow_positional_) throw usage_error(command_, "unexpected argument '" + a + "'; this command takes only options");
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    Opt* o = find(name);
    if (!o) {
      std::string valid;
      for (const Opt& x : opts_) valid += (valid.empty() ? "--" : ", --") + x.name;
      throw usage_error(command_, "unknown option '--" + name + "'; valid options: " + (valid.empty() ? "none" : valid));
    }
    if (o->is_flag) {
      if (inline_value) throw usage_error(command_, "--" + name + " is a flag and takes no value");
      o->seen = true;
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= raw_.size()) throw usage_error(command_, "--" + name + " needs a value: --" + name + " " + o->metavar);
      value = raw_[++i];
    }
    if (o->seen && !o->repeatable) throw usage_error(command_, "--" + name + " was given twice");
    o->seen = true;
    o->values.push_back(value);
  }
  return true;
}

bool Args::has(const std::string& name) const {
  const Opt* o = find(name);
  if (!o) throw std::logic_error("Args::has: option '--" + name + "' was not declared");
  return o->seen;
}

std::string Args::get(const std::string& name) const {
  const Opt* o = find(name);
  if (!o) throw std::logic_error("Args::get: option '--" + name + "' was not declared");
  return o->values.empty() ? o->dflt : o->values.back();
}

std::vector<std::string> Args::get_all(const std::string& name) const {
  const Opt* o = find(name);
  if (!o) throw std::logic_error("Args::get_all: option '--" + name + "' was not declared");
  return o->values;
}

int Args::get_int(const std::string& name) const {
  const std::string v = get(name);
  size_t used = 0;
  int r = 0;
  try {
    r = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (v.empty() || used != v.size()) throw usage_error(command_, "--" + name + " needs an integer, got '" + v + "'");
  return r;
}

double Args::get_double(const std::string& name) const {
  const std::string v = get(name);
  size_t used = 0;
  double r = 0;
  try {
    r = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (v.empty() || used != v.size()) throw usage_error(command_, "--" + name + " needs a number, got '" + v + "'");
  return r;
}

void Args::print_help(std::ostream& os) const {
  os << "usage: gradsleuth " << command_ << (opts_.empty() ? "" : " [options]")
     << (allow_positional_ ? " " + pos_metavar_ + "..." : "") << "\n";
  if (!about_.empty()) os << "\n" << about_ << "\n";
  os << "\noptions:\n";
  std::vector<std::pair<std::string, std::string>> lines;
  if (allow_positional_) lines.push_back({pos_metavar_, pos_help_});
  for (const Opt& o : opts_) {
    std::string help = o.help;
    if (!o.dflt.empty()) help += " (default: " + o.dflt + ")";
    lines.push_back({"--" + o.name + (o.is_flag ? "" : " " + o.metavar), help});
  }
  lines.push_back({"--help", "show this help and exit"});
  size_t w = 0;
  for (const auto& l : lines) w = std::max(w, l.first.size());
  for (const auto& l : lines) os << "  " << l.first << std::string(w + 2 - l.first.size(), ' ') << l.second << "\n";
}

}  // namespace gradsleuth::cli
