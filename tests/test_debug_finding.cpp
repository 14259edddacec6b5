// Findings, reports, the check catalogue and the warning channel.
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include "core/warning.h"
#include "debug/evidence/catalogue.h"
#include "debug/evidence/finding.h"
#include "json_mini.h"

namespace dbg = gs::debug;

namespace {
dbg::Finding make(const std::string& check, dbg::Severity s, const std::string& title, const std::string& module = "") {
  dbg::Finding f;
  f.check = check;
  f.severity = s;
  f.title = title;
  f.module = module;
  return f;
}
}  // namespace

TEST_CASE("a finding prints what, where, evidence, cause and fix") {
  dbg::Finding f = make("M7", dbg::Severity::Warning, "83% of the units of a ReLU layer are dead", "2 (ReLU)");
  f.evidence.push_back({"dead fraction", 0.83, ">= 0.7 flags a layer"});
  f.cause = "a large negative bias";
  f.fix = "use He initialisation";
  const std::string s = f.str();
  CHECK(s.find("[M7 warning] dead-ReLU statistics: 83% of the units") == 0);  // id and name
  CHECK(s.find("where:    module 2 (ReLU)") != std::string::npos);
  CHECK(s.find("dead fraction = 0.83 (>= 0.7 flags a layer)") != std::string::npos);
  CHECK(s.find("cause:    a large negative bias") != std::string::npos);
  CHECK(s.find("fix:      use He initialisation") != std::string::npos);
  json_mini::Value v = json_mini::parse(f.json());
  CHECK(v.get("check")->str == "M7");
  CHECK(v.get("name")->str == "dead-ReLU statistics");
  CHECK(v.get("severity")->str == "warning");
  CHECK(v.get("evidence")->arr.size() == 1);
  CHECK(v.get("evidence")->arr[0].get("value")->num == doctest::Approx(0.83));
}

TEST_CASE("a report de-duplicates, counts and lists the checks that fired") {
  dbg::Report r;
  r.add(make("O5", dbg::Severity::Warning, "no zero_grad"));
  r.add(make("O5", dbg::Severity::Warning, "no zero_grad"));
  r.add(make("D1", dbg::Severity::Info, "batch"));
  r.add(make("M19", dbg::Severity::Error, "both expanded"));
  r.add(make("M2", dbg::Severity::Warning, "dropout on", "3"));
  REQUIRE(r.size() == 4);
  CHECK(r.findings()[0].count == 2);
  CHECK(r.fired("O5"));
  CHECK_FALSE(r.fired("D1"));  // info does not fire
  CHECK_FALSE(r.fired("L1"));
  CHECK(r.fired_checks() == std::vector<std::string>{"M2", "M19", "O5"});
  const std::string s = r.str(false);
  CHECK(s.find("[M19 error]") < s.find("[O5 warning]"));  // errors first
  CHECK(s.find("[D1") == std::string::npos);
  json_mini::Value v = json_mini::parse(r.json());
  CHECK(v.arr.size() == 4);
}

TEST_CASE("json_num writes null for non-finite numbers") {
  CHECK(dbg::json_num(1.5) == "1.5");
  CHECK(dbg::json_num(std::nan("")) == "null");
  CHECK(dbg::json_str("a\"b\n") == "\"a\\\"b\\n\"");
}

TEST_CASE("the catalogue holds the 75 checks, each once") {
  const auto& all = dbg::all_checks();
  CHECK(all.size() == 75);
  std::set<std::string> ids;
  for (const auto& c : all) {
    ids.insert(c.id);
    CHECK_FALSE(c.name.empty());
    CHECK_FALSE(c.api.empty());
    CHECK_FALSE(c.sources.empty());
  }
  CHECK(ids.size() == 75);
  for (int i = 1; i <= 16; ++i) CHECK(ids.count("D" + std::to_string(i)));
  for (int i = 1; i <= 8; ++i) CHECK(ids.count("L" + std::to_string(i)));
  for (int i = 1; i <= 30; ++i) CHECK(ids.count("M" + std::to_string(i)));
  for (int i = 1; i <= 10; ++i) CHECK(ids.count("O" + std::to_string(i)));
  for (int i = 1; i <= 10; ++i) CHECK(ids.count("W" + std::to_string(i)));
  REQUIRE(dbg::find_check("m7") != nullptr);
  CHECK(dbg::find_check("m7")->id == "M7");
  CHECK(dbg::find_check("M31") == nullptr);
}

TEST_CASE("warnings go to the installed handler, and the guard restores the previous one") {
  std::vector<gs::Warning> got;
  {
    gs::WarningHandlerGuard g([&](const gs::Warning& w) { got.push_back(w); });
    gs::warn({"O5", "SGD", "step without zero_grad"});
    {
      std::vector<gs::Warning> inner;
      gs::WarningHandlerGuard g2([&](const gs::Warning& w) { inner.push_back(w); });
      gs::warn({"M2", "Dropout", "training mode under no_grad"});
      CHECK(inner.size() == 1);
    }
    gs::warn({"M2", "Dropout", "again"});
  }
  REQUIRE(got.size() == 2);
  CHECK(got[0].check == "O5");
  CHECK(got[1].message == "again");
}
