// L9's home (debug/checks/loss/end_fit.h): its rules, thresholds and findings.
#include "debug/checks/loss/end_fit.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "core/format.h"
#include "debug/checks/check_util.h"

namespace gradsleuth::debug {

using detail::pct;

namespace {

Finding make(Kind k, Severity s, std::string title) {
  Finding f;
  f.check = "L9";
  f.kind = k;
  f.severity = s;
  f.title = std::move(title);
  f.end_of_run = true;
  return f;
}

// The split's ratio rules compare losses whose floor is 0 (cross-entropy, squared error): a loss that
// reaches 0 or below (a Gaussian or Poisson likelihood without its constant) has no such scale, and
// a ratio of its values means nothing.
bool positive_losses(const EndFitMeasure& m) {
  return std::isfinite(m.train_loss) && std::isfinite(m.val_loss) && m.train_loss > 0 && m.val_loss > 0;
}

// The validation predictions read as another numbering of the classes (EndFitOptions::remap_share).
struct Remap {
  bool found = false;
  double share = 0;   // rows whose prediction is their label's most frequent one
  int64_t moved = 0;  // labels whose most frequent prediction is another class
  std::string text;   // "0 -> 1, 1 -> 2, 2 -> 0"
};
Remap remapped(const EndFitMeasure& m, const EndFitOptions& o) {
  Remap r;
  const auto& c = m.val_confusion;
  int64_t rows = 0, mapped = 0;
  std::vector<int64_t> target;
  bool distinct = true;
  for (size_t label = 0; label < c.size(); ++label) {
    const auto& row = c[label];
    const int64_t n = std::accumulate(row.begin(), row.end(), int64_t{0});
    if (n == 0) continue;
    const size_t to = static_cast<size_t>(std::max_element(row.begin(), row.end()) - row.begin());
    rows += n;
    mapped += row[to];
    if (to == label) continue;
    distinct = distinct && std::find(target.begin(), target.end(), static_cast<int64_t>(to)) == target.end();
    target.push_back(static_cast<int64_t>(to));
    ++r.moved;
    if (r.moved <= 6) r.text += (r.text.empty() ? "" : ", ") + str_printf("%zu -> %zu", label, to);
  }
  if (r.moved > 6) r.text += ", ...";
  r.share = rows > 0 ? static_cast<double>(mapped) / static_cast<double>(rows) : 0;
  r.found = distinct && r.moved >= o.remap_classes && r.share >= o.remap_share;
  return r;
}

// The run's epochs beside a final model written after its last step (weights loaded after the run):
// its finite validation losses and accuracies, the epoch of the lowest loss and the highest accuracy.
struct RunEpochs {
  std::vector<double> vl, va;
  size_t best = 0;
  bool acc = false;  // accuracies for the epochs and the final model
  double best_acc = std::numeric_limits<double>::quiet_NaN();
};
// Empty (nullopt) where nothing was loaded after the run, or there are too few epochs to compare.
std::optional<RunEpochs> run_epochs(const EndFitMeasure& m) {
  RunEpochs e;
  e.vl = detail::finite_only(m.epoch_val_loss);
  if (!m.loaded_after_run || e.vl.size() < 2 || !std::isfinite(m.val_loss)) return std::nullopt;
  e.best = static_cast<size_t>(std::min_element(e.vl.begin(), e.vl.end()) - e.vl.begin());
  e.va = detail::finite_only(m.epoch_val_accuracy);
  e.acc = std::isfinite(m.val_accuracy) && !e.va.empty();
  if (e.acc) e.best_acc = *std::max_element(e.va.begin(), e.va.end());
  return e;
}

// Weights loaded after the run that score worse than the run's best and last epochs.
std::optional<Finding> restored_worse(const EndFitMeasure& m, const RunEpochs& e, const EndFitOptions& o) {
  const auto& [vl, va, best, acc, best_acc] = e;
  const double limit = (1 + o.restored_rise) * std::max(vl[best], 0.0);
  if (!(m.val_loss > limit && m.val_loss > (1 + o.restored_rise) * vl.back())) return std::nullopt;
  if (acc && !(m.val_accuracy < std::min(best_acc, va.back()) - o.restored_accuracy_drop)) return std::nullopt;
  Finding f = make(Kind::RestoredWorse, Severity::Warning,
                   "the weights loaded after the last step score worse than the run did: validation loss " +
                       str_printf("%.4g", m.val_loss) + " against " + str_printf("%.4g", vl[best]) + " at epoch " +
                       std::to_string(best + 1) + " and " + str_printf("%.4g", vl.back()) + " at the last" +
                       (acc ? ", accuracy " + pct(m.val_accuracy) + " against " + pct(best_acc) + " at best" : ""));
  f.evidence = {{"validation loss of the final model", m.val_loss, ""},
                {"best epoch's validation loss", vl[best],
                 "final > " + str_printf("%g", 1 + o.restored_rise) + " x this and x the last epoch's warns"},
                {"last epoch's validation loss", vl.back(), ""}};
  if (acc) {
    f.evidence.push_back({"validation accuracy of the final model", m.val_accuracy, ""});
    f.evidence.push_back({"best epoch's validation accuracy", best_acc,
                          "and final < both - " + str_printf("%g", o.restored_accuracy_drop)});
    f.evidence.push_back({"last epoch's validation accuracy", va.back(), ""});
  }
  f.cause =
      "the loop loaded weights after training (a checkpoint restored) that are neither the best epoch's nor "
      "the last: a 'best' comparator written the wrong way round keeps the worst checkpoint (accuracy compared as "
      "if it were a loss, or a loss as if it were an accuracy), or an earlier or stale file was loaded";
  f.fix =
      "keep a checkpoint when its validation loss is lower or its accuracy higher than the best so far "
      "(best = +inf for a loss, -inf for an accuracy), and check the file you load is the one you saved last";
  return f;
}
// Weights loaded after the run that are the last step's own values and score the last epoch's numbers,
// where an earlier epoch was clearly better by the loss and by the accuracy: a restore that brought back
// the last epoch. (An average copied in at the end, an EMA, changes the values: not a restore of the last.)
std::optional<Finding> restored_last(const EndFitMeasure& m, const RunEpochs& e, const EndFitOptions& o) {
  const auto& [vl, va, best, acc, best_acc] = e;
  if (!m.loaded_unchanged || !(vl.back() > 0)) return std::nullopt;
  const bool same_loss = std::fabs(m.val_loss - vl.back()) <= o.restored_same * vl.back();
  if (!same_loss || !(vl.back() > (1 + o.restored_rise) * std::max(vl[best], 0.0))) return std::nullopt;
  // Kept by the accuracy, the last epoch can be the best one (or tie with it): then it is the one to restore.
  const double one_row = 1.0 / static_cast<double>(std::max<int64_t>(m.val_examples, 1));
  if (acc && !(best_acc - va.back() > 0.5 * one_row)) return std::nullopt;
  // The final model is a trained one, above chance (the loop did not re-initialise the weights at the end).
  const size_t C = m.val_confusion.size();
  const bool trained = acc && C >= 2 ? m.val_accuracy > 1.5 / static_cast<double>(C)
                                     : std::isfinite(m.run_initial_loss) && m.val_loss < 0.9 * m.run_initial_loss;
  if (!trained) return std::nullopt;
  Finding f = make(Kind::RestoredLast, Severity::Warning,
                   "the weights loaded after the last step are the last epoch's (validation loss " +
                       str_printf("%.4g", m.val_loss) + ", as at the last epoch), not the best epoch's (" +
                       str_printf("%.4g", vl[best]) + " at epoch " + std::to_string(best + 1) +
                       (acc ? ", accuracy " + pct(best_acc) + " at best against " + pct(va.back()) : std::string()) +
                       "): the restore restored nothing");
  f.evidence = {{"validation loss of the final model", m.val_loss, ""},
                {"last epoch's validation loss", vl.back(),
                 "the final within " + str_printf("%g", o.restored_same) + " of it and"},
                {"best epoch's validation loss", vl[best],
                 "the last > " + str_printf("%g", 1 + o.restored_rise) + " x this and"}};
  if (acc) {
    f.evidence.push_back({"best epoch's validation accuracy", best_acc, ""});
    f.evidence.push_back({"last epoch's validation accuracy", va.back(), "below the best (not tied) warns"});
  }
  f.cause =
      "the best epoch's snapshot shares storage with the parameters (tensors kept with detach() or a "
      "reference to the state dict, not clone()), so it followed every later update and the restore copied the "
      "last epoch onto itself; or the file loaded is the last one saved, not the best";
  f.fix =
      "keep the snapshot as copies (p.detach().clone() for each parameter and buffer, or nn::save to a file), "
      "and check the restored model's validation loss against the best epoch's";
  return f;
}

// The loop's own validation accuracy far below the trained model's on the same split: its metric code,
// not the model, is wrong.
std::optional<Finding> reported_accuracy_low(const EndFitMeasure& m, const EndFitOptions& o) {
  const std::vector<double> reports = detail::finite_only(m.epoch_val_accuracy);
  const double reported = reports.empty() ? std::nan("") : reports.back();
  if (m.loaded_after_run || !std::isfinite(reported) || !std::isfinite(m.val_accuracy) || m.val_examples <= 0)
    return std::nullopt;
  // The trained model's balanced accuracy and macro F1, from its confusion counts.
  double recall_sum = 0, f1_sum = 0;
  int64_t classes = 0;
  const size_t C = m.val_confusion.size();
  for (size_t k = 0; k < C; ++k) {
    int64_t rows = 0, predicted = 0;
    for (size_t j = 0; j < C && j < m.val_confusion[k].size(); ++j) rows += m.val_confusion[k][j];
    for (size_t i = 0; i < C; ++i)
      if (k < m.val_confusion[i].size()) predicted += m.val_confusion[i][k];
    if (rows == 0) continue;
    const double hit = k < m.val_confusion[k].size() ? static_cast<double>(m.val_confusion[k][k]) : 0.0;
    ++classes;
    recall_sum += hit / static_cast<double>(rows);
    f1_sum += 2 * hit / static_cast<double>(rows + predicted);
  }
  const double balanced = classes ? recall_sum / static_cast<double>(classes) : m.val_accuracy;
  const double macro_f1 = classes ? f1_sum / static_cast<double>(classes) : m.val_accuracy;
  const bool exact = std::isfinite(m.val_exact_match);
  const double own = std::min({m.val_accuracy, balanced, macro_f1, exact ? m.val_exact_match : m.val_accuracy});
  const double se = std::sqrt(std::max(2 * own * (1 - own), 1e-12) / static_cast<double>(m.val_examples));
  const double z = (own - reported) / se;
  if (!(own - reported >= o.reported_accuracy_gap && z >= o.reported_accuracy_z)) return std::nullopt;
  Finding f = make(Kind::ReportedAccuracyLow, Severity::Warning,
                   "the loop reported a validation accuracy of " + pct(reported) +
                       " for its last epoch, while the trained model scores " + pct(m.val_accuracy) +
                       " on the same split: the loop's metric does not measure the model");
  f.evidence = {
      {"validation accuracy the loop reported (last epoch)", reported, ""},
      {"validation accuracy of the trained model (the Session's pass, eval mode)", m.val_accuracy, ""},
      {"its balanced accuracy (mean recall per class)", balanced, ""},
      {"its macro F1", macro_f1, ""},
      {"the least of the three - reported", own - reported, ">= " + str_printf("%g", o.reported_accuracy_gap) + " and"},
      {"z (that difference / sqrt(2 p (1 - p) / n))", z, ">= " + str_printf("%g", o.reported_accuracy_z) + " warns"}};
  if (exact) {
    f.evidence.insert(f.evidence.begin() + 4,
                      {"its exact-match accuracy (every target of an example right)", m.val_exact_match, ""});
    f.evidence[5].name = "the least of the four - reported";
  }
  f.cause =
      "the evaluation code pairs predictions with the wrong labels (predictions and labels collected in two "
      "passes over a shuffled loader, concatenated in different orders), compares the wrong tensors (logits "
      "against one-hot rows, argmax over the batch axis), averages per batch with the wrong weights, or changes "
      "the inputs the model sees (a test-time augmentation along the wrong axis, the model left in training "
      "mode)";
  f.fix =
      "compute predictions and labels from the same batch in one pass (pred = argmax(model(b.x), 1) beside b.y), "
      "with the model in eval mode, and compare with the accuracy the Session reports";
  return f;
}
}  // namespace

std::vector<Finding> check_end_fit(const EndFitMeasure& m, const EndFitOptions& o, bool* still_falling, bool* unread) {
  std::vector<Finding> out;
  // The final model is not the one the run trained: the verdicts on its fit would be about the wrong weights.
  if (const std::optional<RunEpochs> e = run_epochs(m)) {
    std::optional<Finding> f = restored_worse(m, *e, o);
    if (!f) f = restored_last(m, *e, o);
    if (f) {
      out.push_back(std::move(*f));
      return out;
    }
  }
  if (std::optional<Finding> f = reported_accuracy_low(m, o)) out.push_back(std::move(*f));
  const bool acc = std::isfinite(m.train_accuracy) && std::isfinite(m.val_accuracy);
  // The two-proportion z statistic of the accuracies (pooled).
  double z = 0;
  if (acc && m.train_examples > 0 && m.val_examples > 0) {
    const double nt = static_cast<double>(m.train_examples), nv = static_cast<double>(m.val_examples);
    const double p = (m.train_accuracy * nt + m.val_accuracy * nv) / (nt + nv);
    const double se = std::sqrt(std::max(p * (1 - p), 1e-12) * (1 / nt + 1 / nv));
    z = std::abs(m.val_accuracy - m.train_accuracy) / se;
  }
  auto split_evidence = [&](Finding& f) {
    if (acc) {
      f.evidence.push_back({"training accuracy (eval mode)", m.train_accuracy, ""});
      f.evidence.push_back({"validation accuracy", m.val_accuracy, ""});
    }
    f.evidence.push_back({"training loss (eval mode)", m.train_loss, ""});
    f.evidence.push_back({"validation loss", m.val_loss, ""});
    f.evidence.push_back({"training examples", static_cast<double>(m.train_examples), ""});
    f.evidence.push_back({"validation examples", static_cast<double>(m.val_examples), ""});
  };
  if (acc && m.val_accuracy - m.train_accuracy > o.labels_margin && z >= o.min_z) {
    Finding f = make(Kind::TrainLabelsDisagree, Severity::Warning,
                     "the trained model is right on " + pct(m.val_accuracy) + " of validation but only " +
                         pct(m.train_accuracy) + " of its own training data: the training labels disagree with it");
    split_evidence(f);
    f.evidence.push_back({"validation - training accuracy", m.val_accuracy - m.train_accuracy,
                          "> " + str_printf("%g", o.labels_margin) + " and"});
    f.evidence.push_back({"z (two proportions)", z, ">= " + str_printf("%g", o.min_z) + " warns"});
    f.cause =
        "a share of the training labels is wrong (labels changed, shifted or noisy in the training split only), or the "
        "training inputs are corrupted (noise added to the training split): a model fits clean training data at least "
        "as "
        "well as data it never saw";
    f.fix =
        "look at the training examples the trained model gets wrong with high confidence: relabel or drop them, and "
        "check that the training split is built like the validation one";
    out.push_back(f);
  } else if (const Remap map = remapped(m, o);
             acc && m.train_accuracy - m.val_accuracy > o.gap_margin && z >= o.min_z && map.found) {
    Finding f = make(Kind::ValLabelsRemapped, Severity::Warning,
                     "the trained model is right on " + pct(m.train_accuracy) + " of its training data and " +
                         pct(m.val_accuracy) +
                         " of validation, and its validation predictions follow another "
                         "numbering of the classes (" +
                         map.text +
                         "): the validation labels are numbered in "
                         "another order");
    split_evidence(f);
    f.evidence.push_back({"validation rows whose prediction is their label's most frequent one", map.share,
                          ">= " + str_printf("%g", o.remap_share) + " and"});
    f.evidence.push_back(
        {"classes predicted as one other class", static_cast<double>(map.moved),
         ">= " + str_printf("%lld", static_cast<long long>(o.remap_classes)) + ", no two the same: warns"});
    f.cause =
        "the validation split's labels were encoded with another class order than the training split's: a "
        "label map built twice (from a set or a directory listing in another order), or one split's classes "
        "renumbered";
    f.fix =
        "build the class-to-index map once, from the training split, and encode every split with it; then "
        "check a few validation examples with their labels";
    out.push_back(f);
  } else if (acc && m.train_accuracy - m.val_accuracy > o.gap_margin && z >= o.min_z) {
    // Validation rows of classes training never met explain the gap when the other rows show none (D15).
    const bool unseen = m.val_unseen_rows > 0 && !(m.train_accuracy - m.val_seen_accuracy > o.gap_margin);
    Finding f = make(Kind::GeneralisationGap, unseen ? Severity::Info : Severity::Warning,
                     "the trained model is right on " + pct(m.train_accuracy) + " of its training data but " +
                         pct(m.val_accuracy) + " of validation" +
                         (unseen ? ", " + pct(m.val_seen_accuracy) + " on the classes training has: the gap is the " +
                                       std::to_string(m.val_unseen_rows) + " rows of classes it never had"
                                 : ": it memorised the training split"));
    split_evidence(f);
    f.evidence.push_back({"training - validation accuracy", m.train_accuracy - m.val_accuracy,
                          "> " + str_printf("%g", o.gap_margin) + " and"});
    f.evidence.push_back({"z (two proportions)", z, ">= " + str_printf("%g", o.min_z) + " warns"});
    f.cause =
        "too little training data for the model, or too little regularisation (weight decay, dropout, "
        "augmentation, early stopping)";
    f.fix = "more training data, or more regularisation; keep the epoch with the best validation score";
    out.push_back(f);
  } else if (!acc && positive_losses(m) && m.val_loss > o.gap_loss_ratio * m.train_loss &&
             m.val_loss - m.train_loss > o.gap_loss_min) {
    Finding f = make(Kind::GeneralisationGap, Severity::Warning,
                     "the trained model's validation loss is " + str_printf("%.3g", m.val_loss / m.train_loss) +
                         "x its training loss (both in eval mode): it memorised the training split");
    split_evidence(f);
    f.evidence.push_back({"validation / training loss", m.val_loss / m.train_loss,
                          "> " + str_printf("%g", o.gap_loss_ratio) + " warns"});
    f.cause = "too little training data for the model, or too little regularisation";
    f.fix = "more training data, or more regularisation; keep the epoch with the best validation score";
    // The gap has cost validation nothing yet: the last epoch within 1% of the lowest, or within two standard
    // errors of the validation mean (each example's loss).
    const double se = m.val_row_losses.size() >= 2 ? std::sqrt(detail::mean_and_variance(m.val_row_losses).second /
                                                               static_cast<double>(m.val_row_losses.size()))
                                                   : 0.0;
    if (detail::ends_at_best(m.epoch_val_loss, 1, 2.0 * se)) {
      f.severity = Severity::Info;
      f.title +=
          ", but its validation loss ended the run at its best (within 1%, or two standard errors, of its "
          "lowest epoch)";
      f.fix = "none needed; more data or regularisation may lower the validation loss further";
    }
    out.push_back(f);
  }
  if (!acc && out.empty()) out = check_loss_split(m, o);
  // The learning-curve probe (run when the split rule is quiet and training beats validation): the
  // same steps on a share of the training examples. Validation still losing with fewer examples
  // says the run's own size is on the steep part of its learning curve.
  const bool fewer_run = std::isfinite(m.fewer_val_loss);
  const bool fewer_counted = m.fewer_broken >= 0 && m.fewer_fixed >= 0;
  const double fewer_z = fewer_counted ? detail::mcnemar_z(m.fewer_broken, m.fewer_fixed) : 0.0;
  const bool fewer_acc = fewer_run && acc && std::isfinite(m.all_val_accuracy) && std::isfinite(m.fewer_val_accuracy) &&
                         fewer_counted;
  const double fewer_drop = fewer_acc ? m.all_val_accuracy - m.fewer_val_accuracy : std::nan("");
  const double fewer_rise =
      fewer_run && std::isfinite(m.all_val_loss) && m.all_val_loss > 0 ? m.fewer_val_loss / m.all_val_loss : std::nan("");
  // The repeat on all the examples stands for the run; where it falls short of the run's own score (a
  // momentum or a loop step the repeat does not replay), the shortfall is added to the bar, since both
  // repeats leave out the same thing.
  const double repeat_short_acc = fewer_acc ? std::max(0.0, m.val_accuracy - m.all_val_accuracy) : 0.0;
  const double repeat_short_loss =
      std::isfinite(m.all_val_loss) && m.val_loss > 0 ? std::max(1.0, m.all_val_loss / m.val_loss) : 1.0;
  const bool steep = out.empty() && fewer_run &&
                     (fewer_acc ? fewer_drop > o.data_drop + repeat_short_acc && fewer_z >= o.data_min_z
                                : !acc && !m.class_labels && fewer_rise > o.data_loss_rise * repeat_short_loss &&
                                      m.fewer_val_loss - m.all_val_loss > o.data_min_loss);
  // Examples lost: a training split smaller than the validation split it is scored on (a filter, a
  // subsample left in, the split's shares reversed). A larger training split on the steep part of its
  // curve is a data set smaller than the task needs, which no change to the program fixes (info).
  const bool lost = m.train_examples > 0 && m.val_examples > 0 && m.train_examples < m.val_examples && !m.pretrained;
  const bool data_short = steep && lost;
  auto fewer_evidence = [&](Finding& f) {
    const std::string share = pct(m.fewer_share);
    if (fewer_acc) {
      f.evidence.push_back({"validation accuracy after the run repeated on all the training examples",
                            m.all_val_accuracy, ""});
      f.evidence.push_back({"validation accuracy after the run repeated on " + share + " of them",
                            m.fewer_val_accuracy, ""});
      f.evidence.push_back({"validation accuracy lost with fewer training examples", fewer_drop,
                            "> " + str_printf("%g", o.data_drop) + " + the repeat's shortfall and"});
      f.evidence.push_back(
          {"the repeat on all of them short of the run's own validation accuracy", repeat_short_acc, ""});
      f.evidence.push_back({"validation examples the run gets right and the probe wrong",
                            static_cast<double>(m.fewer_broken), ""});
      f.evidence.push_back({"validation examples the probe gets right and the run wrong",
                            static_cast<double>(m.fewer_fixed), ""});
      f.evidence.push_back(
          {"McNemar z of those (fewer examples)", fewer_z, ">= " + str_printf("%g", o.data_min_z) + " warns"});
    } else {
      f.evidence.push_back(
          {"validation loss after the run repeated on all the training examples", m.all_val_loss, ""});
      f.evidence.push_back({"validation loss after the run repeated on " + share + " of them", m.fewer_val_loss, ""});
      f.evidence.push_back({"validation loss with fewer training examples / with all", fewer_rise,
                            "> " + str_printf("%g", o.data_loss_rise) +
                                " x (the repeat's / the run's validation loss, at least 1) warns, for "
                                "targets that are not class ids"});
    }
  };
  if (data_short) {
    Finding f =
        make(Kind::GeneralisationGap, Severity::Warning,
             fewer_acc ? "the trained model is right on " + pct(m.train_accuracy) + " of its training data and " +
                             pct(m.val_accuracy) + " of validation; the run repeated on " + pct(m.fewer_share) +
                             " of its training examples reaches " + pct(m.fewer_val_accuracy) +
                             " of validation, against " + pct(m.all_val_accuracy) +
                             " on all of them: validation still gains from every example: too little "
                             "training data"
                       : "the run repeated on " + pct(m.fewer_share) +
                             " of its training examples ends at a validation loss of " +
                             str_printf("%.3g", m.fewer_val_loss) + ", against " + str_printf("%.3g", m.all_val_loss) +
                             " on all of them: validation still gains from every example: too little "
                             "training data");
    split_evidence(f);
    fewer_evidence(f);
    f.evidence.push_back({"training examples / validation examples",
                          static_cast<double>(m.train_examples) / static_cast<double>(m.val_examples),
                          "< 1 warns (examples lost)"});
    f.cause =
        "too little training data for the model: examples lost to a filter, a split or a sample (the training "
        "split is smaller than the validation split it is scored on, and the validation score still climbs with "
        "the training set's size)";
    f.fix =
        "find where training examples are dropped (filters, the split's shares, a subsample); gather more data or "
        "augment it; failing that, a smaller model or more regularisation";
    out.push_back(f);
  }
  if (out.empty() && (acc || (std::isfinite(m.train_loss) && std::isfinite(m.val_loss)))) {
    Finding f = make(Kind::FitMeasured, Severity::Info,
                     acc ? "the trained model is right on " + pct(m.train_accuracy) + " of its training data and " +
                               pct(m.val_accuracy) + " of validation"
                         : "the trained model's loss is " + str_printf("%.4g", m.train_loss) +
                               " on its training data and " + str_printf("%.4g", m.val_loss) + " on validation");
    split_evidence(f);
    if (!acc) add_loss_split_evidence(f, m, o);
    if (fewer_run) fewer_evidence(f);
    if (steep) {
      f.title += m.pretrained ? "; validation still gains from every training example (a pretrained model "
                                "fine-tuned on few examples)"
                              : "; validation still gains from every training example (a data set smaller than the "
                                "task needs)";
      f.evidence.push_back({"training examples / validation examples",
                            static_cast<double>(m.train_examples) / static_cast<double>(m.val_examples),
                            m.pretrained ? "most weights loaded by nn::load: few examples by design (info)"
                                         : "< 1 warns (examples lost); a larger training split is info"});
    }
    out.push_back(f);
  }

  // Still falling at the end.
  const auto& e = m.epoch_train_loss;
  const size_t n = e.size();
  const auto& v = m.epoch_val_loss;
  bool falling = false;
  double drop = 0, val_drop = 0, pace = std::nan("");
  // Windows of w epochs (2 from 4 epochs on, so one epoch's wobble is not a trend): the last against
  // the one before.
  const size_t w = n >= 4 ? 2 : 1;
  auto window = [&](const std::vector<double>& x, size_t end) {
    double sum = 0;
    for (size_t i = end - w; i < end; ++i) sum += x[i];
    return sum / static_cast<double>(w);
  };
  auto finite = [](const std::vector<double>& x) {
    return std::all_of(x.begin(), x.end(), [](double d) { return std::isfinite(d) && d > 0; });
  };
  if (static_cast<int64_t>(n) >= o.min_epochs && v.size() == n && finite(e) && finite(v)) {
    const double e_now = window(e, n), e_before = window(e, n - w), v_now = window(v, n), v_before = window(v, n - w);
    drop = (e_before - e_now) / e_before;
    val_drop = (v_before - v_now) / v_before;
    // the run's mean relative drop per window
    pace = (v[0] - v[n - 1]) / v[0] / static_cast<double>(n - 1) * static_cast<double>(w);
    // A run that barely moved (it kept more than barely_kept of its first loss) counts as still falling
    // on any steady drop: its whole curve is the slope.
    const bool barely = m.run_window_loss > o.barely_kept * m.run_first_loss;
    const double need_train = barely ? o.barely_falling : o.still_falling;
    const double need_val = barely ? o.barely_falling : o.still_falling_val;
    const bool steady = !barely && val_drop >= o.still_steady * pace && val_drop > o.still_falling;
    falling = drop > need_train && (val_drop > need_val || steady) && val_drop > o.still_pace * pace;
    const auto& a = m.epoch_val_accuracy;
    if (falling && a.size() == n && std::all_of(a.begin(), a.end(), [](double d) { return std::isfinite(d); }))
      falling = window(a, n) - window(a, n - w) >= (barely ? 0.0 : o.still_rising_accuracy);
  }
  if (still_falling) *still_falling = falling;
  // The curve's end, read whatever the verdict, in the info finding: where the healthy runs sit against
  // the still-falling rule (`gradsleuth corpus --null` collects it).
  if (!falling && std::isfinite(pace) && pace > 0)
    for (Finding& f : out)
      if (f.kind == Kind::FitMeasured) {
        f.evidence.push_back({"validation loss's drop, the last epochs against the ones before", val_drop,
                              "> " + str_printf("%g", o.still_falling_val) + ", with the rule's other conditions, is still falling"});
        f.evidence.push_back({"that drop / the run's mean drop per window", val_drop / pace,
                              ">= " + str_printf("%g", o.still_steady) + " with a drop > " + str_printf("%g", o.still_falling) +
                                  " is a straight curve, still falling"});
      }
  // The epoch curve cannot tell whether the run had finished: one epoch recorded, or a schedule that
  // took the rate to near zero (the curve flattens because the rate did), or a run of fewer optimizer
  // steps than few_steps whose epochs are shorter than min_epoch_steps (each point of the curve is a
  // step or two, no average: the whole training set in one batch).
  const bool one_epoch = n >= 1 && static_cast<int64_t>(n) < o.min_epochs;
  const bool few = m.run_steps > 0 && m.run_steps < o.few_steps && n >= 1 &&
                   m.run_steps < o.min_epoch_steps * static_cast<int64_t>(n);
  const double lr_left =
      std::isfinite(m.final_lr) && std::isfinite(m.peak_lr) && m.peak_lr > 0 ? m.final_lr / m.peak_lr : std::nan("");
  const bool annealed = std::isfinite(lr_left) && lr_left < o.annealed_lr;
  const bool curve_unread = !falling && (one_epoch || annealed || few) && std::isfinite(m.val_loss);
  if (unread) *unread = curve_unread;
  // Training on (as many steps again) confirms "undertrained": the validation loss falls by `gain` of
  // its value and by continue_min_gain, and (classification) more validation examples turn right than
  // wrong, by a McNemar z of continue_min_z.
  const bool counted = m.continued_fixed >= 0 && m.continued_broken >= 0;
  const double mcnemar_z = counted ? detail::mcnemar_z(m.continued_fixed, m.continued_broken) : 0.0;
  // The share of the run's whole improvement, from its first loss to the validation loss after training
  // on, that was still to come at its end.
  const double share_left = std::isfinite(m.continued_val_loss) && std::isfinite(m.val_loss) &&
                                    std::isfinite(m.run_first_loss) && m.run_first_loss > m.continued_val_loss
                                ? (m.val_loss - m.continued_val_loss) / (m.run_first_loss - m.continued_val_loss)
                                : std::nan("");
  // ... and of the improvement from the run's first step (its initial weights).
  const double share_from_start =
      std::isfinite(m.continued_val_loss) && std::isfinite(m.val_loss) && std::isfinite(m.run_initial_loss) &&
              m.run_initial_loss > m.continued_val_loss
          ? (m.val_loss - m.continued_val_loss) / (m.run_initial_loss - m.continued_val_loss)
          : std::nan("");
  // Without accuracies: the paired z of the validation examples' losses, before training on against after.
  const double paired_z = detail::paired_z(m.val_row_losses, m.continued_val_row_losses);
  // ... and the lowest validation loss of the run's epochs: a noisy curve's end can sit above its own
  // best epoch, and a model trained on only moves elsewhere in that noise; the paired z counts the
  // examples, not the iterates.
  double best_val = std::nan("");
  for (double x : v)
    if (std::isfinite(x) && !(x >= best_val)) best_val = x;
  // Under continue_min_z squared validation examples wrong at the end, no count could confirm, and a
  // model that gets (nearly) all of them right has nothing left to learn that its accuracy shows.
  const double wrong_at_end = counted && std::isfinite(m.val_accuracy) && m.val_examples > 0
                                  ? (1 - m.val_accuracy) * static_cast<double>(m.val_examples)
                                  : std::nan("");
  const bool accuracy_has_room = !(wrong_at_end < o.continue_min_z * o.continue_min_z - 0.5);
  // `curve_falls`: the epoch curve still fell at the end, so a large share left stands for the floor in
  // loss units (continue_share) and, from the first step, for the count (continue_share_alone).
  auto training_on_helps = [&](double gain, bool curve_falls) {
    if (!std::isfinite(m.continued_val_loss) || !std::isfinite(m.val_loss) ||
        !(m.continued_val_loss < (1 - gain) * m.val_loss))
      return false;
    const bool floor = m.val_loss - m.continued_val_loss > o.continue_min_gain ||
                       (curve_falls && share_left >= o.continue_share) ||
                       (curve_falls && !counted && paired_z >= o.continue_paired_z &&
                        m.continued_val_loss < (1 - gain) * best_val && share_left >= o.continue_share_paired);
    const bool count = !counted || mcnemar_z >= o.continue_min_z ||
                       (curve_falls && accuracy_has_room && share_from_start >= o.continue_share_alone);
    return floor && count;
  };
  auto continued_evidence = [&](Finding& f, double gain, const std::string& which, bool curve_falls) {
    f.evidence.push_back({"validation loss at the end", m.val_loss, ""});
    f.evidence.push_back({"validation loss after as many steps again (" +
                              str_printf("%lld", static_cast<long long>(o.continue_min_steps)) + " at least" + which +
                              ", the run's schedule replayed)",
                          m.continued_val_loss,
                          "< " + str_printf("%g", 1 - gain) + " x the end's: undertrained (warns)"});
    if (counted) {
      f.evidence.push_back(
          {"validation examples turned right by training on", static_cast<double>(m.continued_fixed), ""});
      f.evidence.push_back(
          {"validation examples turned wrong by training on", static_cast<double>(m.continued_broken), ""});
      f.evidence.push_back({"McNemar z of those", mcnemar_z, ">= " + str_printf("%g", o.continue_min_z) + " and"});
    }
    if (curve_falls && std::isfinite(share_left))
      f.evidence.push_back({"share of the run's improvement (first loss to after training on) still to come",
                            share_left,
                            ">= " + str_printf("%g", o.continue_share) + " in place of the loss floor" +
                                (counted ? std::string() : " (" + str_printf("%g", o.continue_share_paired) +
                                                               " with the paired z below)")});
    if (curve_falls && !counted && std::isfinite(paired_z)) {
      f.evidence.push_back({"paired z of the validation examples' losses, the end against after training on",
                            paired_z, ">= " + str_printf("%g", o.continue_paired_z) + " and"});
      f.evidence.push_back({"the run's lowest validation loss over its epochs", best_val,
                            "training on below " + str_printf("%g", 1 - gain) +
                                " x it too: in place of the loss floor"});
    }
    if (curve_falls && std::isfinite(share_from_start))
      f.evidence.push_back({"share of the improvement from the first step's loss still to come", share_from_start,
                            ">= " + str_printf("%g", o.continue_share_alone) + " in place of the count too"});
    if (curve_falls && std::isfinite(share_from_start) && std::isfinite(wrong_at_end))
      f.evidence.push_back(
          {"validation examples wrong at the end", wrong_at_end,
           ">= " + str_printf("%g", o.continue_min_z * o.continue_min_z) + " for the share to stand in"});
  };
  if (curve_unread && training_on_helps(o.unread_gain, false) && std::isfinite(m.continued_val_loss)) {
    const std::string why =
        one_epoch ? "it has one epoch"
        : annealed
            ? "its schedule ended at " + pct(lr_left) + " of its peak learning rate"
            : str_printf("it took %lld optimizer steps in %zu epochs", static_cast<long long>(m.run_steps), n);
    Finding f = make(Kind::Undertrained, m.clipping_caps_steps ? Severity::Info : Severity::Warning,
                     "the run's curve cannot say whether it had finished (" + why +
                         "), and training on (as many steps again, " +
                         str_printf("%lld", static_cast<long long>(o.continue_min_steps)) +
                         " at least) lowers the validation loss by " +
                         pct(1 - m.continued_val_loss / m.val_loss) + ": the model is undertrained");
    f.evidence.push_back({"epochs", static_cast<double>(n), ""});
    if (few) {
      f.evidence.push_back({"optimizer steps in the run", static_cast<double>(m.run_steps),
                            "< " + str_printf("%lld", static_cast<long long>(o.few_steps)) + " and"});
      f.evidence.push_back({"optimizer steps per epoch", static_cast<double>(m.run_steps) / static_cast<double>(n),
                            "< " + str_printf("%lld", static_cast<long long>(o.min_epoch_steps)) +
                                ": the curve cannot tell"});
    }
    if (annealed)
      f.evidence.push_back({"last learning rate / the run's peak", lr_left,
                            "< " + str_printf("%g", o.annealed_lr) + ": the schedule annealed"});
    continued_evidence(f, o.unread_gain, ": the curve cannot tell", false);
    if (m.clipping_caps_steps)
      f.evidence.push_back({"gradient clipping active at nearly every step (O9)", 1,
                            "info: the clipping, not the step count, caps the progress"});
    f.cause =
        "too few optimizer steps: too few epochs, batches too large for the data (few steps per epoch), or a "
        "schedule that anneals the learning rate before the model has learned";
    f.fix =
        "train for more steps (more epochs, smaller batches), the schedule stretched over them, until the "
        "validation loss levels off";
    out.push_back(f);
  }
  if (falling) {
    // The run at the probe's own steps.
    const double run_then = std::isfinite(m.run_probe_window_loss) ? m.run_probe_window_loss : m.run_window_loss;
    const bool probed = std::isfinite(m.probe_window_loss) && std::isfinite(run_then);
    // 10x the rate reaches what the rule asks in the same steps.
    // ... and beats the same steps at the run's own rate taken the probe's way, where that was run.
    const bool repeated = std::isfinite(m.repeat_window_loss);
    const bool probe_beats_run = probed && m.probe_window_loss < o.probe_better * run_then &&
                                 run_then - m.probe_window_loss > o.probe_min_gain &&
                                 (!repeated || (m.probe_window_loss < o.probe_better * m.repeat_window_loss &&
                                                m.repeat_window_loss - m.probe_window_loss > o.probe_min_gain));
    const bool rate_helps = probe_beats_run && !(m.run_window_loss < o.lr_low_kept * m.run_first_loss);
    // A short run (fewer than few_steps): probe_factor x the steps at the run's own rates doing what
    // probe_factor x the rate does clears the rate: the steps are too few.
    const bool steps_probed = std::isfinite(m.steps_probe_window_loss);
    const bool steps_help = rate_helps && steps_probed &&
                            m.steps_probe_window_loss < o.probe_better * m.run_window_loss &&
                            m.run_window_loss - m.steps_probe_window_loss > o.probe_min_gain;
    const bool lr_low = rate_helps && !steps_help;
    // "Undertrained" warns only when training on (or the steps probe) confirms it; unconfirmed it
    // stays info: a budget that ends before the curve flattens can be a choice.
    const bool more_helps = steps_help || (!lr_low && training_on_helps(o.continue_gain, true));
    Finding f =
        make(lr_low ? Kind::LrProbeTooLow : Kind::Undertrained,
             (lr_low || more_helps) && !m.clipping_caps_steps ? Severity::Warning : Severity::Info,
             lr_low ? "training ended while the loss still fell (" + pct(drop) + " over the last epochs), and at " +
                          str_printf("%g", o.probe_factor) + "x the learning rate the same steps reach a loss " +
                          pct(1 - m.probe_window_loss / run_then) + " lower: the learning rate is too low"
             : steps_help
                 ? "training ended while the loss still fell (" + pct(drop) + " over the last epochs), and " +
                       str_printf("%g", o.probe_factor) + "x the steps at the run's own learning rate reach a loss " +
                       pct(1 - m.steps_probe_window_loss / m.run_window_loss) + " lower (" +
                       str_printf("%g", o.probe_factor) +
                       "x the rate: " + pct(1 - m.probe_window_loss / run_then) +
                       "): the steps, not the rate, are too few: the model is undertrained"
                 : "training ended while the loss still fell (" + pct(drop) + " over the last epochs, validation " +
                       pct(val_drop) + "): the model is undertrained");
    f.evidence.push_back({"last epoch's training loss", e[n - 1], ""});
    f.evidence.push_back({"the epoch before", e[n - 2], ""});
    f.evidence.push_back({"training loss's drop, last epochs against the ones before", drop,
                          "> " + str_printf("%g", o.still_falling) + " and"});
    f.evidence.push_back({"validation loss's drop, likewise", val_drop,
                          "> " + str_printf("%g", o.still_falling_val) + " (or > " + str_printf("%g", o.still_falling) +
                              " at " + str_printf("%g", o.still_steady) + " x the mean per window: a straight curve) and > " +
                              str_printf("%g", o.still_pace) + " x the mean per window"});
    if (probed) {
      f.evidence.push_back({"probe steps", static_cast<double>(m.probe_steps), ""});
      f.evidence.push_back({"run's loss over its first steps", m.run_first_loss, ""});
      f.evidence.push_back({"run's loss over its last steps", m.run_window_loss,
                            "> " + str_printf("%g", o.lr_low_kept) + " x its first loss, and"});
      if (std::isfinite(m.run_probe_window_loss))
        f.evidence.push_back({"run's loss over the probe's last steps (the same step numbers)", m.run_probe_window_loss, ""});
      f.evidence.push_back({str_printf("loss at %gx the learning rate", o.probe_factor), m.probe_window_loss,
                            "< " + str_printf("%g", o.probe_better) + " x the run's at the same steps: the lr is too low"});
      if (repeated)
        f.evidence.push_back({"loss at the run's first learning rate, the probe's way (plain loader batches)",
                              m.repeat_window_loss,
                              "the probe's loss < " + str_printf("%g", o.probe_better) + " x this too"});
    }
    if (steps_probed)
      f.evidence.push_back({str_printf("loss at %gx the steps, the run's own learning rate", o.probe_factor),
                            m.steps_probe_window_loss,
                            "< " + str_printf("%g", o.probe_better) + " x the run's: the steps are too few"});
    if (!lr_low && std::isfinite(m.continued_val_loss))
      continued_evidence(f, o.continue_gain, " when the run barely moved", true);
    if (m.clipping_caps_steps)
      f.evidence.push_back({"gradient clipping active at nearly every step (O9)", 1,
                            "info: the clipping, not the learning rate, caps the steps"});
    // 10x the rate helped as much as the rule asks, but the run learned most of the way at its own rate:
    // a budget of rate x steps too small, which more steps and a higher rate both fill.
    const bool rate_also = !lr_low && !steps_help && probe_beats_run;
    f.cause = lr_low ? "a learning rate too low for this optimizer and model: each step moves the weights too little"
                     : "too few optimizer steps: too few epochs, batches too large for the data (few steps per "
                       "epoch), or a stopping rule that ended the run early";
    if (rate_also)
      f.cause += "; or a learning rate too low for the steps: 10x the rate reaches a loss " +
                 pct(1 - m.probe_window_loss / run_then) +
                 " lower in the same steps, and a run that learned most of the way at its own rate cannot tell a "
                 "rate too low from steps too few";
    f.fix = lr_low ? "raise the learning rate (try 3-10x; Adam's usual start is 1e-3, SGD's 0.01-0.1)"
                   : "train for more steps (more epochs, smaller batches) until the training loss levels off";
    if (rate_also) f.fix += "; if the learning rate sits low in its optimizer's range (O8), raise it 3x first";
    out.push_back(f);
  }
  return out;
}

bool end_fit_blames_rate(const std::vector<Finding>& findings) {
  return std::any_of(findings.begin(), findings.end(), [](const Finding& f) { return f.kind == Kind::LrProbeTooLow; });
}

bool end_fit_wants_data_probe(const EndFitMeasure& m, const std::vector<Finding>& findings, const EndFitOptions& o) {
  const bool split_quiet = std::none_of(findings.begin(), findings.end(), [](const Finding& f) {
    return f.kind == Kind::GeneralisationGap || f.kind == Kind::TrainLabelsDisagree;
  });
  if (!split_quiet) return false;
  if (std::isfinite(m.train_accuracy) && std::isfinite(m.val_accuracy))
    return m.train_accuracy - m.val_accuracy > o.data_gap;
  return std::isfinite(m.train_loss) && std::isfinite(m.val_loss) && m.val_loss > o.data_gap_loss * m.train_loss;
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
  if (!(std::isfinite(z) && positive_losses(m) && m.val_loss < (1 - o.labels_loss_margin) * m.train_loss &&
        z >= o.min_z))
    return {};
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

// ---- the confident-disagreement rule (debug/checks/loss/label_tail.h) ----

std::vector<Finding> check_label_tail(const LabelTailMeasure& m, const LabelTailOptions& o) {
  const TailShares s = tail_shares(m);
  if (!std::isfinite(s.train) || !(s.train - s.val > o.margin) || !(s.z >= o.min_z)) return {};
  Finding f = make(
      Kind::TrainLabelsDisagree, Severity::Warning,
      str_printf("the trained model gives %.1f%% of its own training examples under %g probability for their label, "
                 "against %.1f%% of validation: those training labels disagree with what it learned from the rest",
                 100 * s.train, o.confident_below, 100 * s.val));
  f.evidence = label_tail_evidence(m, o);
  f.evidence.push_back({"training examples scored", static_cast<double>(m.train_scored), ""});
  f.evidence.push_back({"validation examples scored", static_cast<double>(m.val_scored), ""});
  f.cause =
      "a share of the training labels is wrong (labels changed, shifted or noisy in the training split only), or "
      "the training inputs are corrupted: a model fit to clean labels is confidently wrong on no more of its "
      "training data than of data it never saw";
  f.fix =
      "look at the training examples the trained model gives the lowest probability for their label: relabel or "
      "drop them, and check that the training split is built like the validation one";
  return {f};
}

// The confident-disagreement rule joins the split rules: where none of them warned, its warning
// takes the place of the info `fit-measured`; otherwise its numbers join that info.
void apply_label_tail(std::vector<Finding>& fs, const LabelTailMeasure& m, const LabelTailOptions& o) {
  const bool split_warned = std::any_of(fs.begin(), fs.end(), [](const Finding& f) {
    return f.kind == Kind::GeneralisationGap || f.kind == Kind::TrainLabelsDisagree;
  });
  const auto info = std::find_if(fs.begin(), fs.end(), [](const Finding& f) { return f.kind == Kind::FitMeasured; });
  std::vector<Finding> tail = split_warned ? std::vector<Finding>{} : check_label_tail(m, o);
  if (!tail.empty()) {
    if (info != fs.end()) fs.erase(info);
    fs.insert(fs.begin(), std::move(tail.front()));
  } else if (info != fs.end()) {
    for (Evidence& e : label_tail_evidence(m, o)) info->evidence.push_back(std::move(e));
  }
}

}  // namespace gradsleuth::debug
