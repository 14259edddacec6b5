// gradsleuth doctor: every check on one model — the data checks, the
// pre-training gate (W2), a short monitored training run (W3), the end-of-run
// diagnoses — printed as a report, with an HTML page of plots (W6), a profile
// of one step (W7) and a memory report (W8). --bug injects catalogued bugs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>

#include "cli/cli.h"
#include "core/autograd.h"
#include "core/cpu/fast/blas.h"
#include "core/format.h"
#include "core/io.h"
#include "core/json.h"
#include "debug/checks/model/activation_stats.h"
#include "debug/checks/workflow/memory.h"
#include "debug/checks/workflow/profiler.h"
#include "debug/evidence/catalogue.h"
#include "debug/report/explore.h"
#include "debug/report/graph.h"
#include "debug/report/html_report.h"
#include "debug/run/diagnose.h"
#include "debug/zoo/zoo.h"

namespace gradsleuth::cli {

namespace {

// The loss per step, the clean run's beside it and the chance level of the task.
debug::Plot loss_plot(const debug::zoo::RunResult& r, const std::optional<debug::zoo::RunResult>& clean,
                      double chance) {
  debug::Plot loss;
  loss.title = "training loss";
  loss.x_label = "step";
  loss.y_label = "loss";
  auto series = [](const std::string& name, const std::vector<double>& v) {
    debug::Series s;
    s.name = name;
    for (size_t i = 0; i < v.size(); ++i) {
      s.x.push_back(static_cast<double>(i + 1));
      s.y.push_back(v[i]);
    }
    return s;
  };
  loss.series.push_back(series(clean ? "this run" : "train (per step)", r.history.step_losses));
  if (clean) loss.series.push_back(series("clean reference", clean->history.step_losses));
  if (std::isfinite(chance))
    loss.lines.push_back({chance, str_printf("chance level ln %.0f = %.3f", std::exp(chance), chance)});
  loss.caption = std::string("A loss that stays at the chance level has learned nothing; ") +
                 (clean ? "the clean recipe with the same budget shows what training should look like." : "");
  return loss;
}

// The batch-mixing Jacobian (M6): cell (i, j) is the size of d output[i] / d input[j] for
// the first examples of a batch, in eval mode. A model that treats examples independently
// has a diagonal map; anything off the diagonal mixes examples.
debug::HeatMap batch_mixing_map(const nn::BugSet& bugs, const debug::zoo::Options& o) {
  debug::zoo::Variant v = debug::zoo::build(bugs, o);
  v.model->eval();
  const nn::Batch b = v.train->batch(0, 0);
  const int64_t n = std::min<int64_t>(b.x.size(0), 12);
  Tensor x = b.x.narrow(0, 0, n).clone().requires_grad_(true);
  Tensor out = (*v.model)(x);
  debug::HeatMap h;
  h.title = "batch-mixing Jacobian: |d output[i] / d input[j]|";
  h.x_label = "input example j";
  h.y_label = "output row i";
  h.rows = n;
  h.cols = n;
  for (int64_t i = 0; i < n; ++i) {
    const tensor_list g = autograd::grad({out.narrow(0, i, 1).sum()}, {x}, {}, true);
    for (int64_t j = 0; j < n; ++j) {
      const Tensor gj = g[0].narrow(0, j, 1).to(kFloat64);
      h.values.push_back(std::sqrt((gj * gj).sum().item<double>()));
    }
  }
  h.caption =
      "Each output row should depend on its own input only: a diagonal map. Off-diagonal cells mean the "
      "model mixes examples of the batch (a reshape where a transpose was meant, a statistic over the "
      "wrong dimension).";
  return h;
}
}  // namespace

int cmd_doctor(const std::vector<std::string>& args) {
  Args a("doctor", args);
  a.about(
      "Runs every check of the debug module on the mlp or cnn reference model with Fashion-MNIST: the data\n"
      "checks (D1-D10, D12-D16), the pre-training gate (W2: devices, trainable parameters, forward, backward,\n"
      "gradient check of every layer, batch mixing, overfit one batch, initial loss, ...), a short training run\n"
      "with the monitor attached (W3), and the end-of-run diagnoses (loss history, fitting, learning rate, dead\n"
      "units, saturation, half precision). Prints the findings (what, where, evidence, likely cause, fix), writes\n"
      "OUT/report.html (plots: loss, gradient norms per layer, dead-unit fraction per layer, update ratios), the\n"
      "autograd explorer's page OUT/explore.html (linked from the report; docs/explore.md) and\n"
      "OUT/metrics.csv, and shows where a step's time and memory go (W7, W8). Then, each on a fresh copy of the\n"
      "recipe: dead units over a pass through the data (M7), the diagnosis report (W5, in --verbose), the\n"
      "input-independent baseline (M15), the capacity check (M16) and reproducibility (W1). --bug B13 injects a\n"
      "catalogued bug.");
  a.option("model", "mlp|cnn",
           "the zoo's reference model: mlp = Linear 784-128, BatchNorm, two residual blocks, dropout 0.2, "
           "Linear 128-10 (not train's plain 784-256-128-10 mlp); cnn = train's cnn",
           "mlp");
  a.option("bug", "ID", "inject a bug (" + nn::bug_range() + "); repeatable", "", true);
  a.option("steps", "N", "training steps of the monitored run", "150");
  a.option("train-examples", "N", "training images", "6000");
  a.option("out", "DIR",
           "where report.html and metrics.csv go (a folder holding an earlier report is refused unless "
           "--overwrite)",
           "runs/doctor");
  a.flag("overwrite", "replace the report.html and metrics.csv of an earlier run in --out DIR");
  a.option("seed", "S", "seeds initialisation, shuffling and dropout", "1");
  a.option("data-dir", "D", "folder with the Fashion-MNIST IDX files", "/usr/share/datasets/fashion-mnist");
  a.flag("verbose", "also print the info findings (batch summary, model summary, counts)");
  a.flag("json", "print the findings as one JSON object instead of the report");
  if (!a.parse()) return 0;
  set_thread_count();
  debug::zoo::Options o = debug::zoo::Options::quick();
  o.model = a.get("model");
  o.steps = a.get_int_in("steps", 1, 10000000);
  o.train_examples = a.get_int_in("train-examples", 1, 10000000);
  o.seed = a.get_seed("seed");
  o.data_dir = a.get_nonempty("data-dir");
  a.check_writable_dir("out");  // before the run: report.html and metrics.csv go there at the end
  GS_CHECK(o.model == "mlp" || o.model == "cnn", "doctor", "unknown --model '", o.model, "': use mlp or cnn");
  GS_CHECK(o.steps >= 1 && o.train_examples >= o.batch_size, "doctor",
           "--steps must be >= 1 and --train-examples >= ", o.batch_size);
  nn::BugSet bugs;
  for (const std::string& id : a.get_all("bug")) bugs.add(nn::parse_bug(id));
  debug::zoo::check_recipe(bugs.list(), o.model);  // refused before anything is built
  {
    // An earlier report is a result: replacing it takes --overwrite (checked before any work).
    std::string existing;
    for (const char* f : {"report.html", "metrics.csv"})
      if (std::filesystem::exists(std::filesystem::path(a.get("out")) / f))
        existing += (existing.empty() ? "" : ", ") + std::string(f);
    GS_CHECK(existing.empty() || a.has("overwrite"), "doctor", "--out '", a.get("out"), "' holds an earlier report (",
             existing, "); pass --overwrite to replace it, or choose another folder");
  }
  const bool json = a.has("json");
  auto progress = [json](const std::string& s) {
    if (!json) std::fprintf(stderr, "doctor: %s\n", s.c_str());
  };
  progress("CPU " + cpu::fast::cpu_isa().str() + "; BLAS " + cpu::fast::blas_info().str() +
           (cpu::fast::gemm_uses_engine() ? "; float32 products on gradsleuth's own kernel" : ""));

  debug::zoo::Variant v = debug::zoo::build(bugs, o);
  for (const std::string& n : v.notes) progress("recipe: " + n);
  const double chance = v.task == debug::zoo::Task::Classes ? std::log(static_cast<double>(v.num_classes)) : NAN;
  // The explorer's replay (debug/report/explore.h): weight norms and layer statistics on the monitor's steps.
  std::optional<debug::ReplayRecorder> replay;
  replay.emplace(*v.model, *v.optimizer, o.monitor_every);
  debug::zoo::RunResult r = debug::zoo::run_variant(v, o, progress);
  const debug::ReplaySeries replay_series = replay->series();
  replay.reset();
  // The clean recipe with the same budget, for the loss plot's overlay.
  std::optional<debug::zoo::RunResult> clean;
  if (!bugs.empty()) {
    progress("the clean reference, for comparison");
    debug::zoo::Options co = o;
    co.footwear = v.task == debug::zoo::Task::Footwear;
    clean = debug::zoo::run_variant(nn::BugSet{}, co);
  }

  // The checks that need runs of their own, each on a fresh copy of the recipe. They run after
  // training: their findings are stamped end_of_run, so the grouping (Report::groups) orders
  // them after the training steps.
  debug::Report extra;
  std::string diagnosis_text;    // W5's report, a section of the HTML page
  debug::Report* sink = &extra;  // where a check that could not run is reported
  auto guarded = [&](const char* what, const std::function<void()>& f) {
    try {
      f();
    } catch (const std::exception& e) {
      debug::Finding fd;
      fd.check = "W2";
      fd.severity = debug::Severity::Info;
      fd.title = std::string(what) + " could not run: " + e.what();
      sink->add(fd);
    }
  };
  // M7 over a pass through the training data with the trained model (every batch, up to 100).
  // A layer the monitor already reported keeps the monitor's finding: it saw the initialisation,
  // so it says when the units died (the pass cannot).
  if (r.stopped.empty())
    guarded("the dead-unit pass (M7)", [&] {
      for (const debug::Finding& f : debug::dead_relu_pass(*v.model, *v.train, 100)) {
        const std::vector<debug::Finding> seen = r.report.of("M7");
        if (std::none_of(seen.begin(), seen.end(), [&](const debug::Finding& g) { return g.module == f.module; }))
          extra.add(f);
      }
    });
  {
    debug::zoo::Variant fresh = debug::zoo::build(bugs, o);
    const nn::Batch b0 = fresh.train->batch(0, 0);
    debug::LossFunction loss = [&fresh](const Tensor& out, const Tensor& y) { return (*fresh.loss)(out, y); };
    guarded("the diagnosis report (W5)", [&] {
      debug::Diagnosis d = debug::diagnosis_report(*fresh.model, b0.x, b0.y, loss);
      extra.merge(d.findings);
      diagnosis_text = d.text;
    });
    // M15: five batches to train on, the sixth held out.
    guarded("the input-independent baseline (M15)", [&] {
      std::vector<std::pair<Tensor, Tensor>> train;
      for (int64_t i = 0; i < std::min<int64_t>(5, fresh.train->num_batches() - 1); ++i) {
        const nn::Batch b = fresh.train->batch(0, i);
        train.emplace_back(b.x, b.y);
      }
      const nn::Batch held = fresh.train->batch(0, static_cast<int64_t>(train.size()));
      extra.add(debug::input_independent_baseline(*fresh.model, train, {held.x, held.y}, loss));
    });
    // M16: the recipe at a quarter of its width against the full width, on the same batches.
    guarded("the capacity check (M16)", [&] {
      std::vector<std::pair<Tensor, Tensor>> train;
      for (int64_t i = 0; i < std::min<int64_t>(4, fresh.train->num_batches()); ++i) {
        const nn::Batch b = fresh.train->batch(0, i);
        train.emplace_back(b.x, b.y);
      }
      const int64_t K = fresh.task == debug::zoo::Task::Footwear ? 1 : fresh.num_classes;
      auto make = [&](int64_t width) { return debug::zoo::make_model(bugs, o, width, K); };
      debug::ModelCheckOptions mo;
      mo.baseline_steps = 80;
      extra.add(debug::capacity_check(make, 16, 128, train, loss, mo));
    });
    // W1: the recipe trained twice for 20 steps with one seed: the losses, every step's weights and
    // gradients, and the final parameters.
    guarded("the reproducibility check (W1)", [&] {
      extra.add(debug::check_reproducible(
          [&](uint64_t seed) -> debug::ReproRun {
            debug::zoo::Options ro = o;
            ro.seed = seed;
            debug::zoo::Variant rv = debug::zoo::build(bugs, ro);
            debug::StepRecorder rec(*rv.model, *rv.optimizer);
            std::vector<double> losses;
            int64_t step = 0;
            for (const nn::Batch& b : *rv.train) {
              if (step++ == 20) break;
              rv.optimizer->zero_grad();
              Tensor l = (*rv.loss)((*rv.model)(b.x), b.y);
              l.backward();
              rv.optimizer->step();
              losses.push_back(l.item<double>());
            }
            return {losses, rv.model, rec.fingerprints()};
          },
          o.seed));
    });
  }
  for (debug::Finding f : extra.findings()) {
    if (f.step < 0) f.end_of_run = true;
    r.report.add(std::move(f));
  }
  sink = &r.report;
  r.fired = r.report.fired_checks();

  // W7 and W8 on a fresh copy of the recipe (the run above may have broken the model).
  debug::zoo::Variant pv = debug::zoo::build(bugs, o);
  std::string profile_text, memory_text, profile_json = "null", memory_json = "null";
  try {
    const nn::Batch b = pv.train->batch(0, 0);
    debug::Profiler prof;
    prof.attach(*pv.model);
    prof.attach(*pv.optimizer);
    prof.start();
    for (int i = 0; i < 10; ++i) {
      pv.optimizer->zero_grad();
      Tensor loss = (*pv.loss)((*pv.model)(b.x), b.y);
      loss.backward();
      pv.optimizer->step();
    }
    prof.stop();
    const auto pr = prof.report();
    profile_text = pr.str(12);
    profile_json = pr.json();
    prof.detach();
    const auto mem = debug::memory_report(*pv.model, [&] { return (*pv.loss)((*pv.model)(b.x), b.y); });
    memory_text = mem.str();
    memory_json = mem.json();
  } catch (const std::exception& e) {
    profile_text = std::string("(not measured: ") + e.what() + ")";
  }

  // The HTML report (W6) and the metrics log.
  const std::string out = a.get("out");
  debug::HtmlReport html;
  html.title = "gradsleuth doctor: " + o.model + (bugs.empty() ? "" : " with " + bugs.str());
  html.summary = {{"model", o.model},
                  {"bugs", bugs.str()},
                  {"training", std::to_string(r.steps) + " steps on " + std::to_string(o.train_examples) + " images"},
                  {"test accuracy", debug::fmt_num(r.test_accuracy)},
                  {"final training loss", debug::fmt_num(r.final_loss)},
                  {"checks that fired", r.fired.empty() ? "none" : [&] {
                     std::string s;
                     for (auto& c : r.fired) s += (s.empty() ? "" : ", ") + debug::check_label(c);
                     return s;
                   }()}};
  // Each history the run has (a model without ReLUs has no dead-unit history).
  if (!r.history.grad_norms.empty()) html.plots.push_back(debug::grad_norm_plot(r.history));
  if (!r.history.dead_fraction.empty()) html.plots.push_back(debug::dead_unit_plot(r.history));
  if (!r.history.update_ratio.empty()) html.plots.push_back(debug::update_ratio_plot(r.history));
  html.findings = r.report;
  // The cause first: the diagnosis's lead (debug::analyse_causes), with the plot made for it.
  if (const std::optional<debug::Finding> lead = debug::lead_finding(r.report)) {
    debug::LeadFinding l;
    l.finding = *lead;
    l.why = debug::lead_why(r.report);
    // Its consequences (Report::groups), folded under it in the findings table.
    const std::vector<debug::FindingGroup> groups = r.report.groups();
    l.follow_on = groups.empty() ? 0 : static_cast<int64_t>(groups.front().follow_on.size());
    if (lead->check == "M6")
      guarded("the batch-mixing heat map", [&] { l.heatmaps.push_back(batch_mixing_map(bugs, o)); });
    // Its check's own plot and the gradient norms of what it names (the same as diagnose()'s report).
    l.plots = debug::lead_plots(*lead, r.history);
    l.plots.push_back(loss_plot(r, clean, chance));
    html.lead = std::move(l);
  }
  html.plots.insert(html.plots.begin(), loss_plot(r, clean, chance));
  if (!diagnosis_text.empty())
    html.sections.push_back({"Diagnosis report (W5, the fresh model on one batch)", diagnosis_text});
  html.sections.push_back({"Where the step time goes (W7 profiler, 10 steps)", profile_text});
  if (!memory_text.empty()) html.sections.push_back({"Memory (W8 memory report, one step)", memory_text});
  guarded("the autograd graph", [&] {
    debug::DotOptions d;
    d.title("one forward pass and loss; red: named by a finding");
    for (const debug::Finding& f : r.report.findings())
      if (f.fires()) d.highlight(f);
    const std::string dot = debug::zoo::graph_dot(bugs, o, 8, d);
    if (debug::have_graphviz())
      html.graph_svg = debug::dot_to_svg(dot);
    else
      html.graph_dot = dot;
  });
  std::filesystem::create_directories(out);
  // The autograd explorer's page beside the report (docs/explore.md): the graph of one batch through the
  // trained model, its backward, and this run's replay with the findings linked to the nodes they name.
  bool explorer = false;
  guarded("the explorer's page", [&] {
    Tensor bx, by;
    for (const nn::Batch& b : *v.train) {
      bx = b.x.narrow(0, 0, std::min<int64_t>(8, b.x.size(0))).to(v.device);
      by = b.y.narrow(0, 0, std::min<int64_t>(8, b.y.size(0))).to(v.device);
      break;
    }
    if (!bx.defined()) return;
    debug::ExploreOptions eo;
    eo.title = html.title;
    eo.replay = debug::replay_from(r.history, &replay_series);
    eo.findings = &r.report;
    auto loss = v.loss;
    debug::explore(
        *v.model, bx, by, [loss](const Tensor& o_, const Tensor& y_) { return (*loss)(o_, y_); }, out + "/explore.html",
        eo);
    explorer = true;
  });
  {
    // The report links the explorer's page, right under its title.
    std::string page = debug::render_html(html);
    const size_t h1 = page.find("</h1>");
    if (explorer && h1 != std::string::npos)
      page.insert(h1 + 5,
                  "\n<p class=\"explore-link\"><a href=\"explore.html\">Explore the autograd graph</a>: step "
                  "through the forward and the backward, and replay this run (explore.html, beside this "
                  "report)</p>");
    write_file_atomic(out + "/report.html", page, "doctor");
  }
  {
    debug::MetricsLog log(out);
    for (size_t i = 0; i < r.history.step_losses.size(); ++i)
      log.log(static_cast<int64_t>(i + 1), "loss/train", r.history.step_losses[i]);
    for (auto& [name, pts] : r.history.grad_norms)
      for (auto& [st, val] : pts) log.log(st, "grad_norm/" + name, val);
    for (auto& [name, pts] : r.history.dead_fraction)
      for (auto& [st, val] : pts) log.log(st, "dead_fraction/" + name, val);
  }

  if (json) {
    std::cout << "{\"model\":" << json_str(o.model) << ",\"bugs\":" << json_str(bugs.str()) << ",\"steps\":" << r.steps
              << ",\"test_accuracy\":" << json_num(r.test_accuracy) << ",\"final_loss\":" << json_num(r.final_loss)
              << ",\"fired\":[";
    for (size_t i = 0; i < r.fired.size(); ++i) std::cout << (i ? "," : "") << json_str(r.fired[i]);
    std::cout << "],\"lead\":" << r.report.lead_json() << ",\"findings\":" << r.report.json()
              << ",\"profile\":" << profile_json << ",\"memory\":" << memory_json
              << ",\"report\":" << json_str(out + "/report.html")
              << ",\"explore\":" << json_str(explorer ? out + "/explore.html" : "") << "}\n";
    return 0;
  }
  std::cout << "gradsleuth doctor: " << o.model << (bugs.empty() ? "" : " with bug " + bugs.str()) << ", " << r.steps
            << " training steps, test accuracy " << debug::fmt_num(r.test_accuracy) << "\n";
  if (!r.stopped.empty()) std::cout << r.stopped << "\n";
  // The diagnosis first, then each root with what it explains (--verbose lists the follow-ons).
  std::cout << "\n" << r.report.str(a.has("verbose"), a.has("verbose"));
  std::cout << "\nchecks that fired: ";
  if (r.fired.empty()) std::cout << "none";
  for (size_t i = 0; i < r.fired.size(); ++i) std::cout << (i ? ", " : "") << debug::check_label(r.fired[i]);
  std::cout << "\n\n== where the step time goes (W7 profiler, 10 steps) ==\n" << profile_text << "\n";
  if (!memory_text.empty()) std::cout << "== memory (W8 memory report, one step) ==\n" << memory_text << "\n";
  std::cout << "report: " << out << "/report.html, metrics: " << out << "/metrics.csv"
            << (explorer ? ", explorer: " + out + "/explore.html" : "") << "\n";
  return 0;
}

}  // namespace gradsleuth::cli
