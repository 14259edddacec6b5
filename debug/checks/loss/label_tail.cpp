// L9's confident-disagreement rule (debug/checks/loss/label_tail.h): the tail shares and their evidence;
// and the split rule's z on the examples' losses (loss_split_z, end_fit.h). The findings are made in
// end_fit.cpp, L9's home.
#include "debug/checks/loss/label_tail.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/format.h"
#include "debug/checks/check_util.h"
#include "debug/checks/loss/end_fit.h"

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

// L9's split rule on the examples' losses (declared in end_fit.h), Kind-free like the tail's shares.
// Without accuracies (a regression), each example's loss alone: the training split's loss against
// validation's, in standard errors. A model fits the examples it was trained on at least as well as
// examples it never saw; where its loss on them is clearly the higher one, the training examples are
// not the distribution it is scored on: noise written into the stored training inputs, or targets
// corrupted in the training split only.
// Welch's z of the two splits' mean losses, from their examples' losses: (training - validation) /
// the standard error of the difference.
double loss_split_z(const EndFitMeasure& m) {
  const auto& a = m.train_row_losses;
  const auto& b = m.val_row_losses;
  if (a.size() < 2 || b.size() < 2) return std::nan("");
  const auto [ma, va] = detail::mean_and_variance(a);
  const auto [mb, vb] = detail::mean_and_variance(b);
  const double se = std::sqrt(va / static_cast<double>(a.size()) + vb / static_cast<double>(b.size()));
  return se > 0 ? (ma - mb) / se : std::nan("");
}

}  // namespace gradsleuth::debug
