// Errors that teach: every failure names the op, the shapes/dtypes involved and a likely fix.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace gradsleuth {

// The one exception type gradsleuth throws for bad input. `op` is the failing op's
// name ("matmul", "Tensor::view", "backward"...); what() is "op: message".
class Error : public std::runtime_error {
 public:
  Error(std::string op, const std::string& message) : std::runtime_error(op + ": " + message), op_(std::move(op)) {}
  const std::string& op() const { return op_; }

 private:
  std::string op_;
};

namespace detail {
template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace gradsleuth

// GS_CHECK(cond, "op", "message parts", ...): throws gradsleuth::Error when cond is false.
#define GS_CHECK(cond, op, ...)                                                    \
  do {                                                                             \
    if (!(cond)) [[unlikely]]                                                      \
      throw ::gradsleuth::Error((op), ::gradsleuth::detail::str_cat(__VA_ARGS__)); \
  } while (0)

#define GS_FAIL(op, ...) throw ::gradsleuth::Error((op), ::gradsleuth::detail::str_cat(__VA_ARGS__))
