// O3 during training, the monitor's run check for a penalty on the weights that the loop adds around the
// loss (loss = data + lambda * sum w^2 written in the loop, where the Session's loss holds the data term
// only). It gathers on the first step: the step's gradient, and the loss's own gradient on the same batch
// at the same weights (the forward again, with the random draws the step's forward made); norm_history.cpp,
// O3's home, judges them (judge_loop_penalty).
#include <cmath>
#include <limits>
#include <memory>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/hooks.h"
#include "debug/checks/optim/optim_checks.h"
#include "debug/checks/run_check.h"

namespace gradsleuth::debug {

namespace {

double dot64(const Tensor& a, const Tensor& b) { return sum(a * b).item<double>(); }

class LoopPenaltyRunCheck final : public RunCheck {
 public:
  explicit LoopPenaltyRunCheck(const OptimCheckOptions& o) : o_(o) {}
  std::string ids() const override { return "O3"; }
  uint32_t events() const override { return RunEvent::Forward | RunEvent::BeforeStep | RunEvent::Series; }
  void series(TrainingHistory& h) const override {
    h.loop_penalty = penalty_;
    h.loop_penalty_scale = scale_;
  }
  void forward(RunContext& c, const Tensor&) override {
    // The first training forward of the first step: the random stream it draws from (its dropout masks).
    if (done_ || c.steps > 0 || !GradMode::is_enabled() || rng_) return;
    rng_ = std::make_unique<Generator>(default_generator());
  }
  void before_step(RunContext& c, bool) override {
    if (done_) return;
    done_ = true;
    if (!rng_ || !c.loss || !c.x.defined() || !c.y.defined() || c.autocast || c.scaler || !c.loss_seen) return;
    LoopPenaltyMeasure m;
    m.step = c.steps + 1;
    std::vector<std::pair<std::string, Tensor>> weights;
    std::vector<Tensor> applied;
    for (auto& [name, p] : c.model.named_parameters())
      if (p.requires_grad() && p.dim() >= 2 && p.grad().defined() && p.dtype() == kFloat32) {
        weights.emplace_back(name, p);
        applied.push_back(p.grad().detach().to(kFloat64));
      }
    if (weights.empty()) return;
    tensor_list own;
    c.pause(true);  // the probe's forward is not a training statistic
    try {
      QuietProbe quiet(c.model);
      default_generator() = *rng_;  // the step's dropout masks again
      EnableGradGuard eg;
      const Tensor l = (*c.loss)(c.model(c.x), c.y);
      tensor_list ws;
      for (auto& [name, p] : weights) ws.push_back(p);
      if (l.numel() == 1 && l.requires_grad()) own = autograd::grad({l}, ws, {}, false, false, true);
    } catch (const std::exception&) {
      own.clear();  // the forward cannot be repeated on its own (it needs the loop's other inputs)
    }
    c.pause(false);
    if (own.size() != weights.size()) return;
    // G = a g + lambda_i w_i: with w_i's direction taken out of G and g, a is the least-squares scale
    // over every matrix; then lambda_i = <G - a g, w_i> / |w_i|^2.
    NoGradGuard ng;
    std::vector<Tensor> g, w;
    std::vector<double> ww;  // |w_i|^2
    double num = 0, den = 0, total = 0;
    for (size_t i = 0; i < weights.size(); ++i) {
      g.push_back(own[i].defined() ? own[i].detach().to(kFloat64) : zeros_like(applied[i]));
      w.push_back(weights[i].second.detach().to(kFloat64));
      ww.push_back(dot64(w[i], w[i]));
      const Tensor wn = ww[i] > 0 ? w[i] / std::sqrt(ww[i]) : w[i];
      const Tensor gp = g[i] - wn * dot64(g[i], wn), Gp = applied[i] - wn * dot64(applied[i], wn);
      num += dot64(Gp, gp);
      den += dot64(gp, gp);
      total += dot64(applied[i], applied[i]);
    }
    if (!(den > 0) || !(total > 0) || !std::isfinite(num)) return;
    m.scale = num / den;
    double rest = 0;
    for (size_t i = 0; i < weights.size(); ++i) {
      const Tensor r = applied[i] - g[i] * m.scale;
      const double lambda = ww[i] > 0 ? dot64(r, w[i]) / ww[i] : 0.0;
      const Tensor e = r - w[i] * lambda;
      rest += dot64(e, e);
      const double ag = std::fabs(m.scale) * std::sqrt(dot64(g[i], g[i]));
      const double pen = std::fabs(lambda) * std::sqrt(ww[i]);
      m.layers.push_back({weights[i].first, lambda, ag > 0 ? pen / ag : (pen > 0 ? INFINITY : 0.0)});
    }
    m.unexplained = rest / total;
    if (m.unexplained <= o_.loop_penalty_unexplained && m.scale > 0) {
      scale_ = m.scale;
      for (const LoopPenaltyLayer& l : m.layers)
        if (l.share >= o_.loop_penalty_present) penalty_.emplace_back(l.name, l.lambda);
    }
    c.add_all(judge_loop_penalty(m, o_));
    c.note_ran("O3");
  }

 private:
  OptimCheckOptions o_;
  std::unique_ptr<Generator> rng_;
  bool done_ = false;
  std::vector<std::pair<std::string, double>> penalty_;  // the penalised matrices and their lambda
  double scale_ = std::numeric_limits<double>::quiet_NaN();
};

}  // namespace

std::unique_ptr<RunCheck> make_loop_penalty_run_check(const MonitorOptions& o) {
  return std::make_unique<LoopPenaltyRunCheck>(o.optim);
}

}  // namespace gradsleuth::debug
