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

#include "core/generator.h"
#include "core/observer.h"
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
    CHECK_MESSAGE(
        (registered.count(as) == 1 || kNotOps.count(n) == 1), "core/ops.h declares `Tensor ", n,
        "(` but op_registry() (core/op_registry.cpp) has no entry '", n,
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

namespace {
// The names of the ops a call runs (each op reports its registry name to observers).
struct OpNames : gradsleuth::OpObserver {
  std::set<std::string> seen;
  void on_op(const gradsleuth::OpEvent& e) override { seen.insert(e.op); }
};

// Runs each of `rows` on all its samples (forward, and backward when differentiable) and
// returns the op names seen.
std::set<std::string> run_rows(const std::vector<std::string>& rows) {
  using namespace gradsleuth;
  OpNames names;
  for (const std::string& name : rows) {
    CAPTURE(name);
    const OpInfo* op = find_op(name);
    REQUIRE_MESSAGE(op != nullptr, "no registry row '", name, "'");
    Generator g(3);
    const std::vector<OpSample> samples = op->samples(g, kFloat64);
    CHECK(!samples.empty());
    for (const OpSample& s : samples) {
      CAPTURE(s.label);
      tensor_list in;
      for (const Tensor& t : s.inputs)
        in.push_back(t.is_floating_point() ? t.detach().requires_grad_(op->differentiable) : t);
      ObserverGuard on(&names);
      Tensor out = op->fn(in);
      CHECK(out.defined());
      if (op->differentiable) CHECK(out.requires_grad());
    }
  }
  return names.seen;
}
}  // namespace

TEST_CASE("every kernel op code has its registry row, and the row runs that kernel op") {
  using namespace gradsleuth;
  // Unary and binary rows are generated from the X-macro lists: the row carries the op's name,
  // calls the public function of that name, and so reports the op to observers.
  for (int i = 0; i < static_cast<int>(UnaryOp::kCount); ++i) {
    const auto op = static_cast<UnaryOp>(i);
    const std::string name = unary_op_name(op);
    CAPTURE(name);
    REQUIRE(registry_rows_of(op) == std::vector<std::string>{name});
    CHECK(run_rows(registry_rows_of(op)).count(name) == 1);
  }
  for (int i = 0; i < static_cast<int>(BinaryOp::kCount); ++i) {
    const auto op = static_cast<BinaryOp>(i);
    const std::string name = binary_op_name(op);
    CAPTURE(name);
    REQUIRE(registry_rows_of(op) == std::vector<std::string>{name});
    CHECK(run_rows(registry_rows_of(op)).count(name) == 1);
    // The comparisons and logical ops give bool and are not differentiable; the others are.
    CHECK(find_op(name)->differentiable == !is_comparison(op));
  }
  // Reductions name the rows that reach their kernel (their functions take dims/keepdim).
  for (int i = 0; i < static_cast<int>(ReduceOp::kCount); ++i) {
    const auto op = static_cast<ReduceOp>(i);
    CAPTURE(reduce_op_name(op));
    const std::vector<std::string> rows = registry_rows_of(op);
    CHECK(!rows.empty());
    run_rows(rows);  // each exists, and runs forward on its samples
  }
  // A generated row is the row of its name: no explicit row duplicates it.
  std::map<std::string, int> count;
  for (const OpInfo& o : op_registry()) ++count[o.name];
  for (const auto& [name, n] : count) {
    CAPTURE(name);
    CHECK(n == 1);
  }
}
