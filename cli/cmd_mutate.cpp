// gradsleuth mutate: the fault operators (debug/corpus/operators.h). Lists them, or writes one into a
// healthy corpus program, trains the mutant with every check attached and prints its diagnosis
// beside the healthy program's outcome.
#include <cstdio>
#include <iostream>

#include "cli/cli.h"
#include "core/format.h"
#include "core/json.h"
#include "debug/corpus/corpus.h"
#include "debug/corpus/operators.h"
#include "debug/diagnosis/diagnosis.h"

namespace gradsleuth::cli {

int cmd_mutate(const std::vector<std::string>& args) {
  Args a("mutate", args);
  a.about(
      "Fault operators over the healthy corpus: DeepCrime's operators (Humbatova, Jahangirova and Tonella, ISSTA\n"
      "2021; from the taxonomy of real faults in deep learning systems) and the families DeepCrime leaves to the\n"
      "program text (data between splits, preprocessing per split, train/eval mode, parameters outside the\n"
      "optimizer, schedules stepped at the wrong rate, reductions and scales). `mutate --list` lists them;\n"
      "`mutate OP --recipe R` writes OP into the corpus program R (gradsleuth corpus --list), trains the mutant\n"
      "and the healthy program with the same seed, and prints the mutant's diagnosis.");
  a.positionals("OP", "the operator's id (mutate --list)");
  a.flag("list", "list the operators: id, family, what it does, its strengths and the checks that should lead");
  a.option("recipe", "R", "the corpus program to mutate", "step-per-epoch");
  a.option("strength", "S", "the operator's strength (default: its middle one; see --list)");
  a.option("seed", "S", "the training seed; a layer operator's seed also picks the layer", "1");
  a.flag("json", "print {operator, recipe, strength, description, healthy_metric, mutant_metric, fired, lead, report}");
  if (!a.parse()) return 0;
  set_thread_count();
  using namespace debug::corpus;
  if (a.has("list")) {
    GS_CHECK(a.positional().empty(), "mutate --list", "takes no operator");
    std::string family;
    for (const Operator& op : fault_operators()) {
      if (op.family != family) std::cout << "\n" << (family = op.family) << ":\n";
      std::string st, causes;
      for (double s : op.strengths) st += (st.empty() ? "" : ", ") + str_printf("%g", s);
      for (const auto& c : op.causes) causes += (causes.empty() ? "" : " ") + c;
      std::cout << str_printf("  %-4s %s\n       strengths %s (%s); should lead: %s\n", op.id.c_str(), op.name.c_str(),
                              st.c_str(), op.strength_unit.c_str(), causes.empty() ? "(none)" : causes.c_str());
      if (!op.blind_spot.empty()) std::cout << "       not visible from inside training: " << op.blind_spot << "\n";
    }
    std::cout << "\n" << fault_operators().size() << " operators\n";
    return 0;
  }
  GS_CHECK(a.positional().size() == 1, "mutate", "give one operator id (gradsleuth mutate --list shows them), got ",
           a.positional().size());
  const Operator& op = fault_operator(a.positional()[0]);
  const Program& recipe = program(a.get("recipe"));
  const double strength = a.has("strength") ? a.get_double_in("strength", -1e12, false, 1e12, false)
                                            : op.strengths[op.strengths.size() / 2];
  const uint64_t seed = a.get_seed("seed");
  const Mutant m = op.mutate(recipe, strength, seed);
  std::fprintf(stderr, "mutate: %s on %s: %s\n", op.id.c_str(), recipe.name.c_str(), m.description.c_str());
  RunOptions unchecked;
  unchecked.checks = false;
  const Outcome healthy = run_program(recipe, seed, unchecked);
  const Outcome mut = run_program(m.program, seed);
  const auto& d = mut.report.findings.diagnosis();
  if (a.has("json")) {
    std::cout << "{\"operator\":" << json_str(op.id) << ",\"recipe\":" << json_str(recipe.name)
              << ",\"strength\":" << json_num(strength) << ",\"description\":" << json_str(m.description)
              << ",\"healthy_metric\":" << json_num(healthy.metric) << ",\"mutant_metric\":" << json_num(mut.metric)
              << ",\"fired\":" << json_list(mut.report.fired_checks())
              << ",\"lead\":" << json_str(d.lead ? d.lead->check : "") << ",\"report\":" << mut.report.json() << "}\n";
    return 0;
  }
  std::cout << op.id << " (" << op.name << ") on " << recipe.name << ": " << m.description << "\n"
            << metric_name(recipe) << ": healthy " << str_printf("%.3f", healthy.metric) << ", mutant "
            << str_printf("%.3f", mut.metric) << " (seed " << seed << ")\n\n"
            << mut.report.str();
  return 0;
}

}  // namespace gradsleuth::cli
