// Every op in the registry against central differences: each differentiable op
// passes gradcheck on all of its samples, each op flagged double_backward passes
// gradgradcheck (one CHECK per op; the failure names the op and the sample).
#include <doctest/doctest.h>

#include "core/generator.h"
#include "core/op_registry.h"
#include "debug/checks/model/gradcheck.h"

using namespace gs::debug;

TEST_CASE("every differentiable op passes gradcheck on all its samples") {
  int checked = 0;
  for (const gs::OpInfo& op : gs::op_registry()) {
    if (!op.differentiable) continue;
    const auto rows = gradcheck_all_ops({}, op.name);
    bool ok = !rows.empty();
    std::string failures;
    for (const auto& r : rows)
      if (!r.passed) {
        ok = false;
        failures += "[" + r.sample + "] " + r.message + "\n";
      }
    INFO("op: ", op.name, " (", op.category, ")\n", failures);
    CHECK(ok);
    ++checked;
  }
  CHECK(checked > 0);
}

TEST_CASE("every op flagged double_backward passes gradgradcheck") {
  for (const gs::OpInfo& op : gs::op_registry()) {
    if (!op.differentiable || !op.double_backward) continue;
    gs::Generator gen(0);
    bool ok = true;
    std::string failures;
    for (const gs::OpSample& s : op.samples(gen, gs::kFloat64)) {
      try {
        GradcheckResult r = gradgradcheck(op.fn, s.inputs);
        if (!r.passed) failures += "[" + s.label + "] " + r.message + "\n";
        ok = ok && r.passed;
      } catch (const std::exception& e) {
        ok = false;
        failures += "[" + s.label + "] threw: " + e.what() + "\n";
      }
    }
    INFO("op: ", op.name, " (", op.category, ")\n", failures);
    CHECK(ok);
  }
}

TEST_CASE("non-differentiable ops are reported as skipped, not as passed checks") {
  for (const auto& row : gradcheck_all_ops())
    if (const gs::OpInfo* op = gs::find_op(row.name); op && !op->differentiable) {
      INFO("op: ", row.name);
      CHECK(row.skipped);
    }
}
