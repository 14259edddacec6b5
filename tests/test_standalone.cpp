// The repository stands alone: no check's catalogue entry, no source and no
// finding's text points at a source document by number or at files outside the
// repository. (tests/check_standalone.cmake greps the tracked files for the same.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/generator.h"
#include "debug/checks/loss/loss_checks.h"
#include "debug/checks/optim/optim_checks.h"
#include "debug/evidence/catalogue.h"
#include "debug/evidence/finding.h"
#include "nn/nn.h"

namespace dbg = gs::debug;
namespace nn = gs::nn;

namespace {

// The strings a standalone repository must not print: a source document by number,
// a folder outside the repository, the specification file. Spelled in pieces so
// that the repository-wide grep does not find them here.
const std::string kForbidden[] = {std::string("seed") + " 0", std::string("Seed") + " 0", std::string("seeds") + " 0",
                                  std::string("../") + "shared", std::string("CHECKS") + ".md"};

// The forbidden string found in `text`, or "" when it is clean.
std::string forbidden_in(const std::string& text) {
  for (const std::string& f : kForbidden)
    if (text.find(f) != std::string::npos) return f;
  return "";
}

void check_clean(const std::string& what, const std::string& text) {
  INFO(what << ": " << text);
  CHECK(forbidden_in(text) == "");
}

void check_findings(const std::string& what, const std::vector<dbg::Finding>& fs) {
  for (const dbg::Finding& f : fs) {
    const std::string w = what + " " + f.check + " (" + f.title + ")";
    check_clean(w + " cause", f.cause);
    check_clean(w + " fix", f.fix);
    check_clean(w + " title", f.title);
    for (const dbg::Evidence& e : f.evidence) check_clean(w + " evidence", e.name + " " + e.rule);
    check_clean(w + " str()", f.str());
  }
}

// A loss curve falling from `from` towards `to` with multiplicative noise.
std::vector<double> curve(int n, double from = 2.3, double to = 0.4, uint32_t seed = 1) {
  gs::Generator g(seed);
  std::vector<double> l;
  for (int t = 0; t < n; ++t) {
    const double noise = 1.0 + 0.05 * std::sin(0.7 * t + seed);
    l.push_back((to + (from - to) * std::exp(-t / 60.0)) * noise);
  }
  return l;
}

}  // namespace

TEST_CASE("the forbidden strings are recognised") {
  CHECK(forbidden_in("see " + kForbidden[0] + "00's table") == kForbidden[0]);
  CHECK(forbidden_in(kForbidden[3] + "/" + kForbidden[4]) != "");
  CHECK(forbidden_in("likely causes of a loss stuck high") == "");
}

TEST_CASE("every check's catalogue entry is self-contained and cites its sources by title") {
  REQUIRE(dbg::all_checks().size() == 75);
  for (const dbg::CheckInfo& c : dbg::all_checks()) {
    check_clean(c.id + " name", c.name);
    check_clean(c.id + " what", c.what);
    check_clean(c.id + " api", c.api);
    check_clean(c.id + " cli", c.cli);
    REQUIRE_FALSE(c.sources.empty());
    for (const std::string& s : c.sources) {
      INFO(c.id << " cites '" << s << "'");
      check_clean(c.id + " source", s);
      CHECK(dbg::find_source(s) != nullptr);  // a short title of all_sources(), not a number
      CHECK(s.find_first_not_of("0123456789, ") != std::string::npos);
    }
    // Output names a check by id and name.
    CHECK(dbg::check_label(c.id) == c.id + " " + c.name);
  }
  CHECK(dbg::check_label("Z9") == "Z9");
}

TEST_CASE("the sources are the public titles, each cited by some check or listed as a compared tool") {
  const auto& src = dbg::all_sources();
  REQUIRE(src.size() >= 5);
  bool compared_seen = false;
  for (const dbg::SourceInfo& s : src) {
    check_clean(s.short_name, s.title + " " + s.about + " " + s.authors + " " + s.where());
    CHECK_FALSE(s.title.empty());
    CHECK_FALSE(s.about.empty());
    bool cited = false;
    for (const dbg::CheckInfo& c : dbg::all_checks())
      for (const std::string& x : c.sources) cited = cited || x == s.short_name;
    INFO(s.short_name);
    CHECK(cited != s.compared);  // the compared tools are not cited by a check
    // The compared tools come after the cited sources (docs/checks.md lists them in that order).
    if (s.compared)
      compared_seen = true;
    else
      CHECK_FALSE(compared_seen);
  }
  REQUIRE(dbg::find_source("Debugging Training") != nullptr);
  CHECK(dbg::find_source("Debugging Training")->title.find("Debugging Training") != std::string::npos);
  REQUIRE(dbg::find_source("Karpathy 2019") != nullptr);
  CHECK(dbg::find_source("Karpathy 2019")->title.find("A Recipe for Training Neural Networks") != std::string::npos);
}

TEST_CASE("every source can be looked up: authors, title, year, and a URL or DOI or a stated reason for none") {
  for (const dbg::SourceInfo& s : dbg::all_sources()) {
    INFO(s.short_name);
    CHECK_FALSE(s.authors.empty());  // a person or an organisation
    CHECK_FALSE(s.title.empty());
    // A four-digit year, or documentation that is kept current, or a document that carries no date.
    const bool year = s.year.size() == 4 && s.year.find_first_not_of("0123456789") == std::string::npos;
    CHECK((year || s.year == "current" || s.year == "undated"));
    // Exactly one of a link and the reason there is none.
    CHECK(s.link.empty() != s.no_link.empty());
    if (!s.link.empty()) {
      // Each "; "-separated part is a URL, a DOI or an arXiv id.
      size_t from = 0;
      while (from <= s.link.size()) {
        const size_t to = std::min(s.link.find("; ", from), s.link.size());
        const std::string part = s.link.substr(from, to - from);
        INFO(part);
        CHECK((part.rfind("https://", 0) == 0 || part.rfind("http://", 0) == 0 || part.rfind("doi:10.", 0) == 0 ||
               part.rfind("arXiv:", 0) == 0));
        from = to + 2;
      }
    } else {
      CHECK(s.no_link.find("no public URL") != std::string::npos);
    }
    CHECK(s.where() == (s.link.empty() ? s.no_link : s.link));
  }
  // The ones that are public carry their address.
  auto link_of = [](const char* name) {
    const dbg::SourceInfo* s = dbg::find_source(name);
    REQUIRE(s != nullptr);
    return s->link;
  };
  CHECK(link_of("Karpathy 2019") == "http://karpathy.github.io/2019/04/25/recipe/");
  CHECK(link_of("Li et al. 2020").find("doi:10.14778/3415478.3415530") != std::string::npos);
  CHECK(link_of("Goyal et al. 2017").find("arXiv:1706.02677") != std::string::npos);
  CHECK(link_of("UMLAUT") == "doi:10.1145/3411764.3445538");
}

TEST_CASE("a finding's printout names the check by id and name") {
  dbg::Finding f;
  f.check = "M7";
  f.severity = dbg::Severity::Warning;
  f.title = "83% of the units of a ReLU layer are dead";
  CHECK(f.str().find("[M7 warning] dead-ReLU statistics: 83% of the units") == 0);
  CHECK(f.json().find("\"name\":\"dead-ReLU statistics\"") != std::string::npos);
}

TEST_CASE("the loss checks' causes and fixes state their rules without seed numbers") {
  // L1: NaN, Inf, stuck, spike, oscillation, train down / val up.
  auto nan = curve(300);
  for (size_t i = 150; i < nan.size(); ++i) nan[i] = NAN;
  auto inf = curve(120);
  inf[60] = INFINITY;
  std::vector<double> flat;
  for (int t = 0; t < 500; ++t) flat.push_back(2.35 - 0.0001 * t + 0.01 * std::sin(1.3 * t));
  auto spike = curve(300);
  spike[1] = 20.0;
  std::vector<double> zigzag;
  for (int t = 0; t < 200; ++t) zigzag.push_back(t % 2 ? 0.2 : 1.5);
  std::vector<double> diverging = curve(300, 2.3, 0.4);
  for (int t = 0; t < 300; ++t) diverging.push_back(0.4 + 2.0 * t / 300.0);
  dbg::LossCheckOptions chance;
  chance.chance_loss = std::log(10.0);

  std::vector<std::vector<dbg::Finding>> all = {
      dbg::diagnose_loss_history(nan),
      dbg::diagnose_loss_history(inf),
      dbg::diagnose_loss_history(flat),
      dbg::diagnose_loss_history(flat, {}, chance),
      dbg::diagnose_loss_history(spike),
      dbg::diagnose_loss_history(zigzag),
      dbg::diagnose_loss_history(diverging),
      dbg::diagnose_loss_history(curve(600), {0.9, 0.7, 0.6, 0.7, 0.8, 0.9}),
      // L4, L5, L6, L7
      dbg::check_initial_loss(160.0, 10),
      dbg::check_initial_loss(NAN, 10),
      dbg::check_masked_targets(gs::full({8}, -100.0, gs::kInt64), -100, NAN),
      dbg::check_loss_reduction(nn::CrossEntropyLoss(nn::Reduction::Sum)),
      dbg::diagnose_fitting(std::vector<double>(60, 0.9), std::vector<double>(60, 1.0)),
      dbg::diagnose_fitting({1.4, 1.4}, {1.7, 1.7}),
      dbg::diagnose_fitting({0.05, 0.05}, {0.06, 0.06}),
      dbg::diagnose_fitting({0.8, 0.7}, {0.85, 0.8}),
      // O6 from the loss history
      dbg::diagnose_learning_rate(flat),
      dbg::diagnose_learning_rate(nan),
      dbg::diagnose_learning_rate(spike),
  };
  size_t n = 0;
  for (const auto& fs : all) {
    check_findings("loss", fs);
    n += fs.size();
  }
  CHECK(n >= 15);  // the cases above did produce findings to look at
}

TEST_CASE("the gradient checks' causes and fixes state their rules without seed numbers") {
  gs::manual_seed(3);
  auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::Linear>(8, 3));
  // No gradient at all (O1 / M5 wording).
  check_findings("no grad", dbg::check_gradient_health(*net));
  auto ps = net->named_parameters();
  gs::Tensor g = gs::zeros({8, 4});
  g.data_ptr<float>()[5] = NAN;
  ps[0].second.set_grad(g);
  ps[1].second.set_grad(gs::full({8}, 1e-10));
  ps[2].second.set_grad(gs::full({3, 8}, 1.0));
  ps[3].second.set_grad(gs::full({3}, 1e4));
  const auto fs = dbg::check_gradient_health(*net);
  CHECK(fs.size() >= 3);
  check_findings("O1", fs);

  // O2/O3: a gradient-norm spike and a weight norm that keeps growing.
  dbg::NormHistory h;
  for (int64_t s = 1; s <= 60; ++s) {
    for (auto& [name, p] : net->named_parameters()) {
      p.set_grad(gs::full(p.shape(), s >= 40 && s < 50 ? 100.0 : 0.01));
      float* w = p.data_ptr<float>();
      for (int64_t i = 0; i < p.numel(); ++i) w[i] = static_cast<float>(0.1 * s);
    }
    h.record(s, *net);
  }
  check_findings("O2/O3", h.findings());

  // O4: a NaN weight.
  ps[0].second.data_ptr<float>()[0] = NAN;
  check_findings("O4", dbg::check_finite_weights(*net));
}
