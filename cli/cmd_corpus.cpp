// gradsleuth corpus: lists and runs the healthy-practice corpus (debug/corpus/corpus.h): correct
// training programs through debug::Session / diagnose(), each of which must train well with no check
// warning on it.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "cli/cli.h"
#include "core/format.h"
#include "core/io.h"
#include "core/json.h"
#include "debug/corpus/corpus.h"
#include "debug/corpus/null_distribution.h"

namespace gradsleuth::cli {

int cmd_corpus(const std::vector<std::string>& args) {
  Args a("corpus", args);
  a.about(
      "The healthy-practice corpus: correct training programs as people write them from the public references\n"
      "(PyTorch's examples, torchvision's and timm's recipes, the fine-tuning tutorials, Karpathy's recipe), in six\n"
      "families: schedules, fine-tuning, tasks, depth, regularisation, loop. Each runs through debug::Session or\n"
      "debug::diagnose() with every check attached. A healthy program must reach its expected test metric, and no\n"
      "check may warn on it: a warning here is a false alarm (exit status 1). docs/corpus.md describes them.");
  a.flag("list", "list the programs (name, family, what it does, the reference it follows) and exit");
  a.option("program", "NAME", "run this program (repeat for several; default: every program)", "", true);
  a.option("family", "F", "run the programs of this family only");
  a.option("seed", "S", "the training seed (initialisation, shuffling, dropout)", "1");
  a.option("json", "FILE", "also write the results as JSON to FILE");
  a.flag("verbose", "print each program's report (info findings included); with --json, each program's report is "
         "in the file too");
  a.flag("null",
         "the null distribution of the checks' evidence: run the programs over --seeds and print, per check and "
         "evidence, the values seen in every finding (info ones included): min, median, max, the rule's threshold "
         "and the margin to it");
  a.option("seeds", "LIST", "with --null: the training seeds, comma-separated", "1,2,3");
  if (!a.parse()) return 0;
  if (a.has("json")) a.check_writable_file("json");
  set_thread_count();

  std::vector<const debug::corpus::Program*> selected;
  if (a.has("program")) {
    for (const std::string& n : a.get_all("program")) selected.push_back(&debug::corpus::program(n));
  } else {
    for (const auto& p : debug::corpus::healthy_programs())
      if (!a.has("family") || p.family == a.get("family")) selected.push_back(&p);
    GS_CHECK(!selected.empty(), "corpus --family", "no program of family '", a.get("family"),
             "' (families: schedules, fine-tuning, tasks, depth, regularisation, loop)");
  }
  if (a.has("list")) {
    for (const auto* p : selected)
      std::cout << str_printf("%-26s %-15s %s\n%42s(%s)\n", p->name.c_str(), p->family.c_str(), p->summary.c_str(), "",
                              p->source.c_str());
    return 0;
  }
  if (a.has("null")) {
    std::vector<uint64_t> seeds;
    const std::string list = a.get("seeds");
    for (size_t i = 0; i <= list.size();) {
      const size_t end = std::min(list.find(',', i), list.size());
      const std::string item = list.substr(i, end - i);
      char* stop = nullptr;
      const unsigned long long v = std::strtoull(item.c_str(), &stop, 10);
      GS_CHECK(!item.empty() && stop && *stop == '\0', "corpus --seeds", "'", item, "' in '", list,
               "' is not a seed: give non-negative integers separated by commas, e.g. --seeds 1,2,3");
      seeds.push_back(v);
      i = end + 1;
    }
    const debug::corpus::NullDistribution nd =
        debug::corpus::measure_null(selected, seeds, [](size_t i, size_t n, const std::string& what) {
          std::fprintf(stderr, "corpus --null: [%zu/%zu] %s\n", i, n, what.c_str());
        });
    std::cout << debug::corpus::null_text(nd) << std::flush;
    if (a.has("json")) write_file_atomic(a.get("json"), debug::corpus::null_json(nd) + "\n", "corpus --null --json");
    return 0;
  }
  const uint64_t seed = a.get_seed("seed");
  int alarms = 0, short_of = 0;
  std::string json = "{\"seed\":" + std::to_string(seed) + ",\"programs\":[";
  for (size_t i = 0; i < selected.size(); ++i) {
    const auto& p = *selected[i];
    std::fprintf(stderr, "corpus: [%zu/%zu] %s\n", i + 1, selected.size(), p.name.c_str());
    const debug::corpus::Outcome o = debug::corpus::run_program(p, seed);
    std::vector<std::string> fired = o.report.fired_checks();
    const bool ok_metric = o.metric >= p.expected_metric;
    alarms += !fired.empty() || !o.error.empty();
    short_of += !ok_metric;
    std::string f;
    for (const auto& c : fired) f += (f.empty() ? "" : " ") + c;
    std::cout << str_printf("%-26s %-15s %s %.3f%s  %5.1f s  %s\n", p.name.c_str(), p.family.c_str(),
                            debug::corpus::metric_name(p).c_str(), o.metric, ok_metric ? "" : " (below expected)",
                            o.seconds, fired.empty() ? "silent" : ("WARNS: " + f).c_str());
    if (!o.error.empty()) std::cout << "  raised: " << o.error << "\n";
    if (a.has("verbose") || !fired.empty()) std::cout << o.report.str(a.has("verbose"));
    std::cout << std::flush;
    json += std::string(i ? "," : "") + "{\"name\":" + json_str(p.name) + ",\"family\":" + json_str(p.family) +
            ",\"metric\":" + json_num(o.metric) + ",\"expected_metric\":" + json_num(p.expected_metric) +
            ",\"fired\":" + json_list(fired) + ",\"seconds\":" + json_num(o.seconds) +
            ",\"error\":" + json_str(o.error) + (a.has("verbose") ? ",\"report\":" + o.report.json() : "") + "}";
  }
  json += "],\"false_alarms\":" + std::to_string(alarms) + ",\"below_expected\":" + std::to_string(short_of) + "}";
  std::cout << str_printf("%zu programs: %d with a warning or error, %d below their expected metric\n", selected.size(),
                          alarms, short_of);
  if (a.has("json")) write_file_atomic(a.get("json"), json + "\n", "corpus --json");
  return alarms || short_of ? 1 : 0;
}

}  // namespace gradsleuth::cli
