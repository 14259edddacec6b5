// L6's home: the reduction of the loss, judged at the gate (the gradient's growth when the batch is
// doubled; a module declared with reduction=sum) and over the run, from the gradient that reaches the
// loss module's value during backward: what the loop multiplies it by (a summed loss divided by the
// batch size is a mean; a mean divided by it again, or a loss negated, is a fault of the loop).
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/loss/loss_checks.h"
#include "debug/checks/model/behaviour.h"
#include "debug/checks/run_check.h"
#include "debug/evidence/tensor_stats.h"
#include "optim/grad_scaler.h"

namespace gradsleuth::debug {

using detail::kNaN;
using detail::make;
using detail::num;

// ---- L6 reduction ---------------------------------------------------------------------------

namespace {
// Every module under m (pre-order), without shared_from_this (works for a model on the stack).
void walk(nn::Module& m, std::vector<nn::Module*>& out) {
  out.push_back(&m);
  for (auto& [name, c] : m.named_children()) walk(*c, out);
}

double grad_norm(const std::vector<Tensor>& params) {
  double sq = 0.0;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const double n = summarize(g).norm;
    sq += n * n;
  }
  return std::sqrt(sq);
}
}  // namespace

std::vector<Finding> check_loss_reduction(nn::Module& model,
                                          const std::function<Tensor(const Tensor&, const Tensor&)>& loss,
                                          const Tensor& x, const Tensor& y, const LossCheckOptions& opts) {
  GS_CHECK(x.defined() && y.defined() && x.dim() >= 1 && y.dim() >= 1, "check_loss_reduction",
           "needs a batch x (B, ...) and targets y (B, ...)");
  std::vector<nn::Module*> modules;
  walk(model, modules);
  std::vector<bool> modes;
  for (nn::Module* m : modules) modes.push_back(m->is_training());
  std::vector<Tensor> params;
  for (const Tensor& p : model.parameters())
    if (p.requires_grad()) params.push_back(p);
  std::vector<Tensor> saved_grads;
  for (Tensor& p : params) {
    saved_grads.push_back(p.grad());
    p.set_grad(Tensor());
  }
  std::vector<std::pair<std::string, Tensor>> saved_buffers;
  {
    NoGradGuard ng;
    for (auto& [name, b] : model.named_buffers()) saved_buffers.emplace_back(name, b.detach().clone());
  }
  auto restore = [&] {
    for (size_t i = 0; i < modules.size(); ++i) modules[i]->train(modes[i]);  // pre-order: children last
    for (size_t i = 0; i < params.size(); ++i) params[i].set_grad(saved_grads[i]);
    for (auto& [name, b] : saved_buffers) model.set_tensor(name, b);
  };

  // The layers that are random in train mode, whatever their type (the probe
  // restores everything it touches): each draw would change the gradient norm.
  const ModeProbe probe = probe_mode_dependence(model, x);
  double g1 = 0.0, g2 = 0.0, again = 0.0;  // again: the batch's gradient norm a second time
  try {
    for (const nn::ModulePtr& m : probe.stochastic_modules()) set_own_mode(*m, false);
    auto norm_for = [&](const Tensor& xb, const Tensor& yb) {
      for (Tensor& p : params) p.set_grad(Tensor());
      Tensor l = loss(model(xb), yb);
      GS_CHECK(l.numel() == 1, "check_loss_reduction",
               "the loss must be one number (reduction mean or sum), got shape ", shape_of(l));
      l.backward();
      return grad_norm(params);
    };
    g1 = norm_for(x, y);
    again = norm_for(x, y);
    g2 = norm_for(cat({x, x}, 0), cat({y, y}, 0));
  } catch (...) {
    restore();
    throw;
  }
  restore();

  const double ratio = g1 > 0 ? g2 / g1 : kNaN;
  // A forward that draws randomness the mode probe cannot switch off (blocks skipped at random by the
  // model's own generator) gives the same batch another gradient each time: no ratio to judge.
  if (std::isfinite(ratio) && std::fabs(again - g1) > 1e-4 * g1) {
    Finding f = make("L6", Severity::Info,
                     "the reduction could not be judged: the same batch gives another gradient each time (norms " +
                         fmt_num(g1) + " and " + fmt_num(again) + "): the forward draws randomness in train mode");
    f.evidence = {{"gradient norm, batch", g1, ""},
                  {"gradient norm, the same batch again", again, "must equal the first"},
                  {"gradient norm, batch twice", g2, ""}};
    f.fix = "none needed; to judge the reduction, make the training forward deterministic for one call";
    return {f};
  }
  if (!std::isfinite(ratio)) {
    Finding f = make("L6", Severity::Info,
                     "the reduction could not be judged: the gradient norm for the batch is " + fmt_num(g1));
    f.evidence = {{"gradient norm, batch", g1, "must be finite and > 0"}, {"gradient norm, batch twice", g2, ""}};
    f.fix = "run the test on a batch whose loss has a gradient (O1 checks the gradients themselves)";
    return {f};
  }
  const bool sum = ratio > opts.reduction_ratio;
  Finding f = make(
      "L6", sum ? Severity::Warning : Severity::Info,
      sum ? "the loss is summed over the batch, not averaged: the gradient grows " + fmt_num(ratio) +
                "x when the batch is doubled"
          : "the loss is averaged over the batch: doubling the batch leaves the gradient at " + fmt_num(ratio) + "x");
  if (sum) f.kind = Kind::ReductionSum;
  f.shape = "x " + shape_of(x) + ", y " + shape_of(y);
  f.evidence = {{"gradient norm, batch (B = " + num(x.size(0)) + ")", g1, ""},
                {"gradient norm, the batch twice (2B)", g2, ""},
                {"ratio", ratio, "1 for mean, 2 for sum; > " + fmt_num(opts.reduction_ratio) + " warns"}};
  if (sum) {
    f.cause =
        "the loss uses reduction sum where mean was meant: the gradient, and so the step size, "
        "grows with the batch size; a learning rate tuned for one batch size diverges at a larger one";
    f.fix =
        "use Reduction::Mean (the default), or divide the summed loss by the batch size; if the sum is "
        "intended, scale the learning rate by 1 / B";
  } else {
    f.fix = "none needed";
  }
  return {f};
}

std::vector<Finding> check_loss_reduction(const nn::Loss& loss) {
  if (loss.reduction() != nn::Reduction::Sum) return {};
  Finding f = make("L6", Severity::Warning,
                   loss.type_name() + " is declared with reduction=sum: the gradient scale grows with the batch size");
  f.kind = Kind::ReductionSum;
  f.module = loss.type_name();
  f.evidence = {{"reduction is sum (1 = yes)", 1.0, "sum warns; mean is the convention"}};
  f.cause =
      "Reduction::Sum adds the per-example losses: doubling the batch doubles the gradient, so the learning "
      "rate silently depends on the batch size (loss.mean() vs loss.sum() changes the gradient "
      "scale)";
  f.fix = "use Reduction::Mean, or keep Sum on purpose and scale the learning rate by 1 / B";
  return {f};
}

namespace {
// What the loop divided the loss by, from the gradient m that reached the loss's value (dRoot/dLoss):
// 1 / (m n) for the count of terms n that makes it a whole number from 1 to 64, else NaN.
double loop_divisor(double m, const std::vector<double>& terms) {
  for (const double n : terms) {
    const double d = m > 0 && n > 0 ? 1.0 / (m * n) : kNaN;
    if (d >= 0.98 && d <= 64.5 && std::fabs(d - std::round(d)) <= 0.02 * d) return std::round(d);
  }
  return kNaN;
}

// One sampled loss call: the gradient that reached the loss module's value during backward
// (dRoot/dLoss, the loss scaler's factor taken out), the rows of its target, and whether the module
// is a library loss that averages (its reduction is mean).
struct LossCall {
  int64_t step = 0;
  double multiplier = kNaN;
  int64_t rows = 0;
  bool mean = false;
  std::vector<double> terms;  // the counts the loss may have summed (loop_divisor)
};

// Every call's gradient times its rows (and times the calls of its step, for a loop that also divides
// by the k batches it accumulates) is 1: a mean divided by the batch size again. A batch of fewer
// than 4 rows, or as many rows as accumulated batches, cannot tell the two divisions apart.
bool divided_again(const std::vector<LossCall>& calls) {
  if (calls.size() < 2) return false;
  std::map<int64_t, int64_t> per_step;
  for (const LossCall& c : calls) ++per_step[c.step];
  return std::all_of(calls.begin(), calls.end(), [&](const LossCall& c) {
    const double b = static_cast<double>(c.rows), k = static_cast<double>(per_step[c.step]);
    const auto one = [](double v) { return std::fabs(v - 1.0) <= 0.02; };
    return c.mean && c.rows >= 4 && c.rows != per_step[c.step] && (one(c.multiplier * b) || one(c.multiplier * b * k));
  });
}

// L6 on the sampled steps: the gradient that reaches the loss module's value during backward tells
// what the loop did with it. A summed loss divided by the batch size is a mean, which the gate's probe
// of the module alone cannot see (recorded for revise_loss_reduction); a mean divided by the batch size
// again, and a loss negated, are faults of the loop (judged at the end of the run).
class LossDivisionRunCheck final : public RunCheck {
 public:
  std::string ids() const override { return "L6"; }
  uint32_t events() const override { return RunEvent::LossValue | RunEvent::Finish | RunEvent::Series; }
  void loss_value(RunContext& c, nn::Loss& l, const Tensor& target) override {
    Tensor v = c.loss_output;
    if (!c.sampled() || !v.defined() || !v.requires_grad() || !target.defined()) return;
    // The terms the loss may have summed: its rows, its elements, its targets counted (ignore_index out).
    const int64_t rows = target.dim() >= 1 ? target.size(0) : 1;
    std::vector<double> terms = {static_cast<double>(rows), static_cast<double>(target.numel())};
    if (target.dtype() == kInt64 && (loss_type::cross_entropy(l) || loss_type::nll(l))) {
      NoGradGuard ng;
      terms.push_back(sum(ne(target.detach(), loss_type::ignore_index(l)).to(kFloat64)).item<double>());
    }
    LossCall call;
    call.step = c.steps + 1;
    call.rows = rows;
    call.mean = l.reduction() == nn::Reduction::Mean &&
                (loss_type::cross_entropy(l) || loss_type::nll(l) || loss_type::elementwise(l));
    call.terms = std::move(terms);
    v.register_hook([calls = calls_, call, scaler = c.scaler](const Tensor& g) {
      if (g.numel() != 1) return Tensor();
      calls->push_back(call);
      // The scaler's factor is not the loop's.
      calls->back().multiplier = g.item<double>() / (scaler ? scaler->get_scale() : 1.0);
      return Tensor();
    });
    c.note_ran("L6");
  }
  void finish(RunContext& c) override {
    const std::vector<LossCall>& calls = *calls_;
    if (calls.empty()) return;
    std::vector<double> m;
    for (const LossCall& call : calls) m.push_back(call.multiplier);
    const double typical = detail::median(m);
    const auto n = static_cast<double>(calls.size());
    if (std::all_of(m.begin(), m.end(), [](double v) { return v < 0; })) {
      Finding f = make("L6", Severity::Warning,
                       "the training loop backpropagates the loss times " + fmt_num(typical) +
                           ": the optimizer climbs the loss instead of descending it");
      f.kind = Kind::LossNegated;
      f.evidence = {{"gradient that reached the loss's value (median)", typical, "< 0 on every sampled call warns"},
                    {"sampled loss calls", n, ""}};
      f.cause =
          "the value given to backward() is a negative multiple of the loss (loss = -loss, a sign flipped in a "
          "combined objective, a score maximised that should be minimised): every step moves the weights uphill, "
          "and the loss rises until it overflows";
      f.fix =
          "backpropagate the loss itself, or a positive multiple of it; to maximise a score, minimise its "
          "negative and pass that to backward()";
      c.add(std::move(f));
    } else if (divided_again(calls)) {
      const LossCall& first = calls.front();
      Finding f = make("L6", Severity::Warning,
                       "the loss is already a mean over the batch, and the training loop divides it by the batch size "
                       "again: each step's gradient is " +
                           num(first.rows) + "x too small");
      f.kind = Kind::MeanDividedAgain;
      f.evidence = {{"gradient that reached the loss's value (median)", typical, ""},
                    {"rows in the first sampled batch", static_cast<double>(first.rows), ""},
                    {"gradient x rows (x accumulated batches)", first.multiplier * static_cast<double>(first.rows),
                     "1 on every sampled call of a mean warns"},
                    {"sampled loss calls", n, ""}};
      f.cause =
          "loss / B after a loss whose reduction is mean: the mean has divided by B already. Under SGD the "
          "effective learning rate is B times too small; Adam's steps barely change, but weight decay, gradient "
          "clipping and the logged loss act on a loss B times too small";
      f.fix = "drop the division: divide by the batch size only a loss whose reduction is sum";
      c.add(std::move(f));
    }
  }
  void series(TrainingHistory& h) const override {
    h.loss_divisors.clear();
    for (const LossCall& call : *calls_) h.loss_divisors.push_back(loop_divisor(call.multiplier, call.terms));
  }

 private:
  std::shared_ptr<std::vector<LossCall>> calls_ = std::make_shared<std::vector<LossCall>>();
};
}  // namespace

void revise_loss_reduction(Report& found, const std::vector<double>& loss_divisors) {
  if (loss_divisors.empty() ||
      !std::all_of(loss_divisors.begin(), loss_divisors.end(), [](double d) { return std::isfinite(d); }))
    return;
  const double k = *std::max_element(loss_divisors.begin(), loss_divisors.end());
  for (size_t i = 0; i < found.size(); ++i) {
    if (!found.findings()[i].is("L6", Kind::ReductionSum) || found.findings()[i].severity != Severity::Warning)
      continue;
    Finding f = found.findings()[i];
    f.severity = Severity::Info;
    f.title = "the loss module sums over the batch, and the training loop divides its value by the terms it summed" +
              std::string(k > 1 ? " (and by the " + fmt_num(k) + " batches it accumulates)" : "") +
              ": each step is a mean's";
    f.evidence.push_back({"the loop's divisor, in terms summed (largest of " +
                              num(static_cast<int64_t>(loss_divisors.size())) + " sampled steps)",
                          k, "a whole number on every sampled step: a mean"});
    f.cause =
        "the gradient that reached the loss's value during backward was 1 / (the number of terms it summed), "
        "as for sum(...) / B or a sum over tokens divided by the tokens counted";
    f.fix = "none needed";
    found.replace(i, f);
  }
}

std::unique_ptr<RunCheck> make_loss_division_run_check(const MonitorOptions&) {
  return std::make_unique<LossDivisionRunCheck>();
}

// ---- L6 at the end of the run: a reduction before the error -------------------------------------
std::vector<Finding> check_rows_cancel(double batch_loss, const std::vector<double>& row_losses,
                                       const std::string& split, const LossCheckOptions& opts) {
  if (row_losses.size() < 8 || !std::isfinite(batch_loss) || batch_loss < 0) return {};
  double sum = 0.0;
  for (double v : row_losses) {
    if (!std::isfinite(v) || v < 0) return {};
    sum += v;
  }
  const double rows = sum / static_cast<double>(row_losses.size());
  if (!(rows > 0) || !(batch_loss < opts.rows_cancel_share * rows)) return {};
  Finding f = make("L6", Severity::Warning,
                   "the loss of a batch (" + fmt_num(batch_loss) +
                       ") is far below its rows' mean loss, each row "
                       "scored alone (" +
                       fmt_num(rows) +
                       "): errors of opposite signs cancel before the loss "
                       "measures them");
  f.kind = Kind::RowsCancel;
  f.evidence = {{"the trained model's " + split + " loss, in its batches", batch_loss,
                 "< " + fmt_num(opts.rows_cancel_share) + " x the next warns"},
                {"mean of each " + split + " example's loss alone", rows, ""},
                {"examples scored alone", static_cast<double>(row_losses.size()), ""}};
  f.cause =
      "the loss takes the batch's mean (or sum) before the error's absolute value or square: |mean(p - y)| "
      "for mean(|p - y|), (mean(p) - mean(y))^2 for mean((p - y)^2). The batch's errors above and below the "
      "targets cancel, so the loss is near 0 while every prediction may be far off, and the validation "
      "loss measures the same cancellation";
  f.fix = "take the error of each element first, then reduce: abs(p - y).mean(), square(p - y).mean()";
  return {f};
}

void confirm_rows_cancel(std::vector<Finding>& found, nn::Module& model, const Tensor& x, const Tensor& y,
                         const std::function<Tensor(const Tensor&, const Tensor&)>& loss) {
  if (found.empty() || !x.defined() || !y.defined() || x.dim() < 1 || x.size(0) < 4 || y.size(0) != x.size(0)) return;
  try {
    NoGradGuard ng;
    ModeSnapshot modes(model);
    model.eval();
    const int64_t n = x.size(0) / 2 * 2;  // an even number of rows: the moves below sum to 0
    const Tensor xs = x.narrow(0, 0, n), ys = y.narrow(0, 0, n);
    const Tensor out = model(xs).detach();
    if (!out.is_floating_point() || out.dim() < 1 || out.size(0) != n) return;
    const double a = loss(out, ys).item<double>();
    if (!std::isfinite(a) || a < 0) return;
    // Each warning becomes info, with what the batch's loss did under the test that disproved it.
    const auto no_cancellation = [&found](const std::string& why, const Evidence& e, const std::string& cause) {
      for (Finding& f : found) {
        if (!f.is("L6", Kind::RowsCancel)) continue;
        f.severity = Severity::Info;
        f.title += "; but " + why;
        f.evidence.push_back(e);
        f.cause = cause;
        f.fix = "none needed";
      }
    };
    // The targets' rows rolled by half the batch, the outputs kept: a loss that reduces the errors first
    // sees only the sums of outputs and targets, which a permutation of rows keeps. One that moves
    // reads which row holds which target: a loss over the batch as a whole (a PU risk estimate whose
    // terms subtract by design, a ranking or risk-set likelihood), not a cancellation.
    std::vector<int64_t> roll(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) roll[static_cast<size_t>(i)] = (i + n / 2) % n;
    const double r = loss(out, ys.index_select(0, tensor(roll, {n}).to(ys.device()))).item<double>();
    double scale = 0.0;  // the loss of each of the first 8 rows alone: the size of an error
    const int64_t k = std::min<int64_t>(n, 8);
    for (int64_t i = 0; i < k; ++i) scale += loss(out.narrow(0, i, 1), ys.narrow(0, i, 1)).item<double>() / k;
    if (std::isfinite(scale) && std::isfinite(r) && std::fabs(r - a) > 0.05 * std::max(scale, a)) {
      no_cancellation("the batch's targets given to other rows move it to " + fmt_num(r) +
                          ": the loss pairs each row with its own target, it does not sum the errors first",
                      {"the batch's loss with its targets' rows rolled by half the batch", r,
                       "differs from the loss by > 5% of a row's loss: no cancellation (info)"},
                      "a loss over the batch as a whole (terms that subtract by design, as a non-negative PU risk; a "
                      "ranking or survival likelihood over the batch's rows) scores one row alone differently from "
                      "the batch, without any error cancelling");
      return;
    }
    // Every row's output moved by +c or -c in turn (the targets untouched, whatever columns they carry):
    // a loss of each error's size grows by about c^2 (or c), one that averages the errors before it
    // measures them does not move, since the moves sum to 0.
    std::vector<double> sign(static_cast<size_t>(n));
    for (size_t i = 0; i < sign.size(); ++i) sign[i] = i % 2 == 0 ? 1.0 : -1.0;
    Shape s(static_cast<size_t>(out.dim()), 1);
    s[0] = n;
    // c well above the errors (the loss is their mean square or mean size): most rows' errors take its size.
    const double c = 1.0 + 3.0 * std::max({summarize(out).std, std::sqrt(a), a});
    const Tensor moved = out + tensor(sign, s).to(out.dtype()).to(out.device()) * c;
    const double b = loss(moved, ys).item<double>();
    if (!std::isfinite(b) || !(b > a + 0.25 * c)) return;  // it cancels
    no_cancellation("moving the rows' outputs by +" + fmt_num(c) + " and -" + fmt_num(c) + " in turn raises it to " +
                        fmt_num(b) + ": no cancellation, the rows weigh differently in the batch (sample weights)",
                    {"the batch's loss with its outputs moved by +-c in turn", b,
                     "> the loss + c/4: each error's size counts (info)"},
                    "a weighted mean, sum(w e) / sum(w), scores a row alone at its own error and the batch at the "
                    "weights' mean: the two differ without any error cancelling");
  } catch (const std::exception&) {
  }
}

}  // namespace gradsleuth::debug
