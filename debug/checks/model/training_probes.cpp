// M14 overfit one batch and M16 capacity (see model_checks.h); the short training runs they and M15
// (input_baseline.cpp) make.
#include "debug/checks/model/model_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/hooks.h"
#include "debug/checks/model/behaviour.h"
#include "debug/checks/model/model_util.h"
#include "debug/checks/run_check.h"
#include "debug/evidence/tensor_stats.h"
#include "nn/activation.h"
#include "nn/conv.h"
#include "nn/dropout.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/normalization.h"
#include "optim/adam.h"

namespace gradsleuth::debug {

using namespace model_detail;

// ---- M14 / M16 ------------------------------------------------------------------------------
ParamSnapshot::ParamSnapshot(nn::Module& model) {
  NoGradGuard ng;
  for (Tensor& p : model.parameters()) saved_.emplace_back(p, p.detach().clone());
  for (Tensor& b : model.buffers()) saved_.emplace_back(b, b.detach().clone());
}

void ParamSnapshot::restore() {
  NoGradGuard ng;
  for (auto& [live, copy] : saved_) {
    if (live.device().is_cpu() && live.shape() == copy.shape() && live.dtype() == copy.dtype() && live.is_contiguous()) {
      std::memcpy(live.raw_data(), copy.raw_data(), copy.nbytes());
      // The values changed: what was made from the old ones (autocast's kept 16-bit copy, a saved
      // tensor) must see it.
      live.storage()->bump_version("ParamSnapshot.restore");
    } else {
      live.detach().copy_(copy);
    }
    live.zero_grad();
  }
}

namespace model_detail {
std::vector<double> short_run(nn::Module& model, const std::vector<std::pair<Tensor, Tensor>>& batches,
                              const LossFunction& loss, int64_t steps, double lr, bool zero_inputs, double stop_below,
                              double* final_acc, double stop_accuracy,
                              const std::function<int64_t(const std::vector<double>&)>& more,
                              const std::function<void(int64_t)>& after_step) {
  std::vector<double> losses;
  std::vector<Tensor> ps = trainable(model);
  if (ps.empty() || batches.empty()) return losses;
  optim::Adam opt(ps, optim::AdamOptions(lr));
  // Train mode with the randomness off: every layer found random in train mode
  // (nn::Dropout or a hand-written one) runs in eval mode; BatchNorm-like layers
  // keep training mode, which is deterministic.
  set_mode_without_randomness(model, true, probe_mode_dependence(model, batches.front().first));
  for (int64_t s = 0; s < steps || (more && s == steps && (steps += more(losses)) > s); ++s) {
    const auto& [x, y] = batches[static_cast<size_t>(s) % batches.size()];
    opt.zero_grad();
    Tensor out = model(zero_inputs ? zeros_like(x) : x);
    Tensor l = loss(out, y);
    l.backward();
    opt.step();
    losses.push_back(l.item<double>());
    if (after_step) after_step(s + 1);
    if (final_acc && is_classification(out, y)) *final_acc = accuracy_of(out, y);
    if (stop_below > 0 && losses.back() < stop_below && (!final_acc || *final_acc >= stop_accuracy)) break;
    if (!std::isfinite(losses.back())) break;
  }
  return losses;
}

double eval_loss(nn::Module& model, const std::pair<Tensor, Tensor>& b, const LossFunction& loss, bool zero_inputs) {
  NoGradGuard ng;
  model.eval();
  return loss(model(zero_inputs ? zeros_like(b.first) : b.first), b.second).item<double>();
}
}  // namespace model_detail

namespace {
struct LossFloor {
  bool valid = false;
  bool bounded = true;        // the free outputs' loss levelled off (false: it kept falling, or overflowed)
  bool distribution = false;  // outputs not shaped as the targets under a non-class loss
  double floor = 0.0;
};
}  // namespace

// Whether the loss reads (B, C) outputs as class scores for labels y: raising each row's score of its own label and
// raising the next class's instead move it in opposite directions (a cross-entropy, NLL, a focal or a corrected loss,
// or one of them inverted; not a contrastive loss over an embedding).
bool loss_scores_classes(const Tensor& out, const Tensor& y, const LossFunction& loss) {
  try {
    NoGradGuard ng;
    const int64_t B = out.size(0), C = out.size(1);
    const std::vector<int64_t> labels = y.detach().to(kCPU).to(kInt64).contiguous().to_vector<int64_t>();
    std::vector<float> own(static_cast<size_t>(B * C), 0.0f), next(static_cast<size_t>(B * C), 0.0f);
    for (int64_t i = 0; i < B; ++i) {
      const int64_t k = labels[static_cast<size_t>(i)];
      if (k < 0 || k >= C) continue;  // a masked row (ignore_index)
      own[static_cast<size_t>(i * C + k)] = 1.0f;
      next[static_cast<size_t>(i * C + (k + 1) % C)] = 1.0f;
    }
    const Tensor base = out.detach().to(kFloat32);
    const double step = std::max(1.0, amax(abs(base)).item<double>());
    const double at = loss(base, y).item<double>();
    const double up = loss(base + tensor(own, {B, C}).to(base.device()) * step, y).item<double>();
    const double down = loss(base + tensor(next, {B, C}).to(base.device()) * step, y).item<double>();
    // Opposite moves (either way round: an inverted loss still reads the scores by class); a loss over
    // an embedding moves the same way for both, as both pull same-label rows together.
    return !(std::isfinite(at) && std::isfinite(up) && std::isfinite(down)) || (up - at) * (down - at) < 0;
  } catch (const std::exception&) {
    return true;
  }
}

// Whether loss(out, y) moves when the class labels move: each label replaced by the next class, or the labels
// moved one row on; true where neither can tell. A loss that reads neither (a density of the inputs beside
// a label the data set keeps) reads no labels.
bool loss_reads_labels(const Tensor& out, const Tensor& y, const LossFunction& loss) {
  try {
    NoGradGuard ng;
    const int64_t C = out.size(1);
    std::vector<int64_t> next = y.detach().to(kCPU).to(kInt64).contiguous().to_vector<int64_t>();
    for (int64_t& k : next) k = k >= 0 && k < C ? (k + 1) % C : k;  // a masked row (ignore_index) stays
    const Tensor next_class = tensor(next, {y.size(0)}).to(y.device());
    const double at = loss(out, y).item<double>();
    return loss_moves(loss, out, at, next_class) || loss_moves(loss, out, at, rows_rolled(y));
  } catch (const std::exception&) {
    return true;
  }
}

namespace {

// The least loss outputs trained freely (Adam on a leaf of the model's output shape) reach on the batch; valid when
// they predict every class (class targets), have the targets' shape, or (outputs that parametrise a distribution per
// row, not shaped as the targets) the loss is the mean of its rows' losses. `shared`: one output row for every example
// instead (the best constant prediction).
LossFloor loss_floor(nn::Module& model, const Tensor& x, const Tensor& y, const LossFunction& loss, bool classes,
                     bool shared = false) {
  LossFloor fl;
  try {
    Tensor z;
    {
      // Only the outputs' shape and a starting point are wanted: in eval mode, so that the forward
      // neither moves BatchNorm's running statistics nor draws dropout masks (the parameters and
      // buffers were restored before this runs), and the modes put back after it.
      NoGradGuard ng;
      ModeSnapshot modes(model);
      model.eval();
      z = model(x).detach().to(kFloat32).contiguous().clone();
    }
    fl.distribution = !classes && z.shape() != y.shape();
    // Float targets only: a loss that broadcasts its operands has a floor too, and that one is a bug.
    // Labels beside an embedding (a supervised contrastive loss) are read through the batch on purpose.
    if (fl.distribution && is_floating(y.dtype()) && !rows_separate(z, y, loss)) return fl;
    if (shared && (!fl.distribution || z.size(0) < 2)) return fl;
    // A density's free outputs are run in float64 where the loss takes it: in float32 the
    // cancellation inside a log-likelihood at extreme dispersions (Stirling's lgamma at a shape of
    // e^20) turns its fall into noise that looks like a floor.
    Tensor target = y;
    if (fl.distribution && z.dtype() == kFloat32 && is_floating(y.dtype())) {
      try {
        NoGradGuard ng;
        const Tensor z64 = z.to(kFloat64), y64 = y.to(kFloat64);
        if (std::isfinite(loss(z64, y64).item<double>())) {
          z = z64;
          target = y64;
        }
      } catch (const std::exception&) {
      }
    }
    const Shape full = z.shape();
    if (shared) z = z.narrow(0, 0, 1).contiguous().clone();
    // Columns the model keeps inside (0, 1) in every row (a Sigmoid's probabilities, which a BCE on
    // probabilities refuses outside it) stay there: trained through a sigmoid of free logits.
    const Tensor in01 = !classes && z.dim() == 2 && z.size(0) >= 2
                            ? logical_and(gt(amin(z, {0}, true), 0.0), lt(amax(z, {0}, true), 1.0)).to(z.dtype())
                            : Tensor();
    if (in01.defined()) z = where(in01 > 0.5, log(z.clamp(1e-6, 1 - 1e-6) / (1.0 - z.clamp(1e-6, 1 - 1e-6))), z);
    z.requires_grad_(true);
    optim::Adam opt({z}, optim::AdamOptions(0.1));
    constexpr int kSteps = 300;
    std::vector<double> seen;
    for (int s = 0; s < kSteps; ++s) {
      opt.zero_grad();
      const Tensor out = in01.defined() ? in01 * sigmoid(z) + (1.0 - in01) * z : z;
      Tensor l = loss(shared ? out.expand(full) : out, target);
      const double v = l.item<double>();
      if (!std::isfinite(v)) break;
      seen.push_back(v);
      l.backward();
      opt.step();
    }
    if (seen.empty()) return fl;
    if (classes && !(accuracy_of(z.detach(), y) >= 1.0)) return fl;
    // Levelled off: over the last third of the steps the loss stayed within 0.01 x max(1, |loss|).
    // A density whose per-row dispersion is free (a Gamma's shape, a Gaussian's variance) has no
    // floor: its free outputs run the loss down, or chase a well that sharpens as the dispersion
    // shrinks, and the loss jumps about.
    const auto tail = seen.begin() + static_cast<std::ptrdiff_t>(seen.size() * 2 / 3);
    const auto [lo, hi] = std::minmax_element(tail, seen.end());
    fl.bounded = static_cast<int>(seen.size()) == kSteps && *hi - *lo <= 0.01 * std::max(1.0, std::fabs(seen.back()));
    fl.valid = true;
    fl.floor = *std::min_element(seen.begin(), seen.end());
  } catch (const std::exception&) {
  }
  return fl;
}
// What any model can reach on a batch whose identical inputs carry different labels: rows with the same input get the
// same output, so each group of them is right at most on its most frequent label, and its cross-entropy is at least the
// entropy of its labels. `conflicts` is 0 where no two identical inputs disagree.
struct ConflictLimit {
  int64_t conflicts = 0;  // rows whose input another row with another label shares
  double accuracy = 1.0;  // the best share of the batch any model gets right
  double entropy = 0.0;   // the least mean cross-entropy any model reaches (nats)
};
// The limit of labels grouped by what a model can tell apart (an input, a prefix): per group its most frequent label is
// the best guess, and the labels' entropy the least cross-entropy; `counted` labels in all.
template <class Key>
ConflictLimit limit_of(const std::map<Key, std::map<int64_t, int64_t>>& groups, int64_t counted) {
  ConflictLimit c;
  double right = 0, nats = 0;
  for (const auto& [key, counts] : groups) {
    int64_t n = 0, most = 0;
    for (const auto& [label, k] : counts) {
      n += k;
      most = std::max(most, k);
    }
    right += static_cast<double>(most);
    if (counts.size() > 1) c.conflicts += n;
    for (const auto& [label, k] : counts)
      nats -= static_cast<double>(k) * std::log(static_cast<double>(k) / static_cast<double>(n));
  }
  c.accuracy = right / static_cast<double>(counted);
  c.entropy = nats / static_cast<double>(counted);
  return c;
}

ConflictLimit conflicting_inputs(const Tensor& x, const Tensor& y) {
  ConflictLimit c;
  if (x.dim() < 1 || y.dim() != 1 || x.size(0) != y.size(0) || x.size(0) == 0) return c;
  NoGradGuard ng;
  const int64_t B = x.size(0);
  const Tensor rows = x.detach().to(kCPU).to(kFloat64).contiguous().reshape({B, -1});
  const std::vector<double> v = rows.to_vector<double>();
  const std::vector<int64_t> labels = y.detach().to(kCPU).to(kInt64).contiguous().to_vector<int64_t>();
  const size_t width = static_cast<size_t>(rows.size(1));
  std::map<std::vector<double>, std::map<int64_t, int64_t>> groups;
  for (int64_t i = 0; i < B; ++i) {
    const auto at = v.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(i) * width);
    ++groups[std::vector<double>(at, at + static_cast<std::ptrdiff_t>(width))][labels[static_cast<size_t>(i)]];
  }
  return limit_of(groups, B);
}

// Per-position class targets y (B, T) over token ids x (B, T): the positions whose prefix x[b, 0..t] is another
// position's too, with another label. A model that reads each position's prefix (a causal language model) cannot tell
// them apart: the least mean cross-entropy it reaches is their labels' entropy given the prefix.
ConflictLimit conflicting_prefixes(const Tensor& x, const Tensor& y) {
  ConflictLimit c;
  if (x.dim() != 2 || y.dim() != 2 || !is_integral(x.dtype()) || !is_integral(y.dtype()) || x.size(0) != y.size(0) ||
      x.size(1) != y.size(1) || x.numel() == 0)
    return c;
  NoGradGuard ng;
  const int64_t B = x.size(0), T = x.size(1);
  const std::vector<int64_t> ids = x.detach().to(kCPU).to(kInt64).contiguous().to_vector<int64_t>();
  const std::vector<int64_t> labels = y.detach().to(kCPU).to(kInt64).contiguous().to_vector<int64_t>();
  std::map<std::vector<int64_t>, std::map<int64_t, int64_t>> groups;
  int64_t counted = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t label = labels[static_cast<size_t>(b * T + t)];
      if (label < 0) continue;  // ignore_index
      const auto at = ids.begin() + static_cast<std::ptrdiff_t>(b * T);
      ++groups[std::vector<int64_t>(at, at + t + 1)][label];
      ++counted;
    }
  return counted == 0 ? c : limit_of(groups, counted);
}

}  // namespace

std::vector<Finding> overfit_one_batch(nn::Module& model, const Tensor& x, const Tensor& y, const LossFunction& loss,
                                       const ModelCheckOptions& o) {
  ModeSnapshot modes(model);
  ParamSnapshot snap(model);
  double acc = std::nan("");
  // Class targets scored by accuracy: int64 (B) labels against (B, C) outputs. Labels beside another
  // output (a triplet loss's embeddings, which ignores them) leave the loss alone to judge.
  bool classes = y.dtype() == kInt64 && y.dim() == 1;
  // The loss line: overfit_loss, or for C classes overfit_loss_chance x log C when that is higher.
  double line = o.overfit_loss;
  // Class-shaped outputs: their cross-entropy with the labels before the run, to compare with after it (a
  // hand-written cross-entropy that reads the wrong entries).
  int64_t shaped_classes = 0;
  double ce_before = std::nan("");
  if (classes) {
    NoGradGuard ng;
    ModeSnapshot eval_modes(model);
    model.eval();
    const Tensor out = model(x);
    // A loss that never reads its targets (a flow's likelihood of its inputs beside a label the data keeps)
    // scores no classes, whatever its moves with the outputs.
    const bool shaped = out.dim() == 2 && out.size(1) > 1 && out.size(0) == y.size(0);
    const bool reads = shaped && loss_reads_labels(out, y, loss);
    classes = reads && loss_scores_classes(out, y, loss);
    if (classes) line = std::max(line, o.overfit_loss_chance * std::log(static_cast<double>(out.size(1))));
    // An output far wider than the labels reach (an embedding a metric loss scores against its own
    // proxies or prototypes) holds no class scores, whatever its cross-entropy with the labels.
    if (reads && amin(y).item<int64_t>() >= 0 && amax(y).item<int64_t>() < out.size(1) &&
        !loss_type::wider_than_labels(out, y)) {
      shaped_classes = out.size(1);
      ce_before = nn::functional::cross_entropy(out.to(kFloat32), y).item<double>();
    }
  }
  // The adaptive budget: past the base budget, one more window while the last window's mean
  // loss is below the window before's by more than overfit_extend_drop, up to the cap.
  const int64_t base = std::max<int64_t>(o.overfit_steps, 1);
  const int64_t cap = std::max(base, o.overfit_max_steps > 0 ? o.overfit_max_steps : 4 * base);
  const int64_t window = o.overfit_window > 0 ? o.overfit_window : std::max<int64_t>(10, base / 5);
  // Whether the last window's mean loss is below the window before's by more than `drop`.
  auto falls_by = [window](const std::vector<double>& l, double drop) {
    const int64_t n = static_cast<int64_t>(l.size());
    if (n < 2 * window) return false;
    double last_w = 0.0, prev_w = 0.0;
    for (int64_t i = n - window; i < n; ++i) last_w += l[static_cast<size_t>(i)];
    for (int64_t i = n - 2 * window; i < n - window; ++i) prev_w += l[static_cast<size_t>(i)];
    return std::isfinite(last_w) && std::isfinite(prev_w) && prev_w > 0.0 && last_w < (1.0 - drop) * prev_w;
  };
  auto more = [&](const std::vector<double>& l) -> int64_t {
    const int64_t n = static_cast<int64_t>(l.size());
    return n < cap && falls_by(l, o.overfit_extend_drop) ? std::min(window, cap - n) : 0;
  };
  std::vector<double> losses = short_run(model, {{x, y}}, loss, base, o.overfit_lr, false, line,
                                         classes ? &acc : nullptr, o.overfit_accuracy, more);
  double ce_after = std::nan(""), acc_after = std::nan("");
  if (shaped_classes > 0 && !losses.empty()) {
    try {
      NoGradGuard ng;
      ModeSnapshot eval_modes(model);  // as before the run: eval mode (no batch statistics, no draws)
      model.eval();
      const Tensor out = model(x);
      ce_after = nn::functional::cross_entropy(out.to(kFloat32), y).item<double>();
      acc_after = accuracy_of(out, y);
    } catch (const std::exception&) {
      shaped_classes = 0;
    }
  }
  snap.restore();
  // A loss that starts where the outputs' cross-entropy with the labels does (within 25%, near log C: a
  // cross-entropy of its own), and fell to half or less on the batch, while that cross-entropy rose and
  // the accuracy stayed at chance: it is minimised away from the labels (a cross-entropy that gathers
  // along the batch axis).
  if (shaped_classes > 0 && !losses.empty()) {
    const double log_c = std::log(static_cast<double>(shaped_classes));
    const double first = losses.front(), last = losses.back();
    if (std::isfinite(first) && std::isfinite(last) && std::isfinite(ce_before) &&
        std::fabs(first - ce_before) <= 0.25 * ce_before && std::fabs(ce_before - log_c) <= 0.5 * log_c &&
        last <= 0.5 * first && ce_after > ce_before && acc_after <= 2.0 / static_cast<double>(shaped_classes)) {
      Finding f;
      f.check = "M14";
      f.module = "(model)";
      f.severity = Severity::Warning;
      f.kind = Kind::LossBlindToLabels;
      f.title = "the loss fell from " + fmt_num(first) + " (the outputs' cross-entropy with the labels, " +
                std::to_string(shaped_classes) + " classes) to " + fmt_num(last) +
                " on one batch while that cross-entropy rose (" + fmt_num(ce_before) + " -> " + fmt_num(ce_after) +
                ") and " + fmt_num(100.0 * acc_after) + "% are predicted right: the loss does not score the labels";
      f.evidence = {{"initial loss", first, "within 25% of the cross-entropy with the labels: a cross-entropy"},
                    {"final loss", last, "<= half the initial loss"},
                    {"cross-entropy with the labels before", ce_before, ""},
                    {"cross-entropy with the labels after", ce_after, "> before: the fit moved away from the labels"},
                    {"accuracy after", acc_after, "<= 2 / C (chance)"}};
      f.cause =
          "a hand-written classification loss that reads other entries than each row's own label: a gather or "
          "an index along the batch axis instead of the class axis, labels used as row positions, a term with "
          "the wrong sign";
      f.fix =
          "compute the loss by hand on one example predicted right and one predicted wrong: the right one must "
          "score lower; compare it with nn::CrossEntropyLoss on one batch (they agree without smoothing or weights)";
      return {f};
    }
  }
  // A training output with other rows than the labels (R-Drop's batch run twice) has no accuracy: the loss judges.
  if (classes && std::isnan(acc)) classes = false;
  std::vector<Finding> out;
  if (losses.empty()) return out;
  const double first = losses.front(), last = losses.back();
  const double best = *std::min_element(losses.begin(), losses.end());
  const bool fell = first > 0 && last <= o.overfit_relative * first;  // fitted down to the loss's own floor
  bool ok = (last < line || fell) && (!classes || acc >= o.overfit_accuracy);
  bool conflicted = false;  // passed once identical inputs with different labels are allowed for
  bool beat_constant = false;  // a density with no floor, fitted better than any constant output
  std::vector<Evidence> probes;
  // The loss's own floor: outputs trained freely on the batch. Label smoothing (or soft targets)
  // keeps a perfect prediction's loss above 0; the model is then judged against that floor. Only
  // a floor whose free outputs predict every class right (class targets) or match the targets'
  // shape counts: a loss that broadcasts its operands also has a floor, and that one is a bug.
  if (!ok && std::isfinite(last)) {
    const LossFloor fl = loss_floor(model, x, y, loss, classes);
    if (fl.valid && fl.bounded && fl.floor > line) {
      probes.push_back({"the loss's floor (free outputs trained on the batch)", fl.floor,
                        "final loss within max(" + fmt_num(o.overfit_loss) + ", " + fmt_num(o.overfit_floor_share) +
                            " x (first - floor)) of it passes"});
      // Within overfit_loss of it, or overfit_floor_share of the way from the first loss left, at the run's best.
      ok = best < fl.floor + std::max(o.overfit_loss, o.overfit_floor_share * (first - fl.floor)) &&
           (!classes || acc >= o.overfit_accuracy);
    } else if (fl.valid && !fl.bounded && fl.distribution) {
      // Outputs that parametrise a density per row (a Gamma's mean and shape): free outputs run
      // the loss to minus infinity, so no floor applies. The model fits the batch as far as this
      // test asks where it beats the best constant output (one row of outputs for every example)
      // by overfit_beat_constant of that loss or more; a model blind to its inputs cannot.
      const LossFloor c = loss_floor(model, x, y, loss, classes, true);
      probes.push_back(
          {"free outputs' least loss in 300 steps (it did not level off: the density has no floor)", fl.floor, ""});
      if (c.valid && c.bounded) {
        const double margin = o.overfit_beat_constant * std::max(std::fabs(c.floor), 1.0);
        probes.push_back({"the best constant output's loss (one output row for every example)", c.floor,
                          "final loss below it by " + fmt_num(o.overfit_beat_constant) + " x max(|it|, 1) passes"});
        beat_constant = last < c.floor - margin;
        ok = beat_constant;
      }
    }
  }
  // Identical inputs with different labels in the batch (a next-token task whose context recurs):
  // no model gets them all right, and the loss keeps their labels' entropy. That floor and accuracy also
  // judge the retry at a higher learning rate below.
  double floor_line = line, floor_accuracy = o.overfit_accuracy;
  if (!ok && classes && std::isfinite(last)) {
    const ConflictLimit c = conflicting_inputs(x, y);
    if (c.conflicts > 0) {
      probes.push_back({"rows whose identical input carries another label too", static_cast<double>(c.conflicts), ""});
      probes.push_back({"best accuracy any model reaches on the batch", c.accuracy, "reached: passes"});
      probes.push_back({"least cross-entropy any model reaches (their labels' entropy)", c.entropy,
                        "final loss within " + fmt_num(line) + " of it passes"});
      conflicted = acc >= std::min(o.overfit_accuracy, c.accuracy) - 1e-9 && last < c.entropy + line;
      ok = conflicted;
      floor_line = c.entropy + line, floor_accuracy = std::min(o.overfit_accuracy, c.accuracy) - 1e-9;
    }
  }
  // The same per position, for a model over token prefixes (a causal language model's early positions
  // see a token or two, which recur in the batch with other next tokens).
  if (!ok && std::isfinite(last)) {
    const ConflictLimit c = conflicting_prefixes(x, y);
    if (c.conflicts > 0) {
      probes.push_back(
          {"positions whose token prefix carries another label too", static_cast<double>(c.conflicts), ""});
      probes.push_back({"least cross-entropy a model over each position's prefix reaches", c.entropy,
                        "final loss within " + fmt_num(line) + " of it passes"});
      conflicted = last < c.entropy + line;
      ok = conflicted;
      floor_line = c.entropy + line, floor_accuracy = 0.0;  // judged by the loss alone
    }
  }
  // Frozen parameters on purpose (a frozen pretrained body under a new head) limit what the
  // trainable part can fit: the same test with every parameter trained tells a freeze that
  // limits the fit from a model that cannot learn at all.
  bool frozen_limits = false;
  if (!ok && std::isfinite(last)) {
    std::vector<Tensor> frozen;
    for (Tensor& p : model.parameters())
      if (!p.requires_grad()) frozen.push_back(p);
    if (!frozen.empty()) {
      for (Tensor& p : frozen) p.requires_grad_(true);
      double full_acc = std::nan("");
      std::vector<double> full = short_run(model, {{x, y}}, loss, base, o.overfit_lr, false, line,
                                           classes ? &full_acc : nullptr, o.overfit_accuracy, more);
      for (Tensor& p : frozen) p.requires_grad_(false);
      snap.restore();
      if (!full.empty()) {
        probes.push_back({"final loss with the frozen parameters trained too", full.back(),
                          "< " + fmt_num(line) + ": the freeze limits the fit"});
        frozen_limits = full.back() < line && (!classes || full_acc >= o.overfit_accuracy);
      }
    }
  }
  // Still falling steadily when the budget ran out, far below where it started: one more run at a
  // higher learning rate (overfit_retry_lr_factor). Adam moves each parameter about lr per step, and
  // some fits need parameters to travel far (an ordinal model's cut points); a plateau is not retried.
  bool retried = false;
  double retry_last = std::nan("");
  if (!ok && !frozen_limits && std::isfinite(last) && first > 0 && last <= 0.5 * first &&
      o.overfit_retry_lr_factor > 1.0) {
    if (falls_by(losses, o.overfit_retry_drop)) {
      double retry_acc = std::nan("");
      const std::vector<double> again =
          short_run(model, {{x, y}}, loss, base, o.overfit_lr * o.overfit_retry_lr_factor, false, line,
                    classes ? &retry_acc : nullptr, o.overfit_accuracy, more);
      snap.restore();
      if (!again.empty()) {
        retry_last = again.back();
        probes.push_back(
            {"final loss at " + fmt_num(o.overfit_retry_lr_factor) + "x the learning rate", retry_last,
             "< " + fmt_num(floor_line) + " (or <= " + fmt_num(o.overfit_relative) + " x the first) passes"});
        retried = (retry_last < floor_line || retry_last <= o.overfit_relative * first) &&
                  (!classes || retry_acc >= floor_accuracy);
        ok = retried;
      }
    }
  }
  // The retry levelled off where the test did, far below the start: a floor of the batch, not of the
  // learning rate.
  const bool floored = !ok && !retried && std::isfinite(retry_last) && first > 0 &&
                       std::max(last, retry_last) <= o.overfit_floor_fall * first &&
                       std::fabs(retry_last - last) <= o.overfit_floor_match * last;
  // More target values in the batch than the model has trainable parameters (a segmentation's
  // pixels, a dense per-position target): no model of this size can memorise arbitrary targets on
  // it; a loss that fell by half or more shows it learns what it can.
  int64_t trainable = 0;
  for (const Tensor& p : model.parameters())
    if (p.requires_grad()) trainable += p.numel();
  const bool dense = !ok && !frozen_limits && std::isfinite(last) && trainable > 0 && y.numel() > trainable &&
                     first > 0 && last <= o.overfit_dense_fall * first;
  if (dense) {
    probes.push_back({"target values in the batch", static_cast<double>(y.numel()), "more than the next: info"});
    probes.push_back({"trainable parameter values", static_cast<double>(trainable), ""});
    probes.push_back({"final / initial loss", last / first, "<= " + fmt_num(o.overfit_dense_fall) + " with them"});
  }
  // The loss reached its line with a few rows still wrong (and not for free: a loss near 0 on wrong rows is
  // judged below as blind to the labels): the same test under cross-entropy tells whether the model can
  // memorise the batch. Where it can, the rows left are the loss's choice, not the model's limit.
  bool loss_leaves_rows = false;
  const double wrong_share = classes && std::isfinite(acc) ? 1.0 - acc : 0.0;
  const int64_t wrong_rows = std::llround(wrong_share * static_cast<double>(x.size(0)));
  if (!ok && !frozen_limits && shaped_classes > 0 && std::isfinite(last) && last < line && wrong_rows >= 1 &&
      wrong_share <= std::max(o.overfit_straggler_share, 1.0 / static_cast<double>(x.size(0))) + 1e-9 &&
      !(last < 0.1 * wrong_share * std::log(2.0))) {
    double ce_acc = std::nan("");
    const LossFunction ce = [](const Tensor& out, const Tensor& t) { return nn::functional::cross_entropy(out, t); };
    const std::vector<double> by_ce =
        short_run(model, {{x, y}}, ce, base, o.overfit_lr, false, line, &ce_acc, o.overfit_accuracy, more);
    snap.restore();
    if (!by_ce.empty()) {
      probes.push_back(
          {"accuracy on the batch with cross-entropy as the loss (same model, same budget)", ce_acc,
           ">= " + fmt_num(o.overfit_accuracy) + ": the model memorises it; the rows left are the loss's"});
      loss_leaves_rows = ce_acc >= o.overfit_accuracy;
    }
  }
  const int64_t used = static_cast<int64_t>(losses.size());
  const std::string budget = "base budget " + std::to_string(base) + ", extended by " + std::to_string(window) +
                             " while the loss still falls > " + fmt_num(100 * o.overfit_extend_drop) +
                             "% per window, at most " + std::to_string(cap);
  Finding f;
  f.check = "M14";
  f.module = "(model)";
  f.shape = shape_of(x);
  f.evidence = {{"initial loss", first, ""},
                {"final loss", last, "< " + fmt_num(line) + " expected"},
                {"best loss", best, ""},
                {"steps used", static_cast<double>(used), budget}};
  if (classes) f.evidence.push_back({"final accuracy", acc, ">= " + fmt_num(o.overfit_accuracy) + " expected"});
  f.evidence.insert(f.evidence.end(), probes.begin(), probes.end());
  const std::string extended =
      used > base ? " (base budget " + std::to_string(base) + ", extended while the loss was still falling fast)" : "";
  // Real-valued targets over inputs of one or two features (a curve, a surface): memorising noisy targets
  // takes a function that bends between neighbouring rows, far more than a short budget trains (a healthy
  // MLP on a noisy sine does not, in thousands of steps). Where the loss fell by half or more, the model
  // learns; the test says so and judges nothing.
  const int64_t features = x.dim() == 2 ? x.size(1) : -1;
  const bool low_dim = !ok && !classes && features >= 1 && features <= o.overfit_low_dim_features &&
                       std::isfinite(last) && last <= first * 0.5;
  if (!ok && frozen_limits) {
    f.severity = Severity::Info;
    f.title = "the trainable parameters alone cannot overfit one batch of " + std::to_string(x.size(0)) +
              " (loss " + fmt_num(first) + " -> " + fmt_num(last) +
              "), the whole model can: the frozen parameters limit the fit, as a frozen pretrained body does";
    f.fix = "none needed when the freeze is intended; unfreeze (or fine-tune at a lower lr) for a closer fit";
  } else if (low_dim) {
    f.severity = Severity::Info;
    f.title = "does not overfit one batch of " + std::to_string(x.size(0)) + " (loss " + fmt_num(first) + " -> " +
              fmt_num(last) + ", a fall of " + fmt_num(first / std::max(last, 1e-300)) + "x) on inputs of " +
              std::to_string(features) + " feature" + (features == 1 ? "" : "s") +
              ": real-valued targets on so few dimensions are memorised only by a function that bends between "
              "neighbouring rows; the test applies to inputs of more features";
    f.evidence.push_back({"input features", static_cast<double>(features),
                          "<= " + std::to_string(o.overfit_low_dim_features) + " with the loss halved: not judged"});
    f.fix = "none needed; judge the fit by the validation loss against a smooth baseline";
  } else if (dense) {
    f.severity = Severity::Info;
    f.title = "does not overfit one batch of " + std::to_string(x.size(0)) + " (loss " + fmt_num(first) + " -> " +
              fmt_num(last) + "), and no model of its size could: the batch holds " + std::to_string(y.numel()) +
              " target values against " + std::to_string(trainable) + " trainable parameters";
    f.fix = "none needed; for this test alone, a batch of a few examples fits in the model's capacity";
  } else if (floored) {
    f.severity = Severity::Info;
    f.title = "levels off at one floor on one batch of " + std::to_string(x.size(0)) + " at two learning rates (loss " +
              fmt_num(first) + " -> " + fmt_num(last) + "; at " + fmt_num(o.overfit_retry_lr_factor) + "x the rate " +
              fmt_num(retry_last) +
              "): the batch's own floor, inputs the model cannot tell apart carrying different "
              "targets (a context window, a masked token)";
    f.evidence.push_back({"|final loss at the higher rate - final loss| / final loss",
                          std::fabs(retry_last - last) / last,
                          "<= " + fmt_num(o.overfit_floor_match) + ", both <= " + fmt_num(o.overfit_floor_fall) +
                              " x the first: a floor (info)"});
    f.fix = "none needed; D12 says whether the data holds identical inputs with other labels";
  } else if (loss_leaves_rows) {
    f.severity = Severity::Info;
    f.title = "overfits one batch of " + std::to_string(x.size(0)) + " as far as its loss asks: loss " +
              fmt_num(first) + " -> " + fmt_num(last) + ", below its line, with " + std::to_string(wrong_rows) +
              " row" + (wrong_rows == 1 ? "" : "s") +
              " still predicted wrong; trained by cross-entropy the same model gets every row right, so those rows "
              "are left by the loss, as one that bounds what a wrong row costs (a noise-robust loss such as "
              "generalized cross-entropy) leaves its hardest rows to the end";
    f.fix = "none needed when the loss is meant to give up on hard rows; a loss that should fit every row does not";
  } else if (retried) {
    f.severity = Severity::Info;
    f.title = "overfits one batch of " + std::to_string(x.size(0)) + " at " + fmt_num(o.overfit_retry_lr_factor) +
              "x the test's learning rate (loss " + fmt_num(first) + " -> " + fmt_num(retry_last) +
              "); at its own rate the loss still fell steadily (" + fmt_num(first) + " -> " + fmt_num(last) + " in " +
              std::to_string(used) +
              " steps): parameters that must travel far, as an ordinal model's cut points, take distance / lr "
              "steps under Adam";
    f.fix = "none needed; for this test alone, a higher learning rate shows the fit sooner";
  } else if (ok) {
    f.severity = Severity::Info;
    f.title = "overfits one batch of " + std::to_string(x.size(0)) + ": loss " + fmt_num(first) + " -> " +
              fmt_num(last) + (best < 0.9 * last ? " (best " + fmt_num(best) + ")" : std::string()) + " in " +
              std::to_string(used) + " steps" + extended;
    if (beat_constant)
      f.title += ", below the best constant output's loss by " + fmt_num(o.overfit_beat_constant) +
                 " of it or more: the outputs parametrise a density, whose loss has no floor on one batch";
    else if (conflicted)
      f.title +=
          ", as far as any model can: identical inputs in it carry different labels (D12 says whether the "
          "data holds such conflicts)";
    else if (fell && !(last < line)) {
      f.title += ", a fall of " + fmt_num(first / std::max(last, 1e-300)) +
                 "x; what is left is the loss's own floor (a KL term, noise the model draws)";
      f.evidence.push_back({"final / initial loss", last / first, "<= " + fmt_num(o.overfit_relative) + " passes"});
    }
  } else {
    f.severity = Severity::Warning;
    f.title = "cannot overfit one batch of " + std::to_string(x.size(0)) + " examples in " + std::to_string(used) +
              " steps (loss " + fmt_num(first) + " -> " + fmt_num(last) + ")" +
              (used >= cap   ? " (the cap of the adaptive budget)"
               : used > base ? extended
                             : "");
    // The loss reached ~0 while a tenth of the predictions or more stayed wrong (a cross-entropy pays
    // log 2 or more for each wrong row, 0.069 for a tenth of them): what the loss scores is not the
    // labels the accuracy reads.
    // Or, with any row wrong: a wrong row costs a cross-entropy of log 2 or more, so a mean below a tenth
    // of (wrong share) x log 2 cannot count the wrong rows (an ignore_index on a class the labels use).
    const bool blind_to_labels = classes && std::isfinite(acc) &&
                                 ((last < o.overfit_loss && acc <= o.overfit_accuracy - 0.1) ||
                                  (acc < 1.0 && last < 0.1 * (1.0 - acc) * std::log(2.0)));
    if (blind_to_labels) {
      f.kind = Kind::LossBlindToLabels;
      f.title = "the loss fell to " + fmt_num(last) + " on one batch of " + std::to_string(x.size(0)) + " while only " +
                fmt_num(100.0 * acc) + "% of its examples are predicted right: the loss does not score the labels";
      f.cause =
          "a loss near 0 on wrong predictions rewards something other than the right class: a term inverted (a "
          "focal factor pt^gamma for (1 - pt)^gamma, a sign), an ignore_index that masks a class the labels use, or "
          "weights or a mask that leave most rows out of the loss";
      f.fix =
          "compute the loss by hand on one example predicted right and one predicted wrong: the right one must "
          "score lower; check the loss's ignore_index, weights and masks against the labels";
      return {f};
    }
    f.cause = std::string(!std::isfinite(last) ? "the loss became non-finite: numerical instability or a learning "
                                                 "rate too high. "
                          : last > first       ? "the loss went up: the loss is ill-defined (a flipped sign), the "
                                                 "learning rate is too high, or the computation is unstable. "
                                               : "") +
              "A model that cannot memorise a handful of examples has a bug: inputs and labels not aligned, "
              "gradients that do not reach the layers (detach, frozen, dead units), an output activation that "
              "limits the logits, or too little capacity";
    f.fix =
        "run the gradient-flow (M5), final-activation (M3) and alignment (D4) checks; try a higher learning rate "
        "for this test only";
  }
  return {f};
}

std::vector<Finding> capacity_check(const std::function<nn::ModulePtr(int64_t width)>& make, int64_t small_width,
                                    int64_t large_width, const std::vector<std::pair<Tensor, Tensor>>& train,
                                    const LossFunction& loss, const ModelCheckOptions& o) {
  auto final_loss = [&](int64_t width) {
    nn::ModulePtr m = make(width);
    short_run(*m, train, loss, o.baseline_steps, o.baseline_lr, false);
    double s = 0.0;
    for (const auto& b : train) s += eval_loss(*m, b, loss, false);
    return s / static_cast<double>(std::max<size_t>(train.size(), 1));
  };
  const double small = final_loss(small_width), large = final_loss(large_width);
  Finding f;
  f.check = "M16";
  f.module = "(model)";
  f.evidence = {{"training loss, width " + std::to_string(small_width), small, ""},
                {"training loss, width " + std::to_string(large_width), large, "must be lower"}};
  if (std::isfinite(large) && large < small * (1.0 - o.capacity_margin)) {
    f.severity = Severity::Info;
    f.title = "more capacity fits better: training loss " + fmt_num(small) + " (width " + std::to_string(small_width) +
              ") -> " + fmt_num(large) + " (width " + std::to_string(large_width) + ")";
  } else {
    f.severity = Severity::Warning;
    f.title = "a larger model does not reach a lower training loss";
    f.cause =
        "capacity is not what limits training: an optimisation problem (learning rate, initialisation), a "
        "bottleneck elsewhere in the model, or inputs that carry no signal";
    f.fix = "fix optimisation first (overfit one batch, M14; learning-rate diagnosis, O6), then grow the model";
  }
  return {f};
}

}  // namespace gradsleuth::debug
