// The scorecard (debug/corpus/scorecard.h): mutants against their healthy programs over seeds, the
// killing criterion, and detection and diagnosis recall per operator family.
#include "debug/corpus/scorecard.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>

#include "core/format.h"
#include "core/json.h"
#include "debug/corpus/corpus.h"
#include "debug/diagnosis/diagnosis.h"
#include "debug/evidence/kind.h"

namespace gradsleuth::debug::corpus {

std::string MutantResult::equivalent_flag() const {
  if (effective || !detected) return "";
  if (always_mistake) return "mistake";
  // A fault the metric cannot see: judged by the runs that flagged it, most of them naming it.
  return metric_blind && 2 * diagnosed_runs > detected_runs ? "metric-blind" : "false-alarm";
}

namespace {

double mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}
double variance(const std::vector<double>& v) {
  if (v.size() < 2) return 0.0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / static_cast<double>(v.size() - 1);
}

// The regularised incomplete beta function I_x(a, b), by its continued fraction (modified Lentz).
double beta_cf(double a, double b, double x) {
  const double tiny = 1e-300;
  double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
  d = 1.0 / (std::abs(d) < tiny ? tiny : d);
  double h = d;
  for (int m = 1; m <= 300; ++m) {
    const double m2 = 2.0 * m;
    double num = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
    d = 1.0 + num * d;
    c = 1.0 + num / c;
    d = 1.0 / (std::abs(d) < tiny ? tiny : d);
    c = std::abs(c) < tiny ? tiny : c;
    h *= d * c;
    num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0));
    d = 1.0 + num * d;
    c = 1.0 + num / c;
    d = 1.0 / (std::abs(d) < tiny ? tiny : d);
    c = std::abs(c) < tiny ? tiny : c;
    const double del = d * c;
    h *= del;
    if (std::abs(del - 1.0) < 1e-12) break;
  }
  return h;
}

double inc_beta(double a, double b, double x) {
  if (x <= 0) return 0.0;
  if (x >= 1) return 1.0;
  const double lb = std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log(1 - x);
  if (x < (a + 1) / (a + b + 2)) return std::exp(lb) * beta_cf(a, b, x) / a;
  return 1.0 - std::exp(lb) * beta_cf(b, a, 1 - x) / b;
}

// P(T > t) for Student's t with df degrees of freedom.
double t_upper(double t, double df) {
  const double tail = 0.5 * inc_beta(df / 2, 0.5, df / (df + t * t));
  return t > 0 ? tail : 1.0 - tail;
}

// The lead names the mutated component: the lead's check (with its kind, for a "CHECK:kind" entry), or
// a check confirming it, is one of causes.
bool diagnosed_by(const RunReport& r, const std::vector<std::string>& causes) {
  const CauseAnalysis& a = r.findings.diagnosis();
  if (!a.lead) return false;
  const std::string kind(kind_name(r.findings.findings()[a.lead->index].kind));
  for (const std::string& c : causes) {
    const size_t colon = c.find(':');
    if (colon != std::string::npos) {
      if (c.substr(0, colon) == a.lead->check && c.substr(colon + 1) == kind) return true;
    } else if (c == a.lead->check ||
               std::find(a.lead->confirmed_by.begin(), a.lead->confirmed_by.end(), c) != a.lead->confirmed_by.end()) {
      return true;
    }
  }
  return false;
}

std::string lead_of(const RunReport& r) {
  const CauseAnalysis& a = r.findings.diagnosis();
  return a.lead ? a.lead->check : "";
}

double ratio(int a, int b) { return b > 0 ? static_cast<double>(a) / b : std::nan(""); }

}  // namespace

double welch_p_greater(const std::vector<double>& a, const std::vector<double>& b) {
  const double ma = mean(a), mb = mean(b), va = variance(a), vb = variance(b);
  const double na = static_cast<double>(a.size()), nb = static_cast<double>(b.size());
  const double se2 = va / na + vb / nb;
  if (se2 <= 0) return ma > mb ? 0.0 : 1.0;
  const double t = (ma - mb) / std::sqrt(se2);
  const double df =
      se2 * se2 / ((va / na) * (va / na) / std::max(na - 1, 1.0) + (vb / nb) * (vb / nb) / std::max(nb - 1, 1.0));
  return t_upper(t, std::max(df, 1.0));
}

ScorecardOptions ScorecardOptions::quick() {
  ScorecardOptions o;
  o.recipes = quick_recipes();
  o.seeds = 3;
  o.all_strengths = false;
  return o;
}

std::vector<std::string> scorecard_recipes() {
  return {"step-per-epoch",
          "warmup-cosine-per-batch",
          "finetune-group-lrs",
          "binary",
          "regression",
          "imbalanced-weighted",
          "spirals",
          "cnn-images",
          "deep-tanh-xavier",
          "batchnorm-mlp",
          "dropout",
          "noise-augmentation",
          "grad-accumulation",
          "early-stopping",
          "map-prior",
          "trainer-diagnose"};
}

std::vector<std::string> quick_recipes() {
  return {"step-per-epoch", "binary", "batchnorm-mlp", "dropout", "grad-accumulation"};
}

double Scorecard::detection_recall() const { return ratio(overall.detected, overall.effective); }
double Scorecard::diagnosis_recall() const { return ratio(overall.diagnosed, overall.effective); }

Scorecard run_scorecard(const ScorecardOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  Scorecard s;
  s.seeds = o.seeds;
  const std::vector<std::string> recipe_names = o.recipes.empty() ? scorecard_recipes() : o.recipes;
  std::vector<const Operator*> ops;
  if (o.operators.empty()) {
    for (const Operator& op : fault_operators()) ops.push_back(&op);
  } else {
    for (const std::string& id : o.operators) ops.push_back(&fault_operator(id));
  }
  s.recipes = static_cast<int>(recipe_names.size());
  s.operators = static_cast<int>(ops.size());

  // The work: every (operator, recipe, strength) that applies.
  struct Job {
    const Operator* op;
    const Program* recipe;
    double strength;
  };
  std::vector<Job> jobs;
  for (const Operator* op : ops)
    for (const std::string& rn : recipe_names) {
      const Program& r = program(rn);
      if (!op->applies(r)) continue;
      if (o.all_strengths) {
        for (double st : op->strengths) jobs.push_back({op, &r, st});
      } else {
        jobs.push_back({op, &r, op->strengths[op->strengths.size() / 2]});
      }
    }
  const size_t total = jobs.size() + recipe_names.size() + (o.corpus ? healthy_programs().size() : 0);
  size_t done = 0;
  auto tell = [&](const std::string& line) {
    ++done;
    if (o.progress) o.progress(line, done, total);
  };

  // The healthy recipes over the seeds: the baseline of the killing criterion.
  std::map<std::string, std::vector<double>> healthy;
  for (const std::string& rn : recipe_names) {
    const Program& r = program(rn);
    for (int k = 1; k <= o.seeds; ++k) healthy[rn].push_back(run_program(r, static_cast<uint64_t>(k), {}).metric);
    tell("healthy " + rn);
  }
  // The corpus, once each: no check may warn.
  if (o.corpus) {
    for (const Program& p : healthy_programs()) {
      const Outcome out = run_program(p, 1);
      ++s.corpus_programs;
      const std::vector<std::string> fired = out.report.fired_checks();
      if (!fired.empty() || !out.error.empty()) {
        ++s.corpus_false_alarms;
        std::string f;
        for (const auto& c : fired) f += (f.empty() ? "" : " ") + c;
        s.corpus_alarms.push_back(p.name + ": " + (f.empty() ? "raised " + out.error : f));
      }
      tell("corpus " + p.name);
    }
  }

  for (const Job& j : jobs) {
    MutantResult m;
    m.op = j.op->id;
    m.family = j.op->family;
    m.recipe = j.recipe->name;
    m.strength = j.strength;
    m.always_mistake = j.op->always_mistake;
    m.metric_blind = !j.op->metric_blind.empty();
    std::vector<double> metrics;
    auto run_seeds = [&](int from, int to) {
      for (int k = from; k <= to; ++k) {
        const Mutant mu = j.op->mutate(*j.recipe, j.strength, static_cast<uint64_t>(k));
        std::vector<std::string> causes = j.op->causes;
        causes.insert(causes.end(), mu.also_causes.begin(), mu.also_causes.end());
        if (k == 1) {
          m.description = mu.description;
          m.metric_blind = m.metric_blind || !mu.also_metric_blind.empty();
        }
        // A mutant that makes the program raise before its loop (a schedule it cannot build) ran and
        // failed: the worst metric, no check heard.
        Outcome out;
        try {
          out = run_program(mu.program, static_cast<uint64_t>(k));
        } catch (const std::exception& e) {
          out.error = e.what();
          out.metric = j.recipe->data.task == Task::Regression ? -1.0 : 0.0;
        }
        metrics.push_back(out.metric);
        ++m.runs;
        const bool fired = !out.report.fired_checks().empty();
        m.detected_runs += fired;
        m.diagnosed_runs += fired && diagnosed_by(out.report, causes);
        if (k == 1) {
          m.fired = out.report.fired_checks();
          m.lead = lead_of(out.report);
        }
      }
    };
    // The killing criterion on the seeds run so far; true when it cannot decide (the effect size
    // and the drop are there, the p-value is not).
    auto judge = [&]() {
      // The healthy recipe on the same seeds as the mutant.
      const std::vector<double>& all = healthy[j.recipe->name];
      const std::vector<double> h(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(
                                                                 std::min(all.size(), metrics.size())));
      m.seeds = static_cast<int>(metrics.size());
      m.healthy_mean = mean(h);
      m.healthy_sd = std::sqrt(variance(h));
      m.mutant_mean = mean(metrics);
      m.mutant_sd = std::sqrt(variance(metrics));
      m.p_value = welch_p_greater(h, metrics);
      const double pooled = std::sqrt((variance(h) + variance(metrics)) / 2);
      const double diff = m.healthy_mean - m.mutant_mean;
      m.effect = pooled > 0 ? diff / pooled : diff > 0 ? 1e9 : 0.0;
      m.effective = m.p_value < o.alpha && m.effect >= o.min_effect && diff >= o.min_drop;
      return !m.effective && m.effect >= o.min_effect && diff >= o.min_drop;
    };
    run_seeds(1, o.seeds);
    if (judge() && o.confirm_undecided) {
      std::vector<double>& h = healthy[j.recipe->name];
      for (int k = static_cast<int>(h.size()) + 1; k <= 2 * o.seeds; ++k)
        h.push_back(run_program(*j.recipe, static_cast<uint64_t>(k), {}).metric);
      run_seeds(o.seeds + 1, 2 * o.seeds);
      judge();
    }
    m.detected = 2 * m.detected_runs > m.runs;
    m.diagnosed = 2 * m.diagnosed_runs > m.runs;
    tell(m.op + " " + str_printf("%g", m.strength) + " on " + m.recipe + ": " +
         (m.effective ? str_printf("effective (%.3f -> %.3f)", m.healthy_mean, m.mutant_mean) : "equivalent") +
         (m.seeds > o.seeds ? str_printf(" on %d seeds", m.seeds) : "") +
         (m.detected ? ", detected" : ", silent") + (m.diagnosed ? ", lead right" : ""));
    s.mutants.push_back(m);
  }

  // Per family, in operator order.
  for (const Operator* op : ops) {
    auto it = std::find_if(s.families.begin(), s.families.end(),
                           [&](const FamilyScore& f) { return f.family == op->family; });
    if (it == s.families.end()) {
      s.families.push_back({});
      s.families.back().family = op->family;
      it = s.families.end() - 1;
    }
    if (!op->blind_spot.empty()) it->blind_spot = op->id + ": " + op->blind_spot;
  }
  for (const MutantResult& m : s.mutants) {
    auto it =
        std::find_if(s.families.begin(), s.families.end(), [&](const FamilyScore& f) { return f.family == m.family; });
    for (FamilyScore* f : {&*it, &s.overall}) {
      ++f->mutants;
      if (m.effective) {
        ++f->effective;
        f->detected += m.detected;
        f->diagnosed += m.diagnosed;
      } else {
        ++f->equivalent;
        if (m.detected)
          (m.always_mistake                        ? f->equivalent_flagged_mistakes
           : m.equivalent_flag() == "metric-blind" ? f->equivalent_true_flags
                                                   : f->equivalent_false_alarms) += 1;
      }
    }
  }
  s.overall.family = "overall";
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

std::string scorecard_text(const Scorecard& s) {
  auto pc = [](double v) { return std::isfinite(v) ? str_printf("%5.1f%%", 100 * v) : std::string("    -"); };
  std::string t = str_printf("%d operators x %d recipes, %d seeds per mutant: %zu mutants in %.0f s\n\n", s.operators,
                             s.recipes, s.seeds, s.mutants.size(), s.seconds);
  t += str_printf("%-15s %7s %9s %10s %9s %9s %10s %12s\n", "family", "mutants", "effective", "equivalent", "detected",
                  "diagnosed", "true flags", "false alarms");
  for (const FamilyScore* f : [&] {
         std::vector<const FamilyScore*> v;
         for (const auto& x : s.families) v.push_back(&x);
         v.push_back(&s.overall);
         return v;
       }()) {
    if (f == &s.overall) t += std::string(89, '-') + "\n";
    t += str_printf("%-15s %7d %9d %10d %9s %9s %10d %12d\n", f->family.c_str(), f->mutants, f->effective,
                    f->equivalent, pc(ratio(f->detected, f->effective)).c_str(),
                    pc(ratio(f->diagnosed, f->effective)).c_str(),
                    f->equivalent_flagged_mistakes + f->equivalent_true_flags, f->equivalent_false_alarms);
  }
  t += str_printf(
      "\ndetection recall %s, diagnosis recall %s on %d effective mutants; %d equivalent mutants: %d "
      "mistakes flagged (always mistakes), %d true flags the metric cannot see (the fault named), %d false "
      "alarms\n",
      pc(s.detection_recall()).c_str(), pc(s.diagnosis_recall()).c_str(), s.overall.effective, s.overall.equivalent,
      s.overall.equivalent_flagged_mistakes, s.overall.equivalent_true_flags, s.overall.equivalent_false_alarms);
  if (s.corpus_programs > 0)
    t += str_printf("healthy corpus: %d programs, %d with a warning or error\n", s.corpus_programs,
                    s.corpus_false_alarms);
  for (const auto& a : s.corpus_alarms) t += "  false alarm: " + a + "\n";
  t += "\nPublished, for comparison: DeepFD (ICSE 2022) diagnoses 52% of its faults and localises 42%; the\n"
       "EMSE 2025 comparison of fault-diagnosis tools found a best recall of 0.55 at a precision of 0.37;\n"
       "AUTOTRAINER (ICSE 2021) detects 5 training problem types, UMLAUT (CHI 2021) checks 10 heuristics.\n";
  bool header = false;
  for (const MutantResult& m : s.mutants) {
    if (!m.effective || (m.detected && m.diagnosed)) continue;
    if (!header) t += "\nEffective mutants missed (silent) or with another lead:\n";
    header = true;
    std::string f;
    for (const auto& c : m.fired) f += (f.empty() ? "" : " ") + c;
    t += str_printf("  %-4s %-6g %-24s %.3f -> %.3f  %s  %s\n", m.op.c_str(), m.strength, m.recipe.c_str(),
                    m.healthy_mean, m.mutant_mean, m.detected ? ("lead " + m.lead).c_str() : "silent",
                    f.empty() ? "" : ("[" + f + "]").c_str());
  }
  header = false;
  for (const MutantResult& m : s.mutants) {
    if (m.equivalent_flag() != "false-alarm") continue;
    if (!header) t += "\nFalse alarms on equivalent mutants:\n";
    header = true;
    std::string f;
    for (const auto& c : m.fired) f += (f.empty() ? "" : " ") + c;
    t += str_printf("  %-4s %-6g %-24s %.3f -> %.3f  lead %s  [%s]\n", m.op.c_str(), m.strength, m.recipe.c_str(),
                    m.healthy_mean, m.mutant_mean, m.lead.c_str(), f.c_str());
  }
  for (const FamilyScore& f : s.families)
    if (!f.blind_spot.empty()) t += "\nNot visible from inside training: " + f.blind_spot + "\n";
  return t;
}

std::string scorecard_json(const Scorecard& s) {
  auto fam = [](const FamilyScore& f) {
    return "{\"family\":" + json_str(f.family) + ",\"mutants\":" + std::to_string(f.mutants) +
           ",\"effective\":" + std::to_string(f.effective) + ",\"equivalent\":" + std::to_string(f.equivalent) +
           ",\"detected\":" + std::to_string(f.detected) + ",\"diagnosed\":" + std::to_string(f.diagnosed) +
           ",\"detection_recall\":" + json_num(ratio(f.detected, f.effective)) +
           ",\"diagnosis_recall\":" + json_num(ratio(f.diagnosed, f.effective)) +
           ",\"equivalent_flagged_mistakes\":" + std::to_string(f.equivalent_flagged_mistakes) +
           ",\"equivalent_true_flags\":" + std::to_string(f.equivalent_true_flags) +
           ",\"equivalent_false_alarms\":" + std::to_string(f.equivalent_false_alarms) +
           ",\"blind_spot\":" + json_str(f.blind_spot) + "}";
  };
  std::string j = "{\"detection_recall\":" + json_num(s.detection_recall()) +
                  ",\"diagnosis_recall\":" + json_num(s.diagnosis_recall()) +
                  ",\"corpus_programs\":" + std::to_string(s.corpus_programs) +
                  ",\"corpus_false_alarms\":" + std::to_string(s.corpus_false_alarms) +
                  ",\"effective_mutants\":" + std::to_string(s.overall.effective) +
                  ",\"equivalent_mutants\":" + std::to_string(s.overall.equivalent) +
                  ",\"equivalent_flagged_mistakes\":" + std::to_string(s.overall.equivalent_flagged_mistakes) +
                  ",\"equivalent_true_flags\":" + std::to_string(s.overall.equivalent_true_flags) +
                  ",\"equivalent_false_alarms\":" + std::to_string(s.overall.equivalent_false_alarms) +
                  ",\"operators\":" + std::to_string(s.operators) + ",\"recipes\":" + std::to_string(s.recipes) +
                  ",\"seeds\":" + std::to_string(s.seeds) + ",\"seconds\":" + json_num(s.seconds) +
                  ",\"corpus_alarms\":" + json_list(s.corpus_alarms) + ",\"families\":[";
  for (size_t i = 0; i < s.families.size(); ++i) j += (i ? "," : "") + fam(s.families[i]);
  j += "],\"mutants\":[";
  for (size_t i = 0; i < s.mutants.size(); ++i) {
    const MutantResult& m = s.mutants[i];
    j += std::string(i ? "," : "") + "{\"operator\":" + json_str(m.op) + ",\"family\":" + json_str(m.family) +
         ",\"recipe\":" + json_str(m.recipe) + ",\"strength\":" + json_num(m.strength) +
         ",\"description\":" + json_str(m.description) + ",\"healthy_mean\":" + json_num(m.healthy_mean) +
         ",\"mutant_mean\":" + json_num(m.mutant_mean) + ",\"p_value\":" + json_num(m.p_value) +
         ",\"effect\":" + json_num(m.effect) + ",\"seeds\":" + std::to_string(m.seeds) +
         ",\"effective\":" + json_bool(m.effective) + ",\"flag\":" + json_str(m.equivalent_flag()) +
         ",\"detected\":" + json_bool(m.detected) + ",\"diagnosed\":" + json_bool(m.diagnosed) +
         ",\"runs\":" + std::to_string(m.runs) + ",\"detected_runs\":" + std::to_string(m.detected_runs) +
         ",\"diagnosed_runs\":" + std::to_string(m.diagnosed_runs) + ",\"fired\":" + json_list(m.fired) +
         ",\"lead\":" + json_str(m.lead) + "}";
  }
  return j + "]}";
}

}  // namespace gradsleuth::debug::corpus
