// Every op in core/ops.h is registered: the test reads the header (GS_SOURCE_DIR) at run time,
// takes each free function declared as `Tensor name(`, and looks the name up in op_registry();
// helpers that are not ops (factories, shape helpers) are listed below with the reason.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "core/op_kinds.h"
#include "core/op_registry.h"

namespace {

// Functions of core/ops.h that are deliberately not registry entries, and why.
const std::set<std::string> kNotOps = {
    "sum_to",  // the reverse of broadcasting, a helper of the backward formulas (a sum over dims)
};

// Functions registered under another name (the registry names the variant it samples).
const std::map<std::string, std::string> kRegisteredAs = {
    {"max", "max_dim"},  // max(x, dim): values along a dim
    {"min", "min_dim"},
};

std::set<std::string> declared_in_ops_h() {
  std::ifstream f(std::string(GS_SOURCE_DIR) + "/core/ops.h");
  REQUIRE_MESSAGE(f.good(), "cannot read ", GS_SOURCE_DIR, "/core/ops.h");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  std::set<std::string> names;
  const std::regex decl(R"((^|\n)\s*(inline\s+)?Tensor\s+([a-z_0-9]+)\()");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), decl); it != std::sregex_iterator(); ++it)
    names.insert((*it)[3].str());
  return names;
}

}  // namespace

TEST_CASE("every Tensor function of core/ops.h is in op_registry() or a documented non-op") {
  const std::set<std::string> declared = declared_in_ops_h();
  REQUIRE(declared.size() > 40);  // the parse found the declarations
  std::set<std::string> registered;
  for (const auto& op : gradsleuth::op_registry()) registered.insert(op.name);
  for (const std::string& n : declared) {
    CAPTURE(n);
    const auto alias = kRegisteredAs.find(n);
    const std::string as = alias == kRegisteredAs.end() ? n : alias->second;
    CHECK_MESSAGE((registered.count(as) == 1 || kNotOps.count(n) == 1),
                  "core/ops.h declares `Tensor ", n, "(` but op_registry() (core/op_registry.cpp) has no entry '", n,
                  "': register it (forward, backward, samples) or, if it is not an op, add it to kNotOps here with why");
  }
  for (const std::string& n : kNotOps) {
    CAPTURE(n);
    CHECK_MESSAGE(declared.count(n) == 1, "kNotOps lists '", n, "', which core/ops.h no longer declares: remove it");
  }
}

TEST_CASE("the op-kind name tables follow their enums (one X-macro list each)") {
  using namespace gradsleuth;
  CHECK(std::string(unary_op_name(UnaryOp::Neg)) == "neg");
  CHECK(std::string(unary_op_name(UnaryOp::IsFinite)) == "isfinite");
  CHECK(std::string(binary_op_name(BinaryOp::Add)) == "add");
  CHECK(std::string(binary_op_name(BinaryOp::LogicalOr)) == "logical_or");
  CHECK(std::string(reduce_op_name(ReduceOp::Min)) == "min");
  CHECK(is_comparison(BinaryOp::Eq));
  CHECK_FALSE(is_comparison(BinaryOp::Minimum));
}
