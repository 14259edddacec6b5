// gradsleuth graph: draws the autograd graph of one training step of the zoo's model
// (debug/report/graph.h), optionally with bugs switched on and the gate's findings highlighted.
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "core/autograd.h"
#include "debug/evidence/catalogue.h"
#include "debug/report/graph.h"
#include "debug/report/html_report.h"
#include "debug/zoo/zoo.h"

namespace gradsleuth::cli {

int cmd_graph(const std::vector<std::string>& args) {
  Args a("graph", args);
  a.about(
      "Draws the autograd graph of one forward pass and loss of the bug zoo's model on a Fashion-MNIST batch:\n"
      "each op with its output shape, dtype and the module that ran it, each parameter with its shape and\n"
      "version counter. With --check, the zoo's checks run on the variant first (a short budget) and the\n"
      "modules, ops and parameters their findings name are drawn in red. Writes BASE.svg when Graphviz's\n"
      "`dot` is installed (apt-get install graphviz), BASE.dot otherwise.");
  a.option("model", "mlp|cnn",
           "the zoo's reference model: mlp = Linear 784-128, BatchNorm, two residual blocks, dropout 0.2, "
           "Linear 128-10 (not train's plain 784-256-128-10 mlp); cnn = train's cnn",
           "mlp");
  a.option("bug", "ID", "switch a bug on (" + nn::bug_range() + "); repeatable", "", true);
  a.option("out", "BASE", "output path without extension", "graph");
  a.option("batch-size", "B", "examples in the batch drawn", "8");
  a.option("max-nodes", "N", "draw at most N nodes", "400");
  a.option("data-dir", "D", "folder with the Fashion-MNIST IDX files", "/usr/share/datasets/fashion-mnist");
  a.flag("check", "run the checks first and highlight what their findings name");
  a.flag("dot", "print the DOT text on stdout instead of writing a file");
  if (!a.parse()) return 0;

  debug::zoo::Options o = debug::zoo::Options::quick();
  o.model = a.get("model");
  GS_CHECK(o.model == "mlp" || o.model == "cnn", "graph", "unknown --model '", o.model, "': use mlp or cnn");
  o.data_dir = a.get_nonempty("data-dir");
  o.batch_size = a.get_int_in("batch-size", 1, 4096);
  const auto max_nodes = static_cast<size_t>(a.get_int_in("max-nodes", 1, 1000000));
  nn::BugSet bugs;
  for (const std::string& id : a.get_all("bug")) bugs.add(nn::parse_bug(id));
  const std::string base = a.get_nonempty("out");
  if (!a.has("dot")) a.check_writable_file("out");

  debug::DotOptions dopt;
  std::string title = "gradsleuth graph --model " + o.model + (bugs.empty() ? "" : " --bug " + bugs.str());
  if (a.has("check")) {
    // A short run is enough for the data checks and the gate, which name modules.
    debug::zoo::Options co = o;
    co.steps = 30;
    co.train_examples = 2000;
    co.test_examples = 1000;
    const debug::zoo::RunResult r = debug::zoo::run_variant(bugs, co);
    if (const std::optional<debug::Finding> lead = debug::lead_finding(r.report))
      std::fprintf(stderr, "graph: the lead finding: %s: %s (%s)\n", debug::check_label(lead->check).c_str(),
                   lead->title.c_str(),
                   lead->location().empty() ? "it names no module, op or parameter" : lead->location().c_str());
    int named = 0;
    for (const debug::Finding& f : r.report.findings())
      if (f.fires() && (!f.module.empty() || !f.op.empty() || !f.parameter.empty())) {
        dopt.highlight(f);
        ++named;
        std::fprintf(stderr, "graph: highlighting %s (%s)\n", debug::check_label(f.check).c_str(),
                     f.location().c_str());
      }
    if (named == 0) std::fprintf(stderr, "graph: no finding named a module, op or parameter\n");
  }
  dopt.max_nodes(max_nodes).title(title);
  const std::string dot = debug::zoo::graph_dot(bugs, o, o.batch_size, dopt);
  if (a.has("dot")) {
    std::cout << dot;
    return 0;
  }
  const std::string path = debug::write_graph(base, dot);
  std::printf("graph: wrote %s%s\n", path.c_str(),
              path.size() > 4 && path.substr(path.size() - 4) == ".dot"
                  ? " (install Graphviz for an SVG: apt-get install graphviz; then dot -Tsvg)"
                  : "");
  return 0;
}

}  // namespace gradsleuth::cli
