// L7's home, the fitting diagnosis: the training curve against validation's (underfitting, overfitting,
// a validation accuracy above training's), and the revisions of its verdicts by what the end of the run
// measured (each example's loss under the trained model, the loss at the training batch size).
#include <algorithm>
#include <cmath>
#include <functional>

#include "debug/checks/check_util.h"
#include "debug/checks/loss/loss_checks.h"

namespace gradsleuth::debug {

namespace {
using detail::kNaN;
using detail::make;
using detail::median;
using detail::num;
}  // namespace

bool fitting_says_overfit(const Finding& f) { return f.is("L7", Kind::Overfitting); }

std::vector<Finding> check_validation_accuracy(const std::vector<double>& tr, const std::vector<double>& va,
                                               const LossCheckOptions& opts) {
  std::vector<Finding> out;
  const int64_t k = opts.val_accuracy_epochs;
  const int64_t n = static_cast<int64_t>(std::min(tr.size(), va.size()));
  if (k < 1 || n < k) return out;
  double smallest = std::numeric_limits<double>::infinity();
  for (int64_t e = n - k; e < n; ++e) {
    const double gap = va[e] - tr[e];
    if (!std::isfinite(gap) || gap <= opts.val_accuracy_margin) return out;
    smallest = std::min(smallest, gap);
  }
  Finding f = make("L7", Severity::Warning,
                   "the validation accuracy is above the training accuracy by " + fmt_num(100 * smallest) +
                       " points or more in each of the last " + num(k) + " epochs: suspiciously high");
  f.kind = Kind::ValidationTooGood;
  f.evidence = {{"training accuracy (last epoch, train mode)", tr[n - 1], ""},
                {"validation accuracy (last epoch)", va[n - 1], ""},
                {"smallest gap over the last epochs", smallest, "> " + fmt_num(opts.val_accuracy_margin) + " warns"}};
  f.cause =
      "the validation rows are (partly) training rows, the training labels are noisier than the "
      "validation labels or come from another source, or the validation split is too small to judge; "
      "dropout alone lowers the training accuracy only a little";
  f.fix =
      "check the splits for shared rows (D13) and their labels' quality and distribution (D12, D15), and "
      "validate on more rows (D16)";
  out.push_back(std::move(f));
  return out;
}

void revise_validation_too_good(Report& found, double train_accuracy_eval, double val_accuracy,
                                const LossCheckOptions& opts) {
  if (!std::isfinite(train_accuracy_eval) || !std::isfinite(val_accuracy) ||
      val_accuracy - train_accuracy_eval > opts.val_accuracy_margin)
    return;
  for (size_t i = 0; i < found.findings().size(); ++i) {
    Finding f = found.findings()[i];
    if (!f.fires() || !f.is("L7", Kind::ValidationTooGood)) continue;
    f.severity = Severity::Info;
    f.title += ", but in eval mode the trained model is right on " + fmt_num(100 * train_accuracy_eval) +
               "% of its stored training rows against " + fmt_num(100 * val_accuracy) + "% of validation";
    f.evidence.push_back({"training accuracy of the trained model (eval mode, stored rows)", train_accuracy_eval,
                          ">= validation - " + fmt_num(opts.val_accuracy_margin) + ": info"});
    f.cause =
        "the training steps see their batches changed at random (augmentation in the loop, dropout): the "
        "training accuracy measured during them is lower than the model's, and the splits agree";
    f.fix = "none needed";
    found.replace(i, f);
  }
}

void revise_overfitting_restored(Report& found, size_t best_epoch, double final_val_loss) {
  for (size_t i = 0; i < found.size(); ++i)
    if (found.findings()[i].fires() && found.findings()[i].is("L7", Kind::Overfitting))
      found.replace(i, detail::as_best_epoch_restored(found.findings()[i], best_epoch, final_val_loss,
                                                      "the gap of the epochs after it is not the final model's"));
}

void revise_overfitting(Report& found, const std::vector<double>& train_row_losses,
                        const std::vector<double>& val_row_losses, const LossCheckOptions& opts) {
  if (train_row_losses.size() < 2 || val_row_losses.size() < 2) return;
  const double vt = detail::mean_and_variance(train_row_losses).second;
  const double vv = detail::mean_and_variance(val_row_losses).second;
  const double se =
      std::sqrt(vt / static_cast<double>(train_row_losses.size()) + vv / static_cast<double>(val_row_losses.size()));
  if (!std::isfinite(se) || !(se > 0)) return;
  for (size_t i = 0; i < found.findings().size(); ++i) {
    Finding f = found.findings()[i];
    if (!f.fires() || !f.is("L7", Kind::Overfitting)) continue;
    double gap = kNaN;
    for (const Evidence& e : f.evidence)
      if (e.name == "gap = val - train") gap = e.value;
    if (!(gap <= opts.overfit_z * se)) continue;
    f.severity = Severity::Info;
    f.title += ", within " + fmt_num(opts.overfit_z) +
               " standard errors of the trained model's mean losses on the "
               "two splits (" +
               fmt_num(se) + ")";
    f.evidence.push_back(
        {"standard error of (validation - training) mean loss, each example's loss under the "
         "trained model",
         se, "gap <= " + fmt_num(opts.overfit_z) + " x this: info"});
    f.cause =
        "each example's loss varies so much (outlier targets, a heavy-tailed noise) that the validation split's "
        "mean moves by this much with the examples it happens to hold: the gap is its sample, not memorised "
        "training data";
    f.fix = "none needed; validate on more rows for a sharper comparison";
    found.replace(i, f);
  }
}

// The words L7's overfitting adds where the validation loss ended at its best (diagnose_fitting).
const std::string kEndsAtBest = ", but the validation loss ends at its best";

void revise_overfitting_by_batch_size(Report& found, double train_loss, double val_loss, int64_t train_batch,
                                      int64_t val_batch, const std::function<double()>& val_loss_at_train_batch,
                                      const LossCheckOptions& opts) {
  if (train_batch < 1 || val_batch == train_batch || !std::isfinite(train_loss) || !std::isfinite(val_loss) ||
      !(val_loss - train_loss > opts.overfit_gap))
    return;
  double rebatched = kNaN;
  for (size_t i = 0; i < found.findings().size(); ++i) {
    Finding f = found.findings()[i];
    // The warning, or the info of a validation loss that ended at its best: the batch's size says why.
    const size_t at_best = f.title.find(kEndsAtBest);
    if (!f.is("L7", Kind::Overfitting) || !(f.fires() || at_best != std::string::npos)) continue;
    if (std::isnan(rebatched)) rebatched = val_loss_at_train_batch();
    if (!std::isfinite(rebatched) || !(rebatched - train_loss <= opts.overfit_gap)) return;
    if (at_best != std::string::npos) f.title.erase(at_best);
    f.severity = Severity::Info;
    f.title += "; the loss depends on the batch's size: the validation split scored in batches of " + num(train_batch) +
               " rows, as training ran, sits " + fmt_num(rebatched - train_loss) + " above the training loss (" +
               fmt_num(val_loss - train_loss) + " in its own batches of " + num(val_batch) + ")";
    f.evidence.push_back(
        {"training loss under the trained model (eval mode, its batches of " + num(train_batch) + ")", train_loss, ""});
    f.evidence.push_back({"validation loss in its batches of " + num(val_batch), val_loss, ""});
    f.evidence.push_back({"validation loss in batches of " + num(train_batch), rebatched,
                          "within " + fmt_num(opts.overfit_gap) + " of the training loss: info"});
    f.cause =
        "the loss is taken over the batch as a whole (a partial likelihood over each batch's risk set, a "
        "contrastive loss over its negatives, a listwise ranking), so its value grows with the number of rows "
        "scored together: the two splits were scored in batches of different sizes, not a model that memorised";
    f.fix = "none needed; validate in batches of the training size to compare the two losses";
    found.replace(i, f);
  }
}

std::vector<Finding> diagnose_fitting(const std::vector<double>& train, const std::vector<double>& val,
                                      const LossCheckOptions& opts, double loss_unit) {
  if (!(loss_unit > 0) || !std::isfinite(loss_unit)) loss_unit = 1.0;
  const double underfit = opts.underfit_train_loss * loss_unit, overfit = opts.overfit_gap * loss_unit,
               normal_gap = opts.normal_gap * loss_unit, normal_train = opts.normal_train_loss * loss_unit;
  const int64_t E = static_cast<int64_t>(std::min(train.size(), val.size()));
  if (E == 0) return {};
  const int64_t k = std::clamp<int64_t>(opts.fitting_window, 1, E);
  double tr = 0.0, va = 0.0;
  for (int64_t e = E - k; e < E; ++e) {
    tr += train[static_cast<size_t>(e)];
    va += val[static_cast<size_t>(e)];
  }
  tr /= static_cast<double>(k);
  va /= static_cast<double>(k);
  if (!std::isfinite(tr) || !std::isfinite(va)) return {};  // L1 reports non-finite losses
  const double gap = va - tr;
  const std::string over = k == 1 ? "epoch " + num(E) : "epochs " + num(E - k + 1) + "-" + num(E);
  std::vector<Evidence> ev = {{"epochs", static_cast<double>(E), ""},
                              {"train loss (mean of " + over + ")", tr, ""},
                              {"val loss (mean of " + over + ")", va, ""},
                              {"gap = val - train", gap, ""}};
  if (loss_unit != 1.0)
    ev.push_back({"loss of predicting the training targets' mean (their variance)", loss_unit,
                  "the thresholds below are in this unit"});
  Finding f;
  if (tr > underfit && E > opts.min_epochs_underfit) {
    f = make("L7", Severity::Warning,
             "underfitting: the training loss is still " + fmt_num(tr) + " after " + num(E) + " epochs");
    f.kind = Kind::Underfitting;
    ev[1].rule = "> " + fmt_num(underfit) + " after > " + num(opts.min_epochs_underfit) + " epochs is underfitting";
    f.cause =
        "the model cannot fit even the training data: too little capacity, too little training, a "
        "learning rate too low or too high, or a bug that caps what it can learn (L1, O6, M16)";
    f.fix =
        "increase the model's capacity or training time; first check that it can overfit one batch "
        "(M14) and that a larger model gets lower (M16)";
  } else if (gap > overfit) {
    f = make("L7", Severity::Warning,
             "overfitting: the validation loss is " + fmt_num(gap) + " above the training loss");
    f.kind = Kind::Overfitting;
    ev[3].rule = "> " + fmt_num(overfit) + " is overfitting";
    f.cause =
        "the model memorises the training data; also rule out a validation set from another "
        "distribution or preprocessing (D10) and validation run in training mode (M2)";
    f.fix =
        "add regularisation (dropout, weight decay, augmentation) or more data; keep the best epoch "
        "(early stopping)";
    // A gap small beside the loss itself while the validation loss still falls at every one of the last
    // epochs: the model generalises less well than it fits, and still gains from training. A loss summed
    // over a sequence's tokens is large in these units.
    const auto at = [&](int64_t e) { return val[static_cast<size_t>(e)]; };
    const bool still_falling = E >= 4 && at(E - 1) < at(E - 2) && at(E - 2) < at(E - 3);
    if (still_falling && gap <= opts.overfit_relative_gap * tr) {
      f.severity = Severity::Info;
      f.title += ", but the validation loss still falls at each of the last epochs (" + fmt_num(at(E - 3)) + " -> " +
                 fmt_num(at(E - 1)) + ") and the gap is " + detail::pct(gap / tr) + " of the training loss";
      ev.push_back({"gap / train loss", gap / tr, "<= " + fmt_num(opts.overfit_relative_gap) + " with validation"});
      ev.push_back({"validation loss falling at each of the last 3 epochs", 1.0, "still falling: info"});
      f.cause = "a generalisation gap the run has not closed yet, not memorisation: validation still improves";
      f.fix = "none needed; train on while the validation loss falls";
    } else if (detail::ends_at_best(val, static_cast<size_t>(k))) {
      // Memorised, but the validation loss ends at its best: the gap has cost it nothing yet.
      const double lowest = *std::min_element(val.begin(), val.end());
      f.severity = Severity::Info;
      f.title += kEndsAtBest + (" (" + fmt_num(va) + " against its lowest epoch's ") + fmt_num(lowest) + ")";
      ev.push_back({"last epochs' validation loss / its lowest", va / lowest,
                    "the last epoch within 1% of it: at its best (info)"});
      f.cause = "the model fits its training data more closely than it generalises, and validation still improves";
      f.fix = "none needed; more data or regularisation may lower the validation loss further";
    }
  } else if (gap < normal_gap && tr < normal_train) {
    f = make("L7", Severity::Info, "normal convergence: low training loss and validation close to it");
    f.kind = Kind::FittingNormal;
    ev[3].rule = "< " + fmt_num(normal_gap) + " with train < " + fmt_num(normal_train) + " is normal";
    f.fix = "none needed";
  } else {
    f = make("L7", Severity::Info,
             "no verdict yet: keep watching (gap " + fmt_num(gap) + ", train " + fmt_num(tr) + ")");
    ev[3].rule = "overfitting above " + fmt_num(overfit) + "; normal below " + fmt_num(normal_gap) + " with train < " +
                 fmt_num(normal_train);
    f.fix = "train on and diagnose again after more epochs";
  }
  f.evidence = ev;
  return {f};
}

void soften_underfitting_of_own_loss(std::vector<Finding>& found) {
  for (Finding& f : found) {
    if (!f.fires() || !f.is("L7", Kind::Underfitting)) continue;
    f.severity = Severity::Info;
    f.title += " (a loss of the user's own: its scale and floor are its own, and no level of it says underfitting)";
    f.cause =
        "the underfitting rule reads the training loss on cross-entropy's scale; a likelihood, a loss with "
        "learned weights or any loss of the user's own keeps a floor of its own";
    f.fix = "compare the loss with its own floor (a constant or a perfect prediction); M14 says whether one batch fits";
  }
}

}  // namespace gradsleuth::debug
