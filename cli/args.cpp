// The command-line argument parser of the gradsleuth tool (declared in cli/cli.h).
#include <iostream>
#include <stdexcept>

#include "cli/cli.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <type_traits>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/error.h"
#if defined(GS_WITH_CUDA_BACKEND)
#include "cuda/cuda.h"
#endif

namespace gradsleuth::cli {

int set_thread_count(int threads) {
#ifdef _OPENMP
  if (threads > 0)
    omp_set_num_threads(threads);
  else if (!std::getenv("OMP_NUM_THREADS"))
    omp_set_num_threads(1);
  return omp_get_max_threads();
#else
  (void)threads;
  return 1;
#endif
}

Device device_option(const Args& a, const std::string& command, std::string* note) {
  const std::string name = a.get("device");
  GS_CHECK(name == "cpu" || name == "cuda", command, "unknown --device '", name, "': use cpu or cuda");
  if (note) note->clear();
  if (name == "cpu") return kCPU;
#if defined(GS_WITH_CUDA_BACKEND)
  GS_CHECK(gradsleuth::cuda::init(), command, "--device cuda: the CUDA backend is not available (",
           gradsleuth::cuda::unavailable_reason(), "); use --device cpu");
  if (note && gradsleuth::cuda::is_emulated()) *note = " (CPU emulator of CUDA)";
  return kCUDA;
#else
  GS_CHECK(cuda_left_out().empty(), command, "--device cuda: ", cuda_left_out());
  GS_FAIL(command,
          "--device cuda: this gradsleuth was built without the CUDA backend (neither nvcc nor the "
          "CPU emulator's Boost.Context was found at configure time); use --device cpu, or rebuild with one");
#endif
}

std::string cuda_left_out() {
#if defined(GS_CLI_EMU_LEFT_OUT)
  return "this gradsleuth was built without its CUDA emulator (./run.sh leaves it out of a first build "
         "whose command does not use CUDA); build it with `./run.sh COMMAND --device cuda` (./run.sh builds it "
         "when the command names cuda) or `scripts/build.sh --target gradsleuth_cli -- -DGRADSLEUTH_CLI_CUDA_EMU=ON`";
#else
  return "";
#endif
}

int terminal_width() {
  int w = 0;
  if (const char* c = std::getenv("COLUMNS")) w = std::atoi(c);
  if (w <= 0) {
    struct winsize ws {};
    if (::isatty(STDOUT_FILENO) && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0) w = ws.ws_col;
  }
  if (w <= 0) w = 100;
  return std::max(w, 40);
}

std::string wrap_last_column(const std::string& prefix, const std::string& last, int width) {
  // Too narrow for the last column beside the others: it goes on the lines below, indented.
  if (width - static_cast<int>(prefix.size()) < 24 && !prefix.empty() && !last.empty()) {
    const size_t end = prefix.find_last_not_of(' ');
    return prefix.substr(0, end == std::string::npos ? 0 : end + 1) + "\n" +
           wrap_last_column(std::string(6, ' '), last, width);
  }
  const size_t indent = prefix.size();
  const size_t room = static_cast<size_t>(std::max<int>(20, width - static_cast<int>(indent)));
  std::string out = prefix, line;
  std::istringstream words(last);
  bool first_line = true;
  for (std::string w; words >> w;) {
    if (!line.empty() && line.size() + 1 + w.size() > room) {
      out += (first_line ? "" : "\n" + std::string(indent, ' ')) + line;
      first_line = false;
      line.clear();
    }
    line += (line.empty() ? "" : " ") + w;
  }
  if (!line.empty() || first_line) out += (first_line ? "" : "\n" + std::string(indent, ' ')) + line;
  return out + "\n";
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
      if (!allow_positional_)
        throw usage_error(command_, "unexpected argument '" + a + "'; this command takes only options");
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
      throw usage_error(command_,
                        "unknown option '--" + name + "'; valid options: " + (valid.empty() ? "none" : valid));
    }
    if (o->is_flag) {
      if (inline_value) throw usage_error(command_, "--" + name + " is a flag and takes no value");
      // As with options: a repeat is refused (it is a typo or a script that lost track).
      if (o->seen) throw usage_error(command_, "--" + name + " was given twice");
      o->seen = true;
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= raw_.size())
        throw usage_error(command_, "--" + name + " needs a value: --" + name + " " + o->metavar);
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

namespace {
// Decimal numbers only, as a person types them: an optional sign, digits with at most one
// point, an optional exponent ("3", "-2", "0.5", ".5", "1e-3", "2.5E+2"). No hex ("0x10", which
// std::stod reads as 16), no "inf"/"nan", no spaces, no trailing junk.
bool is_decimal(const std::string& v, bool integer) {
  size_t i = 0;
  if (i < v.size() && (v[i] == '+' || v[i] == '-')) ++i;
  size_t digits = 0;
  while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i]))) ++i, ++digits;
  if (integer) return digits > 0 && i == v.size();
  if (i < v.size() && v[i] == '.') {
    ++i;
    while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i]))) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < v.size() && (v[i] == 'e' || v[i] == 'E')) {
    ++i;
    if (i < v.size() && (v[i] == '+' || v[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i]))) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == v.size();
}

// What to add to an error about `v` when it is not even a decimal number.
std::string decimal_hint(const std::string& v, bool integer) {
  if (is_decimal(v, integer)) return "";
  return integer ? " (decimal digits only, e.g. 42)" : " (a decimal number such as 0.01 or 1e-3: no hex, inf or nan)";
}

// Parses all of `v` with conv (std::stoi, std::stoll, std::stod...): false when v is
// not a decimal number (is_decimal), does not parse or has characters left over.
template <class T, class Conv>
bool parse_whole(const std::string& v, Conv conv, T& out) {
  if (!is_decimal(v, std::is_integral_v<T>)) return false;
  size_t used = 0;
  try {
    out = conv(v, &used);
  } catch (const std::exception&) {
    return false;
  }
  return !v.empty() && used == v.size();
}
}  // namespace

int Args::get_int(const std::string& name) const {
  const std::string v = get(name);
  int r = 0;
  if (!parse_whole(
          v, [](const std::string& t, size_t* u) { return std::stoi(t, u); }, r)) {
    if (is_decimal(v, true))  // digits that do not fit
      throw usage_error(command_, "--" + name + " is too large: '" + v + "' (the limit is " +
                                      std::to_string(v[0] == '-' ? INT_MIN : INT_MAX) + ")");
    throw usage_error(command_, "--" + name + " needs an integer, got '" + v + "'" + decimal_hint(v, true));
  }
  return r;
}

double Args::get_double(const std::string& name) const {
  const std::string v = get(name);
  double r = 0;
  if (!parse_whole(
          v, [](const std::string& t, size_t* u) { return std::stod(t, u); }, r))
    throw usage_error(command_, "--" + name + " needs a number, got '" + v + "'" + decimal_hint(v, false));
  return r;
}

namespace {
std::string num_str(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::ostringstream os;
  os << v;
  return os.str();
}

// Creates and removes a probe file in `dir`; "" when that works, else the reason.
std::string probe_dir(const std::string& dir) {
  const std::string probe =
      (dir.empty() ? std::string(".") : dir) + "/.gradsleuth-write-test." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return std::strerror(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}
}  // namespace

int64_t Args::get_int_in(const std::string& name, int64_t lo, int64_t hi) const {
  const std::string v = get(name);
  long long r = 0;
  const bool parsed = parse_whole(
      v, [](const std::string& t, size_t* u) { return std::stoll(t, u); }, r);
  const std::string range =
      hi == INT64_MAX ? ">= " + std::to_string(lo) : "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (!parsed && is_decimal(v, true))  // digits that do not fit in 64 bits
    throw usage_error(command_, "--" + name + " is too large: '" + v + "' (it must be an integer " + range + ")");
  if (!parsed || r < lo || r > hi)
    throw usage_error(command_, "--" + name + " must be an integer " + range + ", got '" + v + "'" +
                                    decimal_hint(v, true) +
                                    (parsed && r > hi   ? " (too large)"
                                     : parsed && r < lo ? " (too small)"
                                                        : ""));
  return r;
}

double Args::get_double_in(const std::string& name, double lo, bool lo_open, double hi, bool hi_open) const {
  const std::string v = get(name);
  double r = 0;
  const bool ok = parse_whole(
                      v, [](const std::string& t, size_t* u) { return std::stod(t, u); }, r) &&
                  std::isfinite(r) && (lo_open ? r > lo : r >= lo) && (hi_open ? r < hi : r <= hi);
  if (!ok && is_decimal(v, false)) {
    // A number the double type cannot hold as a normal value: say so rather than quote the range.
    const double d = std::strtod(v.c_str(), nullptr);
    if (std::isinf(d) || std::fabs(d) > 1.7976931348623157e308)
      throw usage_error(command_, "--" + name + " is too large: '" + v + "' overflows a double (largest 1.8e308)");
    if (d == 0.0 ? v.find_first_of("123456789") < v.find_first_of("eE") : !std::isnormal(d))
      throw usage_error(command_, "--" + name + " is too small: '" + v +
                                      "' is below the smallest normal double (2.2e-308): it would be a subnormal or 0, "
                                      "which no computation can use");
  }
  if (!ok) {
    std::string range;
    if (std::isinf(hi))
      range = std::string(lo_open ? "> " : ">= ") + num_str(lo);
    else
      range = std::string("in ") + (lo_open ? "(" : "[") + num_str(lo) + ", " + num_str(hi) + (hi_open ? ")" : "]");
    throw usage_error(command_,
                      "--" + name + " must be a finite number " + range + ", got '" + v + "'" + decimal_hint(v, false));
  }
  return r;
}

uint64_t Args::get_seed(const std::string& name) const { return static_cast<uint64_t>(get_int_in(name, 0, INT64_MAX)); }

std::string Args::get_nonempty(const std::string& name) const {
  const std::string v = get(name);
  if (v.empty()) throw usage_error(command_, "--" + name + " must not be empty");
  return v;
}

void Args::check_writable_file(const std::string& name) const {
  const std::string path = get_nonempty(name);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw usage_error(command_, "--" + name + " '" + path + "' is a directory; give a file name inside it");
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  if (!std::filesystem::is_directory(dir, ec))
    throw usage_error(command_, "--" + name + " '" + path + "': the directory '" + dir +
                                    "' does not exist; create it first (checked before the run starts)");
  const std::string why = probe_dir(dir);
  if (!why.empty())
    throw usage_error(command_, "--" + name + " '" + path + "': cannot create files in '" + dir + "': " + why +
                                    " (checked before the run starts)");
}

void Args::check_writable_dir(const std::string& name) const {
  const std::string dir = get_nonempty(name);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw usage_error(command_, "--" + name + " '" + dir + "' is not a directory and cannot be created" +
                                    (ec ? ": " + ec.message() : std::string()) + " (checked before the run starts)");
  const std::string why = probe_dir(dir);
  if (!why.empty())
    throw usage_error(command_, "--" + name + " '" + dir + "': cannot create files there: " + why +
                                    " (checked before the run starts)");
}

void Args::refuse_together(const std::string& a, const std::string& b, const std::string& why) const {
  if (has(a) && has(b))
    throw usage_error(command_,
                      "--" + a + " and --" + b + " cannot be used together" + (why.empty() ? "" : ": " + why));
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
