// The typed-evidence test of the diagnosis tests (test_zoo, test_dist_zoo, test_debug_diagnose):
// every finding's words reversed (title, evidence names and rules, cause, fix) must leave the
// diagnosis exactly as it was, because causes and symptoms match a finding's check and kind,
// never its text.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "debug/diagnosis/diagnosis.h"

namespace reworded {

inline std::string reversed(std::string s) {
  std::reverse(s.begin(), s.end());
  return s;
}

// The report with every English text of every finding reversed; ids, kinds, places, numbers kept.
inline gs::debug::Report reword(const gs::debug::Report& r) {
  gs::debug::Report out;
  for (gs::debug::Finding f : r.findings()) {
    f.title = reversed(f.title);
    f.cause = reversed(f.cause);
    f.fix = reversed(f.fix);
    for (gs::debug::Evidence& e : f.evidence) {
      e.name = reversed(e.name);
      e.rule = reversed(e.rule);
    }
    out.add(f);
  }
  for (const std::string& c : r.ran_checks()) out.note_ran(c);
  return out;
}

// The diagnosis of r and of r reworded agree: every finding's parent and root, the roots in lead
// order, and the lead (its finding, cause, whether confirmed, what confirmed it, what it explains).
inline void check_diagnosis_ignores_words(const gs::debug::Report& r) {
  const gs::debug::Report w = reword(r);
  REQUIRE(w.size() == r.size());  // the reworded findings keep their own keys
  const gs::debug::CauseAnalysis& a = r.diagnosis();
  const gs::debug::CauseAnalysis b = gs::debug::analyse_causes(w);
  CHECK(a.parent == b.parent);
  CHECK(a.root == b.root);
  CHECK(a.roots == b.roots);
  REQUIRE(a.lead.has_value() == b.lead.has_value());
  if (!a.lead) return;
  CHECK(a.lead->index == b.lead->index);
  CHECK(a.lead->check == b.lead->check);
  CHECK(a.lead->cause == b.lead->cause);
  CHECK(a.lead->confirmed == b.lead->confirmed);
  CHECK(a.lead->confirmed_by == b.lead->confirmed_by);
  CHECK(a.lead->explains == b.lead->explains);
  CHECK(a.lead->ruled_out == b.lead->ruled_out);
  CHECK(a.lead->candidates == b.lead->candidates);
}

}  // namespace reworded
