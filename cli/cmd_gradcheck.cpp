// gradsleuth gradcheck: every registered op's backward against central
// differences in float64 (check M13, numeric gradient check), as a table or one JSON object.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <stdexcept>

#include "cli/cli.h"
#include "core/json.h"
#include "debug/checks/model/gradcheck.h"

namespace gradsleuth::cli {

namespace {

// One op's samples, aggregated: passed when every sample passed, errors the max.
struct OpSummary {
  std::string name, category;
  bool passed = true, skipped = false, dbl_checked = false, dbl_passed = true, dbl_refused = false;
  double max_abs = 0.0, max_rel = 0.0;
  std::vector<const debug::OpCheckRow*> rows;
};

std::vector<OpSummary> summarise(const std::vector<debug::OpCheckRow>& rows) {
  std::vector<OpSummary> ops;
  for (const auto& r : rows) {
    if (ops.empty() || ops.back().name != r.name) {
      ops.push_back({});
      ops.back().name = r.name;
      ops.back().category = r.category;
      ops.back().skipped = true;
    }
    OpSummary& s = ops.back();
    s.passed = s.passed && r.passed;
    s.skipped = s.skipped && r.skipped;
    s.dbl_checked = s.dbl_checked || r.double_backward_checked;
    s.dbl_passed = s.dbl_passed && (!r.double_backward_checked || r.double_backward_passed);
    s.dbl_refused = s.dbl_refused || r.double_backward_refused;
    s.max_abs = std::max(s.max_abs, r.max_abs_error);
    s.max_rel = std::max(s.max_rel, r.max_rel_error);
    s.rows.push_back(&r);
  }
  return ops;
}

void print_json(const std::vector<OpSummary>& ops, int passed, int failed, int skipped) {
  std::cout << "{\"ops\":[";
  for (size_t i = 0; i < ops.size(); ++i) {
    const OpSummary& s = ops[i];
    std::cout << (i ? "," : "") << "{\"name\":" << json_str(s.name) << ",\"category\":" << json_str(s.category)
              << ",\"passed\":" << json_bool(s.passed) << ",\"skipped\":" << json_bool(s.skipped)
              << ",\"max_abs_error\":" << json_num(s.max_abs) << ",\"max_rel_error\":" << json_num(s.max_rel)
              << ",\"double_backward_checked\":" << json_bool(s.dbl_checked)
              << ",\"double_backward_passed\":" << json_bool(s.dbl_passed)
              << ",\"double_backward_refused\":" << json_bool(s.dbl_refused) << ",\"samples\":[";
    for (size_t j = 0; j < s.rows.size(); ++j) {
      const debug::OpCheckRow& r = *s.rows[j];
      std::cout << (j ? "," : "") << "{\"sample\":" << json_str(r.sample) << ",\"passed\":" << json_bool(r.passed)
                << ",\"skipped\":" << json_bool(r.skipped) << ",\"max_abs_error\":" << json_num(r.max_abs_error)
                << ",\"max_rel_error\":" << json_num(r.max_rel_error)
                << ",\"double_backward_checked\":" << json_bool(r.double_backward_checked)
                << ",\"double_backward_passed\":" << json_bool(r.double_backward_passed)
                << ",\"double_backward_refused\":" << json_bool(r.double_backward_refused)
                << ",\"message\":" << json_str(r.message) << "}";
    }
    std::cout << "]}";
  }
  std::cout << "],\"passed\":" << passed << ",\"failed\":" << failed << ",\"skipped\":" << skipped << "}\n";
}

void print_table(const std::vector<debug::OpCheckRow>& rows) {
  std::printf("%-24s %-12s %-36s %-6s %-13s %-13s %s\n", "op", "category", "sample", "passed", "max_abs_error",
              "max_rel_error", "2nd-order");
  for (const auto& r : rows) {
    const char* ok = r.skipped ? "skip" : (r.passed ? "ok" : "FAIL");
    const char* second = !r.double_backward_checked  ? "-"
                         : r.double_backward_refused ? "refused"
                                                     : (r.double_backward_passed ? "ok" : "FAIL");
    std::string sample = r.skipped ? "(not differentiable)" : r.sample;
    if (sample.size() > 36) sample = sample.substr(0, 33) + "...";
    if (r.skipped)
      std::printf("%-24s %-12s %-36s %-6s %-13s %-13s %s\n", r.name.c_str(), r.category.c_str(), sample.c_str(), ok,
                  "-", "-", second);
    else
      std::printf("%-24s %-12s %-36s %-6s %-13.3e %-13.3e %s\n", r.name.c_str(), r.category.c_str(), sample.c_str(), ok,
                  r.max_abs_error, r.max_rel_error, second);
  }
  bool header = false;
  for (const auto& r : rows) {
    if (r.passed || r.skipped) continue;
    if (!header) std::printf("\nfailures:\n");
    header = true;
    std::printf("\n%s [%s]:\n%s\n", r.name.c_str(), r.sample.c_str(), r.message.c_str());
  }
}

}  // namespace

int cmd_gradcheck(const std::vector<std::string>& args) {
  Args a("gradcheck", args);
  a.about(
      "Numeric gradient check (check M13): for every op in the registry and each of its sample inputs\n"
      "(float64, incl. broadcasting and non-contiguous cases), compares autograd's gradient with central\n"
      "differences (f(x+eps) - f(x-eps)) / 2eps, element by element, and reports the worst element.\n"
      "Ops flagged double_backward also get a second-order check (the backward of the backward, w.r.t. the\n"
      "inputs and the incoming gradient); every other differentiable op must refuse create_graph with a\n"
      "clear error (shown as 'refused').\n"
      "Exit status: 0 when every op passes, 1 otherwise.");
  a.flag("all-ops", "check every op in the registry");
  a.option("op", "NAME", "check only this op (see 'gradsleuth ops')");
  a.flag("json", "print one JSON object {\"ops\":[...]} and nothing else on stdout");
  a.flag("fast", "compare random directional derivatives instead of every element");
  a.flag("no-double", "skip the second-order (double backward) checks");
  a.option("seed", "S", "seed for the samples and projection weights", "0");
  a.option("eps", "E", "central-difference step", "1e-6");
  a.option("atol", "A", "absolute tolerance", "1e-5");
  a.option("rtol", "R", "relative tolerance (of |numeric|)", "1e-3");
  if (!a.parse()) return 0;
  a.refuse_together("all-ops", "op", "--all-ops checks every op, --op NAME one of them; pass one");
  if (a.has("op")) a.get_nonempty("op");
  if (!a.has("all-ops") && !a.has("op"))
    throw std::invalid_argument(
        "nothing to check: pass --all-ops, or --op NAME for one op (see 'gradsleuth "
        "gradcheck --help')");

  debug::GradcheckOptions o;
  o.fast = a.has("fast");
  o.check_double_backward = !a.has("no-double");
  o.seed = a.get_seed("seed");
  // A zero step blames a correct op; a step above 0.1 measures a secant, not a derivative.
  o.eps = a.get_double_in("eps", 0.0, true, 0.1, false);
  // Tolerances above 1 would pass a gradient that is wrong by more than its own size.
  o.atol = a.get_double_in("atol", 0.0, false, 1.0, false);
  o.rtol = a.get_double_in("rtol", 0.0, false, 1.0, false);
  const auto rows = debug::gradcheck_all_ops(o, a.get("op"));
  const auto ops = summarise(rows);
  int passed = 0, failed = 0, skipped = 0;
  for (const auto& s : ops) (s.skipped ? skipped : s.passed ? passed : failed)++;

  if (a.has("json")) {
    print_json(ops, passed, failed, skipped);
  } else {
    print_table(rows);
    int dbl = 0;
    for (const auto& s : ops) dbl += s.dbl_checked;
    std::printf(
        "\n%d passed, %d failed (ops; %zu samples checked, %d ops also checked to second order, %d "
        "skipped as not differentiable)\n",
        passed, failed, rows.size() - static_cast<size_t>(skipped), dbl, skipped);
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace gradsleuth::cli
