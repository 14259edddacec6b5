// M15 input-independent baseline (see model_checks.h): the model trained on a few batches with real
// and with zeroed inputs, and the verdict judged again with the run's validation loss.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/model/model_checks.h"
#include "debug/checks/model/model_util.h"
#include "debug/checks/run_check.h"

namespace gradsleuth::debug {

using namespace model_detail;

namespace {
// Whether loss(model(x), y) changes when the targets are shifted by one row, or (float) moved by 1 (a ranking
// loss reads only their differences); true where neither can tell (every class target the same).
bool loss_reads_targets(nn::Module& model, const std::pair<Tensor, Tensor>& b, const LossFunction& loss) {
  try {
    NoGradGuard ng;
    ModeSnapshot modes(model);
    model.eval();
    const Tensor& y = b.second;
    if (!y.defined() || y.dim() < 1 || y.size(0) < 2) return true;
    const Tensor rolled = rows_rolled(y);
    const bool same = amax(abs(rolled.to(kFloat64) - y.to(kFloat64))).item<double>() == 0.0;
    if (same && !y.is_floating_point()) return true;
    const auto reads = [&](const Tensor& out) {
      const double at = loss(out, y).item<double>();
      return (!same && loss_moves(loss, out, at, rolled)) ||
             (y.is_floating_point() && loss_moves(loss, out, at, y + 1.0));
    };
    const Tensor out = model(b.first);
    if (reads(out) || !out.is_floating_point()) return true;
    // Outputs where the target's term vanishes (a zero-initialised output layer: y * s is 0 whatever y) say
    // nothing: the loss is asked again at outputs moved by a fixed draw of noise.
    Generator g(2024);
    const double scale = 0.1 * (1.0 + amax(abs(out.to(kFloat64))).item<double>());
    return reads(out + randn(out.shape(), TensorOptions(out.dtype()), &g).to(out.device()) * scale);
  } catch (const std::exception&) {
    return true;
  }
}
// Labels for the outputs: floating, of the output's shape, several values, not the inputs.
bool targets_are_labels(nn::Module& model, const std::pair<Tensor, Tensor>& b) {
  try {
    NoGradGuard ng;
    ModeSnapshot modes(model);
    model.eval();
    const Tensor &x = b.first, &y = b.second;
    if (!y.defined() || !y.is_floating_point() || y.numel() < 2 || model(x).shape() != y.shape()) return false;
    const Tensor yd = y.to(kFloat64);
    return amax(yd).item<double>() > amin(yd).item<double>() &&
           !(x.shape() == y.shape() && amax(abs(x.to(kFloat64) - yd)).item<double>() <= 1e-6);
  } catch (const std::exception&) {
    return false;
  }
}
// M15's margin for the run's validation loss against the zeroed-input run's loss on the same split. A
// model that learned nothing from its inputs still beats the zeroed run on a small split by chance (its
// predictions lean towards some rows' labels): 3% on 120 rows of 3 classes. The margin shrinks as
// 1 / sqrt(rows), from baseline_margin down to baseline_val_margin at baseline_val_rows rows.
double val_margin(const ModelCheckOptions& o, int64_t rows) {
  const double m = o.baseline_val_margin * std::sqrt(static_cast<double>(o.baseline_val_rows) /
                                                     static_cast<double>(std::max<int64_t>(rows, 1)));
  return std::clamp(m, o.baseline_val_margin, std::max(o.baseline_margin, o.baseline_val_margin));
}
}  // namespace

namespace {
// Sequences padded at the end: in a batch x (B, T) of at least 4 positions, rows that end in a run of
// one value (2 or more positions), the same value on at least half the rows, with run lengths that
// differ between rows, and that value at most 5% of the positions before the runs. Returns the pad
// value and the median run length (0 when the batch shows no such padding).
std::pair<double, int64_t> trailing_padding(const Tensor& x) {
  if (!x.defined() || x.dim() != 2 || x.size(1) < 4 || x.size(0) < 4) return {0.0, 0};
  const int64_t B = x.size(0), T = x.size(1);
  const std::vector<double> v = x.detach().to(kCPU).to(kFloat64).contiguous().to_vector<double>();
  std::map<double, int64_t> ends;  // last value -> rows
  for (int64_t i = 0; i < B; ++i) ++ends[v[static_cast<size_t>(i * T + T - 1)]];
  const auto top =
      std::max_element(ends.begin(), ends.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  const double pad = top->first;
  std::vector<int64_t> runs;
  int64_t inside = 0, before = 0;
  for (int64_t i = 0; i < B; ++i) {
    int64_t r = 0;
    while (r < T && v[static_cast<size_t>(i * T + T - 1 - r)] == pad) ++r;
    if (r >= 2 && r < T) runs.push_back(r);
    for (int64_t t = 0; t < T - r; ++t) inside += v[static_cast<size_t>(i * T + t)] == pad ? 1 : 0;
    before += T - r;
  }
  if (2 * static_cast<int64_t>(runs.size()) < B || before == 0 || inside > 0.05 * static_cast<double>(before))
    return {0.0, 0};
  if (*std::min_element(runs.begin(), runs.end()) == *std::max_element(runs.begin(), runs.end())) return {0.0, 0};
  std::nth_element(runs.begin(), runs.begin() + static_cast<std::ptrdiff_t>(runs.size() / 2), runs.end());
  return {pad, runs[runs.size() / 2]};
}
}  // namespace

std::vector<Finding> input_independent_baseline(nn::Module& model, const std::vector<std::pair<Tensor, Tensor>>& train,
                                                const std::pair<Tensor, Tensor>& held_out, const LossFunction& loss,
                                                const ModelCheckOptions& o, const std::pair<Tensor, Tensor>* validation,
                                                int64_t validation_rows) {
  ModeSnapshot modes(model);
  ParamSnapshot snap(model);
  // An objective that does not read its targets (a density's likelihood of its inputs, a dummy target
  // beside it): the loss is the same with other targets, and no labels are there to predict.
  if (!loss_reads_targets(model, held_out, loss)) {
    Finding f;
    f.check = "M15";
    f.module = "(model)";
    if (targets_are_labels(model, held_out)) {
      f.severity = Severity::Warning;
      f.kind = Kind::LossIgnoresTargets;
      f.title =
          "the loss does not read its targets (the same value with other targets), yet they are labels for the "
          "model's outputs: targets of the output's shape, not the inputs, taking several values";
      f.cause =
          "a hand-written loss that reads the prediction where it should read the target (a BCE written "
          "(1 - y) log(p) for (1 - y) log(1 - p), the wrong variable): it rewards the same outputs whatever "
          "the labels say";
      f.fix =
          "score one example with two different targets by hand: the values must differ; compare the "
          "function with the library's loss (nn::BCEWithLogitsLoss, nn::MSELoss) on one batch";
    } else {
      f.severity = Severity::Info;
      f.kind = Kind::TargetsUnread;
      f.title =
          "the loss does not read its targets (the same value with other targets): an objective of the inputs "
          "alone, as a density's likelihood is, has no labels for the inputs to predict; the test does not apply";
    }
    return {f};
  }
  // Each run's lowest held-out loss, read at eight points of its budget and at its end: a model with
  // many parameters per example (an embedding over token ids) overfits the few batches and its held-out
  // loss climbs back above the zeroed run's, which learns the labels' marginal; on the way it was lower.
  // With zeroed inputs the run also reads the validation rows: its loss there is the baseline the
  // run's own validation loss is compared with after the run (revise_input_baseline).
  double zero_val = std::numeric_limits<double>::infinity();
  auto best_held_out = [&](int64_t steps, bool zeroed) {
    double best = std::numeric_limits<double>::infinity();
    const int64_t every = std::max<int64_t>(1, steps / 8);
    short_run(model, train, loss, steps, o.baseline_lr, zeroed, -1.0, nullptr, 1.0, nullptr, [&](int64_t s) {
      if (s % every != 0 && s != steps) return;
      double v;
      {
        ModeSnapshot training_modes(model);  // eval_loss switches to eval mode; the run goes on as it was
        v = eval_loss(model, held_out, loss, zeroed);
        if (zeroed && validation != nullptr) {
          const double w = eval_loss(model, *validation, loss, true);
          if (std::isfinite(w)) zero_val = std::min(zero_val, w);
        }
      }
      if (std::isfinite(v)) best = std::min(best, v);
    });
    snap.restore();
    return std::isfinite(best) ? best : std::nan("");
  };
  // A model that raises an error on inputs of zeros (a sequence of nothing but padding has no last
  // token to gather) cannot give the zeroed run; the real run's errors are the model's own (W2).
  std::string zero_error;
  auto compare = [&](int64_t steps) {
    const double with_inputs = best_held_out(steps, false);
    double zeroed = std::nan("");
    try {
      zeroed = best_held_out(steps, true);
    } catch (const std::exception& e) {
      snap.restore();
      zero_error = e.what();
    }
    return std::make_pair(with_inputs, zeroed);
  };
  int64_t steps = o.baseline_steps;
  auto [real, zero] = compare(steps);
  // A model still on its starting plateau (a sigmoid stack) has learnt nothing yet, from real
  // inputs or zeroed ones: before it is said to learn nothing from its inputs, the comparison
  // runs again with a budget 4x as long.
  if (zero_error.empty() && !(std::isfinite(real) && real < zero * (1.0 - o.baseline_margin))) {
    steps *= 4;
    std::tie(real, zero) = compare(steps);
  }
  Finding f;
  f.check = "M15";
  f.module = "(model)";
  f.evidence = {{"held-out loss, real inputs (the lowest of the run)", real, ""},
                {"held-out loss, zeroed inputs (the lowest of the run)", zero,
                 "real must be lower by " + fmt_num(100 * o.baseline_margin) + "%"},
                {"training steps of each run", static_cast<double>(steps),
                 "base " + std::to_string(o.baseline_steps) + ", 4x when the base budget shows no difference"}};
  if (std::isfinite(zero_val) && validation_rows > 0) {
    f.evidence.push_back(
        {"validation loss, zeroed inputs (the lowest of the run)", zero_val,
         "the run's validation loss must be lower by " + fmt_num(100 * val_margin(o, validation_rows)) + "%"});
    f.evidence.push_back({"validation rows", static_cast<double>(validation_rows),
                          "the margin shrinks with the split: " + fmt_num(100 * o.baseline_val_margin) + "% at " +
                              std::to_string(o.baseline_val_rows) + " rows or more"});
  }
  if (std::isfinite(real) && real < zero * (1.0 - o.baseline_margin)) {
    f.severity = Severity::Info;
    f.title = "the model uses its inputs: held-out loss " + fmt_num(real) + " with real inputs vs " + fmt_num(zero) +
              " with zeroed inputs";
  } else if (std::isfinite(real) && !std::isfinite(zero)) {
    // Inputs of zeros the model cannot take (token ids that are all the pad id, pooled over no token as
    // 0 / 0; a log or a division by the input): the zeroed run has no loss to compare with.
    f.severity = Severity::Info;
    f.title =
        (zero_error.empty() ? "not judged: with zeroed inputs the held-out loss is not finite (" + fmt_num(zero) + ")"
                            : "not judged: with zeroed inputs the model raises an error (" + zero_error + ")") +
        ": an input of zeros is outside what the model takes (all padding, a division or a log of the "
        "input), so there is no baseline to compare with";
  } else {
    f.severity = Severity::Warning;
    f.title = "training on zeroed inputs does as well as on the real ones: the model learns nothing from its inputs";
    f.cause =
        "the inputs carry no usable signal for the labels: inputs and labels misaligned (shuffled "
        "separately), a bug that drops the input (multiplied by 0, detached), or labels that do not depend "
        "on the inputs";
    f.fix = "check the alignment of (x, y) pairs (D4) and the data pipeline; print a few inputs with their labels";
    // Right-padded sequences: a model that reads its state at the last position reads it after the padding.
    const auto [pad, run] = train.empty() ? std::pair<double, int64_t>{0.0, 0} : trailing_padding(train.front().first);
    if (run > 0) {
      f.title += "; the sequences end in padding (" + fmt_num(pad) + " on the last " + std::to_string(run) + " of " +
                 std::to_string(train.front().first.size(1)) + " positions, the median row)";
      f.evidence.push_back({"median padding run at the end of a row", static_cast<double>(run),
                            "runs of one value that differ in length between rows"});
      f.cause =
          "the sequences are padded at the end and the model reads its state at the last position (a recurrent "
          "model's final hidden state, the last token's output): after the padding it has forgotten the sequence. "
          "Otherwise: " +
          f.cause;
      f.fix =
          "read each sequence's state at its last real position (gather at length - 1), or pad at the start; "
          "then check the alignment of (x, y) pairs (D4)";
    }
  }
  return {f};
}

void revise_unread_targets(Report& data, const Report& gate) {
  if (std::none_of(gate.findings().begin(), gate.findings().end(),
                   [](const Finding& f) { return f.is("M15", Kind::TargetsUnread); }))
    return;
  for (size_t i = 0; i < data.size(); ++i) {
    const Finding& d = data.findings()[i];
    // D10's random transform on validation: an objective without labels draws its views on every split.
    const bool views = d.check == "D10" && d.value_of("values that differ between the two reads") > 0;
    if (!d.fires() || (d.check != "D3" && d.check != "D9" && d.check != "D15" && !views)) continue;
    Finding f = d;
    f.severity = Severity::Info;
    f.title += views ? " (an objective without labels, as M15 found: its random views are drawn on every split)"
                     : " (the loss does not read these targets: M15 found the same loss with other targets)";
    f.fix = views ? "none needed; seed the validation views to compare epochs on the same ones"
                  : "none needed: the targets beside the inputs are a placeholder the objective ignores";
    data.replace(i, f);
  }
}

void revise_input_baseline(Report& gate, const TrainingHistory& h, const ModelCheckOptions& o) {
  double last = std::nan("");
  for (double v : h.epoch_val_loss)
    if (std::isfinite(v)) last = v;
  if (!std::isfinite(last)) return;
  for (size_t i = 0; i < gate.size(); ++i) {
    const Finding& g = gate.findings()[i];
    if (g.check != "M15" || !g.fires()) continue;
    // The zeroed-input run's loss on validation rows where it was measured (the run's validation loss
    // is taken over the same split), else on the held-out training batch, whose class mix differs.
    double zero = std::nan(""), zero_val = std::nan(""), rows = 0.0;
    for (const Evidence& e : g.evidence) {
      if (e.name.rfind("held-out loss, zeroed inputs", 0) == 0) zero = e.value;
      if (e.name.rfind("validation loss, zeroed inputs", 0) == 0) zero_val = e.value;
      if (e.name == "validation rows") rows = e.value;
    }
    const bool on_val = std::isfinite(zero_val) && rows > 0;
    const double margin = on_val ? val_margin(o, static_cast<int64_t>(rows)) : o.baseline_margin;
    if (on_val) zero = zero_val;
    if (!(std::isfinite(zero) && last < zero * (1.0 - margin))) continue;
    Finding f = g;
    f.severity = Severity::Info;
    f.title =
        "the few batches before training did not show the model using its inputs, but the run did: its "
        "validation loss " +
        fmt_num(last) + " is below the zeroed-input run's " + fmt_num(zero);
    f.evidence.push_back({"the run's last validation loss", last,
                          "< " + fmt_num(1.0 - margin) +
                              " x the zeroed-input loss: the run learned from "
                              "its inputs (info)"});
    f.cause =
        "a model with many parameters per example (an embedding over token ids, a recurrent net) needs more than "
        "the gate's few batches to generalise to a held-out batch";
    f.fix = "nothing";
    gate.replace(i, f);
  }
}

}  // namespace gradsleuth::debug
