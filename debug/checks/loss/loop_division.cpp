// L6 over the run: what the training loop divides the loss module's value by, read from the gradient that
// reaches it during backward, and the gate's L6 judged again with it (see loss_checks.h).
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/loss/loss_checks.h"
#include "debug/checks/run_check.h"
#include "optim/grad_scaler.h"

namespace gradsleuth::debug {

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

// L6 on the sampled steps: the gradient that reaches the loss module's value during backward tells
// what the loop did with it (a summed loss divided by the batch size is a mean, which the gate's
// probe of the module alone cannot see). Recorded for revise_loss_reduction.
class LossDivisionRunCheck final : public RunCheck {
 public:
  std::string ids() const override { return "L6"; }
  uint32_t events() const override { return RunEvent::LossValue | RunEvent::Series; }
  void loss_value(RunContext& c, nn::Loss& l, const Tensor& target) override {
    Tensor v = c.loss_output;
    if (!c.sampled() || !v.defined() || !v.requires_grad() || !target.defined()) return;
    // The terms the loss may have summed: its rows, its elements, its targets counted (ignore_index out).
    std::vector<double> terms = {static_cast<double>(target.dim() >= 1 ? target.size(0) : 1),
                                 static_cast<double>(target.numel())};
    if (target.dtype() == kInt64 && (loss_type::cross_entropy(l) || loss_type::nll(l))) {
      NoGradGuard ng;
      terms.push_back(sum(ne(target.detach(), loss_type::ignore_index(l)).to(kFloat64)).item<double>());
    }
    v.register_hook([seen = seen_, terms, scaler = c.scaler](const Tensor& g) {
      if (g.numel() == 1)  // a loss scaler's factor is not the loop's division
        seen->push_back(loop_divisor(g.item<double>() / (scaler ? scaler->get_scale() : 1.0), terms));
      return Tensor();
    });
    c.note_ran("L6");
  }
  void series(TrainingHistory& h) const override { h.loss_divisors = *seen_; }

 private:
  std::shared_ptr<std::vector<double>> seen_ = std::make_shared<std::vector<double>>();
};
}  // namespace

void revise_loss_reduction(Report& found, const std::vector<double>& loss_divisors) {
  if (loss_divisors.empty() ||
      !std::all_of(loss_divisors.begin(), loss_divisors.end(), [](double d) { return std::isfinite(d); }))
    return;
  const double k = *std::max_element(loss_divisors.begin(), loss_divisors.end());
  for (size_t i = 0; i < found.size(); ++i) {
    if (found.findings()[i].check != "L6" || found.findings()[i].severity != Severity::Warning) continue;
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

}  // namespace gradsleuth::debug
