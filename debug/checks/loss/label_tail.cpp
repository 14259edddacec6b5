// L9's confident-disagreement rule (debug/checks/loss/label_tail.h): the tail shares and their evidence.
// The rule's findings are made in end_fit.cpp, L9's home.
#include "debug/checks/loss/label_tail.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/format.h"

namespace gradsleuth::debug {

TailShares tail_shares(const LabelTailMeasure& m) {
  TailShares s;
  if (m.train_tail < 0 || m.val_tail < 0 || m.train_scored <= 0 || m.val_scored <= 0) return s;
  const double nt = static_cast<double>(m.train_scored), nv = static_cast<double>(m.val_scored);
  s.train = static_cast<double>(m.train_tail) / nt;
  s.val = static_cast<double>(m.val_tail) / nv;
  const double p = static_cast<double>(m.train_tail + m.val_tail) / (nt + nv);
  s.z = (s.train - s.val) / std::sqrt(std::max(p * (1 - p), 1e-12) * (1 / nt + 1 / nv));
  return s;
}

std::vector<Evidence> label_tail_evidence(const LabelTailMeasure& m, const LabelTailOptions& o) {
  const TailShares s = tail_shares(m);
  if (!std::isfinite(s.train)) return {};
  const std::string below = str_printf("%g", o.confident_below);
  return {{"training examples given under " + below + " probability for their label", s.train, ""},
          {"validation examples given under " + below + " probability for their label", s.val, ""},
          {"training - validation share", s.train - s.val, "> " + str_printf("%g", o.margin) + " and"},
          {"z (two proportions, training over validation)", s.z, ">= " + str_printf("%g", o.min_z) + " warns"}};
}

}  // namespace gradsleuth::debug
