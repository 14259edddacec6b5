// L9 without accuracies (debug/checks/loss/end_fit.h), read from each example's loss alone:
// - the training split's loss against validation's, in standard errors. A model fits the examples it
//   was trained on at least as well as examples it never saw; where its loss on them is clearly the
//   higher one, the training examples are not the distribution it is scored on: noise written into
//   the stored training inputs, or targets corrupted in the training split only;
// - training on, the validation examples' losses before and after, paired: the stand-in for the
//   McNemar count of examples turned right that a classifier gets.
#include <cmath>
#include <numeric>

#include "core/format.h"
#include "debug/checks/loss/end_fit.h"

namespace gradsleuth::debug {

// Welch's z of the two splits' mean losses, from their examples' losses: (training - validation) /
// the standard error of the difference.
double loss_split_z(const EndFitMeasure& m) {
  auto mean_and_var = [](const std::vector<double>& x) {
    const double n = static_cast<double>(x.size());
    const double mean = std::accumulate(x.begin(), x.end(), 0.0) / n;
    double ss = 0;
    for (double v : x) ss += (v - mean) * (v - mean);
    return std::make_pair(mean, ss / (n - 1));
  };
  const auto& a = m.train_row_losses;
  const auto& b = m.val_row_losses;
  if (a.size() < 2 || b.size() < 2) return std::nan("");
  const auto [ma, va] = mean_and_var(a);
  const auto [mb, vb] = mean_and_var(b);
  const double se = std::sqrt(va / static_cast<double>(a.size()) + vb / static_cast<double>(b.size()));
  return se > 0 ? (ma - mb) / se : std::nan("");
}

// The paired z of the validation examples' loss drops: mean / (spread / sqrt(examples)).
double continued_loss_z(const EndFitMeasure& m) {
  const auto& before = m.val_row_losses;
  const auto& after = m.continued_val_row_losses;
  if (before.size() < 2 || before.size() != after.size()) return std::nan("");
  const double n = static_cast<double>(before.size());
  double mean = 0;
  for (size_t i = 0; i < before.size(); ++i) mean += (before[i] - after[i]) / n;
  double ss = 0;
  for (size_t i = 0; i < before.size(); ++i) ss += (before[i] - after[i] - mean) * (before[i] - after[i] - mean);
  const double se = std::sqrt(ss / (n - 1) / n);
  return se > 0 ? mean / se : std::nan("");
}

void add_loss_split_evidence(Finding& f, const EndFitMeasure& m, const EndFitOptions& o) {
  const double z = loss_split_z(m);
  if (!std::isfinite(z)) return;
  f.evidence.push_back({"validation / training loss", m.val_loss / m.train_loss,
                        "< " + str_printf("%g", 1 - o.labels_loss_margin) + " and"});
  f.evidence.push_back({"(training - validation loss) / its standard error (the examples' losses)", z,
                        ">= " + str_printf("%g", o.min_z) + " warns"});
}

std::vector<Finding> check_loss_split(const EndFitMeasure& m, const EndFitOptions& o) {
  const double z = loss_split_z(m);
  if (!(std::isfinite(z) && m.val_loss < (1 - o.labels_loss_margin) * m.train_loss && z >= o.min_z)) return {};
  Finding f;
  f.check = "L9";
  f.kind = Kind::TrainLabelsDisagree;
  f.severity = Severity::Warning;
  f.end_of_run = true;
  f.title = "the trained model's loss is " + str_printf("%.4g", m.train_loss) + " on its own training data but " +
            str_printf("%.4g", m.val_loss) + " on validation (" + str_printf("%.1f", z) +
            " standard errors lower): the training examples disagree with it";
  f.evidence.push_back({"training loss (eval mode)", m.train_loss, ""});
  f.evidence.push_back({"validation loss", m.val_loss, ""});
  f.evidence.push_back({"training examples", static_cast<double>(m.train_examples), ""});
  f.evidence.push_back({"validation examples", static_cast<double>(m.val_examples), ""});
  add_loss_split_evidence(f, m, o);
  f.cause =
      "the training inputs are corrupted (noise added to the stored training split), or a share of the training "
      "targets is wrong (shifted, rescaled or noisy in the training split only): a model fits clean training data at "
      "least as well as data it never saw";
  f.fix =
      "compare the training split's inputs and targets with the validation split's (their statistics, a few rows "
      "each); look at the training examples with the largest loss; check that both splits are built the same way";
  return {f};
}

}  // namespace gradsleuth::debug
