// Tests for optim/{optimizer,sgd,adam,rmsprop}: every update rule against a
// plain scalar loop of its formulas (float64), the options and their variants,
// groups, state_dict, version counters, fused vs tensor-op paths, convergence.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "nn_test_util.h"
#include "optim/optim.h"

namespace optim = gs::optim;
using gs::Tensor;
using Vec = std::vector<double>;

namespace {

using nntest::error_of;
using nntest::has;

// A leaf parameter holding `v` (shape {n}).
Tensor param(const Vec& v, gs::DType dt = gs::kFloat64) {
  return gs::tensor(v, {static_cast<int64_t>(v.size())}, gs::TensorOptions(dt)).requires_grad_();
}
void set_grad(Tensor& p, const Vec& g) { p.set_grad(gs::tensor(g, p.shape(), gs::TensorOptions(p.dtype()))); }
Vec values(const Tensor& t) { return t.to_vector<double>(); }

void check_close(const Vec& got, const Vec& want, double tol = 1e-12) {
  REQUIRE(got.size() == want.size());
  for (size_t j = 0; j < got.size(); ++j) CHECK(got[j] == doctest::Approx(want[j]).epsilon(tol));
}

// Gradients for three steps of a 3-element parameter: varied signs and sizes
// (the third is small, so AMSGrad's running max differs from v).
const Vec kP0 = {1.0, -2.0, 0.5};
const std::vector<Vec> kGrads = {{0.5, -1.0, 2.0}, {-0.25, 0.75, 0.1}, {0.05, 0.02, -0.01}};

// Runs `opt` for the given gradients; returns p after each step.
std::vector<Vec> run_steps(optim::Optimizer& opt, Tensor& p, const std::vector<Vec>& grads) {
  std::vector<Vec> out;
  for (const Vec& g : grads) {
    set_grad(p, g);
    opt.step();
    out.push_back(values(p));
  }
  return out;
}

// ---- the reference formulas, one scalar at a time -------------------------------------

std::vector<Vec> ref_sgd(Vec p, const std::vector<Vec>& grads, double lr, double mom, double damp, double wd,
                         bool nesterov) {
  std::vector<Vec> out;
  Vec buf(p.size());
  for (size_t t = 0; t < grads.size(); ++t) {
    for (size_t j = 0; j < p.size(); ++j) {
      double d = grads[t][j] + wd * p[j];
      if (mom != 0.0) {
        buf[j] = t == 0 ? d : mom * buf[j] + (1.0 - damp) * d;
        d = nesterov ? d + mom * buf[j] : buf[j];
      }
      p[j] -= lr * d;
    }
    out.push_back(p);
  }
  return out;
}

std::vector<Vec> ref_adam(Vec p, const std::vector<Vec>& grads, double lr, double b1, double b2, double eps, double wd,
                          bool amsgrad, bool decoupled) {
  std::vector<Vec> out;
  Vec m(p.size()), v(p.size()), vmax(p.size());
  for (size_t t = 1; t <= grads.size(); ++t) {
    for (size_t j = 0; j < p.size(); ++j) {
      double g = grads[t - 1][j];
      if (decoupled) {
        p[j] *= 1.0 - lr * wd;
      } else {
        g += wd * p[j];
      }
      m[j] = b1 * m[j] + (1.0 - b1) * g;
      v[j] = b2 * v[j] + (1.0 - b2) * g * g;
      vmax[j] = std::max(vmax[j], v[j]);
      const double m_hat = m[j] / (1.0 - std::pow(b1, t));
      const double v_hat = (amsgrad ? vmax[j] : v[j]) / (1.0 - std::pow(b2, t));
      p[j] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
    out.push_back(p);
  }
  return out;
}

std::vector<Vec> ref_rmsprop(Vec p, const std::vector<Vec>& grads, double lr, double alpha, double eps, double wd,
                             double mom, bool centered) {
  std::vector<Vec> out;
  Vec s(p.size()), a(p.size()), buf(p.size());
  for (const Vec& grad : grads) {
    for (size_t j = 0; j < p.size(); ++j) {
      const double g = grad[j] + wd * p[j];
      s[j] = alpha * s[j] + (1.0 - alpha) * g * g;
      a[j] = alpha * a[j] + (1.0 - alpha) * g;
      const double avg = std::sqrt(centered ? s[j] - a[j] * a[j] : s[j]) + eps;
      if (mom > 0.0) {
        buf[j] = mom * buf[j] + g / avg;
        p[j] -= lr * buf[j];
      } else {
        p[j] -= lr * g / avg;
      }
    }
    out.push_back(p);
  }
  return out;
}

void check_steps(const std::vector<Vec>& got, const std::vector<Vec>& want, double tol = 1e-12) {
  REQUIRE(got.size() == want.size());
  for (size_t t = 0; t < got.size(); ++t) {
    CAPTURE(t);
    check_close(got[t], want[t], tol);
  }
}

}  // namespace

// ---- SGD --------------------------------------------------------------------------------

TEST_CASE("SGD: plain steps are p - lr * g") {
  Tensor p = param(kP0);
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  auto got = run_steps(opt, p, kGrads);
  // By hand, step 1: 1 - 0.1 * 0.5 = 0.95, -2 + 0.1 = -1.9, 0.5 - 0.2 = 0.3.
  check_close(got[0], {0.95, -1.9, 0.3});
  check_steps(got, ref_sgd(kP0, kGrads, 0.1, 0, 0, 0, false));
}

TEST_CASE("SGD: momentum, dampening, nesterov, weight decay") {
  struct Case {
    const char* name;
    double mom, damp, wd;
    bool nesterov;
  };
  for (const Case& c : {Case{"momentum", 0.9, 0.0, 0.0, false}, Case{"dampening", 0.9, 0.5, 0.0, false},
                        Case{"nesterov", 0.9, 0.0, 0.0, true}, Case{"weight_decay", 0.0, 0.0, 0.1, false},
                        Case{"all", 0.8, 0.0, 0.05, true}}) {
    CAPTURE(c.name);
    for (bool fused : {true, false}) {
      CAPTURE(fused);
      Tensor p = param(kP0);
      optim::SGD opt({p},
                     optim::SGDOptions(0.1).momentum(c.mom).dampening(c.damp).weight_decay(c.wd).nesterov(c.nesterov));
      opt.set_fused(fused);
      check_steps(run_steps(opt, p, kGrads), ref_sgd(kP0, kGrads, 0.1, c.mom, c.damp, c.wd, c.nesterov));
    }
  }
  // The momentum buffer starts as the first gradient, undamped (as PyTorch):
  // step 1 with dampening 0.5 is still p - lr * g.
  Tensor p = param({1.0});
  optim::SGD opt({p}, optim::SGDOptions(0.1).momentum(0.9).dampening(0.5));
  set_grad(p, {1.0});
  opt.step();
  CHECK(values(p)[0] == doctest::Approx(0.9));
  set_grad(p, {1.0});
  opt.step();  // buf = 0.9 * 1 + 0.5 * 1 = 1.4
  CHECK(values(p)[0] == doctest::Approx(0.9 - 0.14));
}

TEST_CASE("SGD: bad options are refused with a fix") {
  Tensor p = param(kP0);
  CHECK(has(error_of([&] { optim::SGD({p}, optim::SGDOptions(0.1).nesterov(true)); }), "momentum > 0"));
  CHECK(has(error_of([&] { optim::SGD({p}, optim::SGDOptions(0.1).momentum(0.9).dampening(0.1).nesterov(true)); }),
            "dampening"));
  CHECK(has(error_of([&] { optim::SGD({p}, optim::SGDOptions(-1.0)); }), "learning rate"));
  CHECK(has(error_of([&] { optim::SGD(std::vector<Tensor>{}, optim::SGDOptions(0.1)); }), "empty parameter list"));
  CHECK(has(error_of([&] { optim::SGD({p, p}, optim::SGDOptions(0.1)); }), "more than once"));
  Tensor q = p * 2.0;
  CHECK(has(error_of([&] { optim::SGD({q}, optim::SGDOptions(0.1)); }), "not a leaf"));
}

TEST_CASE("every optimizer refuses a non-finite learning rate, weight decay, eps or momentum, by its name") {
  Tensor p = param(kP0);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (const double bad : {inf, -inf, nan}) {
    CAPTURE(bad);
    std::string e = error_of([&] { optim::SGD({p}, optim::SGDOptions(bad)); });
    CHECK(has(e, "SGD"));
    CHECK(has(e, "finite"));
    CHECK(has(error_of([&] { optim::Adam({p}, optim::AdamOptions(bad)); }), "Adam"));
    CHECK(has(error_of([&] { optim::AdamW({p}, optim::AdamWOptions(0.01).weight_decay(bad)); }), "weight_decay"));
    CHECK(has(error_of([&] { optim::Adam({p}, optim::AdamOptions(0.01).eps(bad)); }), "eps"));
    CHECK(has(error_of([&] { optim::RMSprop({p}, optim::RMSpropOptions(0.01).momentum(bad)); }), "RMSprop"));
    CHECK(has(error_of([&] { optim::SGD({p}, optim::SGDOptions(0.1).momentum(bad)); }), "momentum"));
    optim::SGD ok({p}, optim::SGDOptions(0.1));
    CHECK(has(error_of([&] { ok.set_lr(bad); }), "SGD.set_lr"));
    CHECK(ok.lr() == 0.1);  // refused before any group changed
    optim::ParamGroup g({param(kP0)});
    g.lr = bad;  // an explicit group rate (NaN means "inherit": not refused)
    if (!std::isnan(bad)) CHECK(has(error_of([&] { ok.add_param_group(g); }), "invalid learning rate"));
  }
}

// ---- Adam, AdamW ------------------------------------------------------------------------

TEST_CASE("Adam: bias-corrected steps, weight decay, amsgrad") {
  struct Case {
    const char* name;
    double wd;
    bool amsgrad;
  };
  for (const Case& c : {Case{"plain", 0.0, false}, Case{"weight_decay", 0.1, false}, Case{"amsgrad", 0.0, true},
                        Case{"both", 0.1, true}}) {
    CAPTURE(c.name);
    for (bool fused : {true, false}) {
      CAPTURE(fused);
      Tensor p = param(kP0);
      optim::Adam opt({p}, optim::AdamOptions(0.01).betas({0.8, 0.9}).eps(1e-6).weight_decay(c.wd).amsgrad(c.amsgrad));
      opt.set_fused(fused);
      check_steps(run_steps(opt, p, kGrads), ref_adam(kP0, kGrads, 0.01, 0.8, 0.9, 1e-6, c.wd, c.amsgrad, false));
    }
  }
  // By hand: the first Adam step moves every element by lr * g / (|g| + eps') ~ lr, whatever |g|.
  Tensor p = param({0.0, 0.0});
  optim::Adam opt({p}, optim::AdamOptions(0.01));
  set_grad(p, {1e-3, -50.0});
  opt.step();
  check_close(values(p), {-0.01, 0.01}, 1e-4);
}

TEST_CASE("Adam: amsgrad changes the update once v shrinks") {
  Tensor a = param(kP0), b = param(kP0);
  optim::Adam plain({a}, optim::AdamOptions(0.01));
  optim::Adam ams({b}, optim::AdamOptions(0.01).amsgrad(true));
  auto ga = run_steps(plain, a, kGrads), gb = run_steps(ams, b, kGrads);
  CHECK(ga[0] == gb[0]);  // v_max == v on the first step
  CHECK(ga[2] != gb[2]);
}

TEST_CASE("AdamW: decoupled weight decay, and how it differs from Adam's L2") {
  for (bool ams : {false, true}) {
    for (bool fused : {true, false}) {
      CAPTURE(ams);
      CAPTURE(fused);
      Tensor p = param(kP0);
      optim::AdamW opt({p}, optim::AdamWOptions(0.01).betas({0.8, 0.9}).eps(1e-6).weight_decay(0.1).amsgrad(ams));
      opt.set_fused(fused);
      check_steps(run_steps(opt, p, kGrads), ref_adam(kP0, kGrads, 0.01, 0.8, 0.9, 1e-6, 0.1, ams, true));
    }
  }
  CHECK(optim::AdamWOptions().weight_decay() == 1e-2);  // PyTorch's default
  // With the same weight_decay Adam and AdamW differ; with none they agree.
  Tensor a = param(kP0), w = param(kP0);
  optim::Adam adam({a}, optim::AdamOptions(0.01).weight_decay(0.1));
  optim::AdamW adamw({w}, optim::AdamWOptions(0.01).weight_decay(0.1));
  CHECK(run_steps(adam, a, kGrads).back() != run_steps(adamw, w, kGrads).back());
  Tensor a0 = param(kP0), w0 = param(kP0);
  optim::Adam adam0({a0}, optim::AdamOptions(0.01));
  optim::AdamW adamw0({w0}, optim::AdamWOptions(0.01).weight_decay(0.0));
  CHECK(run_steps(adam0, a0, kGrads).back() == run_steps(adamw0, w0, kGrads).back());
  CHECK(adamw.name() == "AdamW");
  CHECK(adamw.decoupled_weight_decay());
  // A zero gradient: AdamW still shrinks p by (1 - lr * wd); Adam's L2 term is
  // divided by its own running rms instead and moves p by ~lr.
  Tensor z = param({2.0});
  optim::AdamW zw({z}, optim::AdamWOptions(0.01).weight_decay(0.1));
  set_grad(z, {0.0});
  zw.step();
  CHECK(values(z)[0] == doctest::Approx(2.0 * (1.0 - 0.01 * 0.1)));
  Tensor z2 = param({2.0});
  optim::Adam za({z2}, optim::AdamOptions(0.01).weight_decay(0.1));
  set_grad(z2, {0.0});
  za.step();
  CHECK(values(z2)[0] == doctest::Approx(2.0 - 0.01).epsilon(1e-6));
}

TEST_CASE("Adam: bad betas are refused") {
  Tensor p = param(kP0);
  CHECK(has(error_of([&] { optim::Adam({p}, optim::AdamOptions(0.01).betas({0.9, 1.0})); }), "betas"));
  CHECK(has(error_of([&] { optim::AdamW({p}, optim::AdamWOptions(0.01).eps(-1)); }), "AdamW"));
}

// ---- RMSprop ----------------------------------------------------------------------------

TEST_CASE("RMSprop: plain, centered, momentum, weight decay") {
  struct Case {
    const char* name;
    double wd, mom;
    bool centered;
  };
  for (const Case& c :
       {Case{"plain", 0.0, 0.0, false}, Case{"centered", 0.0, 0.0, true}, Case{"momentum", 0.0, 0.9, false},
        Case{"weight_decay", 0.1, 0.0, false}, Case{"all", 0.1, 0.5, true}}) {
    CAPTURE(c.name);
    for (bool fused : {true, false}) {
      CAPTURE(fused);
      Tensor p = param(kP0);
      optim::RMSprop opt(
          {p},
          optim::RMSpropOptions(0.01).alpha(0.9).eps(1e-6).weight_decay(c.wd).momentum(c.mom).centered(c.centered));
      opt.set_fused(fused);
      check_steps(run_steps(opt, p, kGrads), ref_rmsprop(kP0, kGrads, 0.01, 0.9, 1e-6, c.wd, c.mom, c.centered));
    }
  }
  // By hand, step 1 of plain RMSprop: s = (1 - alpha) g^2, p -= lr * g / (sqrt(1 - alpha) |g| + eps).
  Tensor p = param({1.0});
  optim::RMSprop opt({p}, optim::RMSpropOptions(0.01).alpha(0.99).eps(0.0));
  set_grad(p, {3.0});
  opt.step();
  CHECK(values(p)[0] == doctest::Approx(1.0 - 0.01 / std::sqrt(0.01)));
}

// ---- the Optimizer base: groups, skipping, zero_grad, hooks ---------------------------------

TEST_CASE("parameter groups: each group's own lr, inherited values from the options") {
  Tensor a = param(kP0), b = param(kP0), c = param(kP0);
  optim::ParamGroup slow{{a}, 0.01};
  slow.name = "backbone";
  optim::ParamGroup decayed{{c}};
  decayed.weight_decay = 0.5;
  optim::SGD opt({slow, optim::ParamGroup{{b}}, decayed}, optim::SGDOptions(0.1).momentum(0.9));
  REQUIRE(opt.param_groups().size() == 3);
  CHECK(opt.param_groups()[0].lr == 0.01);
  CHECK(opt.param_groups()[1].lr == 0.1);  // kInherit -> the options' lr
  CHECK(opt.param_groups()[1].weight_decay == 0.0);
  CHECK(opt.param_groups()[2].weight_decay == 0.5);
  CHECK(opt.param_groups()[0].name == "backbone");
  for (const Vec& g : kGrads) {
    set_grad(a, g);
    set_grad(b, g);
    set_grad(c, g);
    opt.step();
  }
  check_close(values(a), ref_sgd(kP0, kGrads, 0.01, 0.9, 0, 0, false).back());
  check_close(values(b), ref_sgd(kP0, kGrads, 0.1, 0.9, 0, 0, false).back());
  check_close(values(c), ref_sgd(kP0, kGrads, 0.1, 0.9, 0, 0.5, false).back());

  // Adam groups: per-group lr with the shared betas.
  Tensor x = param(kP0), y = param(kP0);
  optim::Adam adam({optim::ParamGroup{{x}, 0.001}, optim::ParamGroup{{y}, 0.1}}, optim::AdamOptions(0.5));
  for (const Vec& g : kGrads) {
    set_grad(x, g);
    set_grad(y, g);
    adam.step();
  }
  check_close(values(x), ref_adam(kP0, kGrads, 0.001, 0.9, 0.999, 1e-8, 0, false, false).back());
  check_close(values(y), ref_adam(kP0, kGrads, 0.1, 0.9, 0.999, 1e-8, 0, false, false).back());

  // The usual AdamW recipe: decay the weights, not the biases (a group with weight_decay 0).
  Tensor weight = param({2.0}), bias = param({2.0});
  optim::AdamW adamw({optim::ParamGroup{{weight}}, optim::ParamGroup{{bias}, optim::ParamGroup::kInherit, 0.0}},
                     optim::AdamWOptions(0.01));  // weight_decay 1e-2 by default
  CHECK(adamw.param_groups()[0].weight_decay == 1e-2);
  CHECK(adamw.param_groups()[1].weight_decay == 0.0);
  CHECK(adamw.param_groups()[1].lr == 0.01);
  set_grad(weight, {0.0});
  set_grad(bias, {0.0});
  adamw.step();
  CHECK(values(weight)[0] == doctest::Approx(2.0 * (1.0 - 0.01 * 1e-2)));
  CHECK(values(bias)[0] == 2.0);

  // add_param_group: kInherit takes the options; a parameter already held is refused.
  Tensor z = param(kP0);
  opt.add_param_group(optim::ParamGroup{{z}});
  CHECK(opt.param_groups().back().lr == 0.1);
  CHECK(has(error_of([&] { opt.add_param_group(optim::ParamGroup{{a}}); }), "more than once"));
  // set_lr changes every group.
  opt.set_lr(0.2);
  for (const auto& g : opt.param_groups()) CHECK(g.lr == 0.2);
}

TEST_CASE("parameters without a gradient are skipped, state and all") {
  for (bool fused : {true, false}) {
    Tensor a = param(kP0), b = param(kP0);
    optim::Adam opt({a, b}, optim::AdamOptions(0.01));
    opt.set_fused(fused);
    const uint64_t vb = b.version();
    set_grad(a, kGrads[0]);
    opt.step();
    CHECK(values(b) == kP0);
    CHECK(b.version() == vb);
    auto sd = opt.state_dict();
    CHECK(sd.count("0.0.step") == 1);
    CHECK(sd.count("0.1.step") == 0);
    // b's first gradient arrives at step 2: its own step count starts at 1.
    set_grad(a, kGrads[1]);
    set_grad(b, kGrads[0]);
    opt.step();
    check_close(values(b), ref_adam(kP0, {kGrads[0]}, 0.01, 0.9, 0.999, 1e-8, 0, false, false)[0]);
    CHECK(opt.state_dict().at("0.0.step").item<int64_t>() == 2);
    CHECK(opt.state_dict().at("0.1.step").item<int64_t>() == 1);
  }
  // A frozen parameter (requires_grad off) never gets a gradient: untouched by SGD too.
  Tensor w = param(kP0), frozen = param(kP0);
  frozen.requires_grad_(false);
  optim::SGD opt({w, frozen}, optim::SGDOptions(0.1).momentum(0.9));
  Tensor loss = (w * frozen).sum();
  loss.backward();
  opt.step();
  CHECK(values(frozen) == kP0);
  CHECK(values(w) != kP0);
}

TEST_CASE("zero_grad clears gradients; zero_grad_skipped tracks a forgotten one") {
  Tensor a = param(kP0), b = param(kP0);
  optim::SGD opt({a, b}, optim::SGDOptions(0.1));
  CHECK_FALSE(opt.zero_grad_skipped());
  set_grad(a, kGrads[0]);
  set_grad(b, kGrads[0]);
  opt.step();
  CHECK(opt.steps_taken() == 1);
  CHECK(opt.zero_grad_skipped());  // a step with no zero_grad since the last one
  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());
  CHECK_FALSE(b.grad().defined());
  CHECK_FALSE(opt.zero_grad_skipped());
  set_grad(a, kGrads[1]);
  opt.step();
  CHECK(opt.zero_grad_skipped());
  opt.set_accumulating(true);
  CHECK(opt.accumulating());
}

TEST_CASE("step hooks run before and after every step, until removed") {
  Tensor p = param(kP0);
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  std::vector<std::string> log;
  const size_t pre =
      opt.add_pre_step_hook([&](optim::Optimizer& o) { log.push_back("pre" + std::to_string(o.steps_taken())); });
  opt.add_post_step_hook([&](optim::Optimizer& o) {
    log.push_back("post" + std::to_string(o.steps_taken()) + (o.name() == "SGD" ? "" : "?"));
  });
  set_grad(p, kGrads[0]);
  opt.step();
  opt.step();
  opt.remove_hook(pre);
  opt.step();
  CHECK(log == std::vector<std::string>{"pre0", "post1", "pre1", "post2", "post3"});
}

// ---- state_dict -------------------------------------------------------------------------

namespace {

// Two optimizers over equal parameters: A runs 2 steps, B loads A's state (and
// values), then both run 3 more with the same gradients and must agree exactly.
template <class MakeOpt>
void check_round_trip(MakeOpt make, const std::vector<std::string>& expected_keys) {
  for (bool fused : {true, false}) {
    CAPTURE(fused);
    Tensor a1 = param(kP0), a2 = param({0.3, 0.2});
    auto A = make(std::vector<Tensor>{a1, a2});
    A->set_fused(fused);
    for (int t = 0; t < 2; ++t) {
      set_grad(a1, kGrads[t]);
      set_grad(a2, {0.1 * (t + 1), -0.2});
      A->step();
    }
    auto sd = A->state_dict();
    for (const auto& k : expected_keys) CHECK_MESSAGE(sd.count(k) == 1, k);
    Tensor b1 = param(values(a1)), b2 = param(values(a2));
    auto B = make(std::vector<Tensor>{b1, b2});
    B->set_fused(fused);
    B->load_state_dict(sd);
    for (int t = 0; t < 3; ++t) {
      const Vec g = kGrads[(t + 2) % 3];
      set_grad(a1, g);
      set_grad(b1, g);
      set_grad(a2, {0.05, 0.1 * t});
      set_grad(b2, {0.05, 0.1 * t});
      A->step();
      B->step();
      CHECK(values(a1) == values(b1));
      CHECK(values(a2) == values(b2));
    }
    // state_dict() returned copies: the steps since did not change `sd`.
    auto sd2 = A->state_dict();
    const std::string k = expected_keys.back();
    CHECK_FALSE(gs::equal(sd.at(k), sd2.at(k)));
  }
}

}  // namespace

TEST_CASE("state_dict round trip gives identical subsequent steps") {
  check_round_trip(
      [](std::vector<Tensor> ps) {
        return std::make_unique<optim::SGD>(ps, optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
      },
      {"0.0.momentum_buffer", "0.1.momentum_buffer"});
  check_round_trip(
      [](std::vector<Tensor> ps) {
        return std::make_unique<optim::Adam>(ps, optim::AdamOptions(0.01).amsgrad(true).weight_decay(0.01));
      },
      {"0.0.step", "0.0.exp_avg", "0.0.exp_avg_sq", "0.1.max_exp_avg_sq", "0.1.exp_avg"});
  check_round_trip([](std::vector<Tensor> ps) { return std::make_unique<optim::AdamW>(ps, optim::AdamWOptions(0.01)); },
                   {"0.1.step", "0.0.exp_avg_sq", "0.1.exp_avg"});
  check_round_trip(
      [](std::vector<Tensor> ps) {
        return std::make_unique<optim::RMSprop>(ps, optim::RMSpropOptions(0.01).centered(true).momentum(0.5));
      },
      {"0.0.step", "0.0.square_avg", "0.0.grad_avg", "0.1.momentum_buffer"});
}

TEST_CASE("load_state_dict refuses state that does not fit") {
  Tensor p = param(kP0);
  optim::Adam opt({p}, optim::AdamOptions(0.01));
  std::map<std::string, Tensor> bad_shape = {{"0.0.step", gs::tensor(std::vector<int64_t>{1}, gs::Shape{})},
                                             {"0.0.exp_avg", gs::zeros({2})},
                                             {"0.0.exp_avg_sq", gs::zeros({3})}};
  CHECK(has(error_of([&] { opt.load_state_dict(bad_shape); }), "float32[2]"));
  CHECK(has(error_of([&] { opt.load_state_dict({{"0.5.exp_avg", gs::zeros({3})}}); }), "parameter 5 of group 0"));
  CHECK(has(error_of([&] { opt.load_state_dict({{"exp_avg", gs::zeros({3})}}); }), "group.index.name"));
  CHECK(has(error_of([&] { opt.load_state_dict({{"0.0.momentum_buffer", gs::zeros({3})}}); }), "unknown state"));
  CHECK(has(error_of([&] { opt.load_state_dict({{"0.0.exp_avg", gs::zeros({3})}}); }), "incomplete"));
  // A crafted key with a number past size_t: a gs::Error naming the key, not std::out_of_range from stoul.
  CHECK(has(error_of([&] {
              opt.load_state_dict({{"99999999999999999999999.0.exp_avg", gs::zeros({3})}});
            }),
            "too large to be a group or parameter index"));
  optim::SGD sgd({p}, optim::SGDOptions(0.1).momentum(0.9));
  CHECK(has(error_of([&] { sgd.load_state_dict({{"0.0.exp_avg", gs::zeros({3})}}); }), "momentum_buffer"));
  // A float32 dict loads into float64 parameters' state (converted).
  sgd.load_state_dict({{"0.0.momentum_buffer", gs::ones({3})}});
  CHECK(sgd.state_dict().at("0.0.momentum_buffer").dtype() == gs::kFloat64);
}

// ---- version counters -------------------------------------------------------------------

TEST_CASE("step bumps the version: backward through a graph that saved the parameter raises, naming the optimizer") {
  using Make = std::function<std::unique_ptr<optim::Optimizer>(Tensor)>;
  const std::vector<std::pair<std::string, Make>> makers = {
      {"SGD.step",
       [](Tensor p) { return std::make_unique<optim::SGD>(std::vector<Tensor>{p}, optim::SGDOptions(0.1)); }},
      {"Adam.step", [](Tensor p) { return std::make_unique<optim::Adam>(std::vector<Tensor>{p}); }},
      {"AdamW.step", [](Tensor p) { return std::make_unique<optim::AdamW>(std::vector<Tensor>{p}); }},
      {"RMSprop.step", [](Tensor p) { return std::make_unique<optim::RMSprop>(std::vector<Tensor>{p}); }}};
  for (const auto& [op, make] : makers) {
    for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
      for (bool fused : {true, false}) {
        CAPTURE(op);
        CAPTURE(dt);
        CAPTURE(fused);
        Tensor w = param(kP0, dt);
        auto opt = make(w);
        opt->set_fused(fused);
        Tensor loss = (w * w).sum();  // mul saves w for its backward
        set_grad(w, kGrads[0]);
        const uint64_t before = w.version();
        opt->step();
        CHECK(w.version() > before);
        CHECK(w.storage()->modifier_after(before) == std::string(op));
        const std::string msg = error_of([&] { loss.backward(); });
        CHECK(has(msg, "modified by an in-place operation"));
        CHECK(has(msg, "'" + op + "'"));
      }
    }
  }
}

// ---- fused loops vs tensor ops ----------------------------------------------------------

namespace {

// Runs 4 steps of `make`'s optimizer over a (n) parameter with seeded random
// gradients; returns the final values (as float64).
template <class MakeOpt>
Vec run_random(MakeOpt make, int64_t n, gs::DType dt, bool fused, bool non_contiguous = false) {
  gs::Generator gen(42);
  Tensor p0 = gs::randn({n}, gs::kFloat64, &gen);
  Tensor p;
  if (non_contiguous) {  // the same values, stored every other element
    Tensor wide = gs::zeros({n, 2}, gs::TensorOptions(dt));
    wide.select(1, 0).copy_(p0);
    p = wide.select(1, 0).requires_grad_();
    REQUIRE_FALSE(p.is_contiguous());
  } else {
    p = p0.to(dt).requires_grad_();
  }
  auto opt = make(std::vector<Tensor>{p});
  opt->set_fused(fused);
  for (int t = 0; t < 4; ++t) {
    p.set_grad(gs::randn({n}, gs::kFloat64, &gen).to(dt));
    opt->step();
  }
  return values(p);
}

// Largest |a - b| / (1 + |b|).
double max_rel_diff(const Vec& a, const Vec& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0.0;
  for (size_t j = 0; j < a.size(); ++j) worst = std::max(worst, std::abs(a[j] - b[j]) / (1.0 + std::abs(b[j])));
  return worst;
}

// exact: the fused loop restates the tensor ops operation for operation, so the
// bits agree. Adam/RMSprop's tensor path takes sqrt from Eigen's vectorised
// (fast-math) kernel, up to a few ulps off the correctly rounded std::sqrt of
// the fused loop: there we allow a few ulps of the step.
template <class MakeOpt>
void check_fused_matches(MakeOpt make, bool exact) {
  for (int64_t n : {int64_t{1000}, int64_t{40000}}) {  // 40000: above the parallel grain, so threads split it
    CAPTURE(n);
    const Vec f64 = run_random(make, n, gs::kFloat64, true), g64 = run_random(make, n, gs::kFloat64, false);
    const Vec f32 = run_random(make, n, gs::kFloat32, true), g32 = run_random(make, n, gs::kFloat32, false);
    // A strided parameter takes the tensor-op path even with fused on.
    const Vec s32 = run_random(make, n, gs::kFloat32, true, true);
    CHECK(s32 == g32);
    if (exact) {
      CHECK(f64 == g64);
      CHECK(f32 == g32);
    } else {
      CHECK(max_rel_diff(f64, g64) < 1e-14);
      CHECK(max_rel_diff(f32, g32) < 1e-6);
    }
    // float32 fused vs float64: equal to float32 rounding.
    CHECK(max_rel_diff(f32, g64) < 1e-5);
  }
}

}  // namespace

TEST_CASE("fused loops equal the tensor-op path") {
  SUBCASE("SGD") {
    check_fused_matches(
        [](std::vector<Tensor> ps) {
          return std::make_unique<optim::SGD>(ps,
                                              optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-2));
        },
        true);
    check_fused_matches(
        [](std::vector<Tensor> ps) {
          return std::make_unique<optim::SGD>(ps, optim::SGDOptions(0.05).momentum(0.9).dampening(0.3));
        },
        true);
    check_fused_matches(
        [](std::vector<Tensor> ps) { return std::make_unique<optim::SGD>(ps, optim::SGDOptions(0.05)); }, true);
  }
  SUBCASE("Adam") {
    check_fused_matches(
        [](std::vector<Tensor> ps) {
          return std::make_unique<optim::Adam>(ps, optim::AdamOptions(0.01).weight_decay(1e-2).amsgrad(true));
        },
        false);
    check_fused_matches(
        [](std::vector<Tensor> ps) { return std::make_unique<optim::Adam>(ps, optim::AdamOptions(0.01)); }, false);
  }
  SUBCASE("AdamW") {
    check_fused_matches(
        [](std::vector<Tensor> ps) {
          return std::make_unique<optim::AdamW>(ps, optim::AdamWOptions(0.01).weight_decay(0.1));
        },
        false);
  }
  SUBCASE("RMSprop") {
    check_fused_matches(
        [](std::vector<Tensor> ps) {
          return std::make_unique<optim::RMSprop>(
              ps, optim::RMSpropOptions(0.01).centered(true).momentum(0.9).weight_decay(1e-2));
        },
        false);
    check_fused_matches([](std::vector<Tensor> ps) { return std::make_unique<optim::RMSprop>(ps); }, false);
  }
}

// ---- convergence ------------------------------------------------------------------------

namespace {

// Fits y = X w + b (X (N, D), w (D, 1), b (1); noise std 0.01) by least squares
// with `opt`; returns the final mean squared error. The noise floor is ~1e-4.
template <class MakeOpt>
double fit_linear_regression(MakeOpt make, int steps) {
  const int64_t N = 256, D = 5;
  gs::Generator gen(7);
  Tensor X = gs::randn({N, D}, {}, &gen);
  Tensor w_true = gs::tensor({1.5, -2.0, 0.5, 3.0, -1.0}, {D, 1});
  Tensor y = gs::matmul(X, w_true) + 0.7 + gs::randn({N, 1}, {}, &gen) * 0.01;
  Tensor w = gs::zeros({D, 1}, gs::requires_grad()), b = gs::zeros({1}, gs::requires_grad());
  auto opt = make(std::vector<Tensor>{w, b});
  double loss_value = 0.0;
  for (int t = 0; t < steps; ++t) {
    opt->zero_grad();
    Tensor loss = (gs::matmul(X, w) + b - y).square().mean();
    loss.backward();
    opt->step();
    loss_value = loss.item<double>();
  }
  return loss_value;
}

}  // namespace

TEST_CASE("convergence: linear regression reaches the noise floor") {
  const double sgd = fit_linear_regression(
      [](std::vector<Tensor> ps) { return std::make_unique<optim::SGD>(ps, optim::SGDOptions(0.05).momentum(0.9)); },
      200);
  CHECK(sgd < 2e-4);
  const double adam = fit_linear_regression(
      [](std::vector<Tensor> ps) { return std::make_unique<optim::Adam>(ps, optim::AdamOptions(0.05)); }, 400);
  CHECK(adam < 2e-4);
  MESSAGE("final MSE: SGD+momentum ", sgd, ", Adam ", adam);
}

// ---- float32 master weights for 16-bit parameters ------------------------------------------------
namespace {
// 100 SGD steps of a constant gradient 1 at lr 1e-4 on a bfloat16 weight of 1: each update (1e-4) is far
// below half of bfloat16's step at 1 (2^-9), so without master weights it vanishes every time.
gs::Tensor bf16_after_steps(bool master, gs::Tensor* master_out = nullptr) {
  gs::Tensor w = gs::ones({4}).to(gs::kBFloat16).requires_grad_(true);
  gs::optim::SGD opt({w}, gs::optim::SGDOptions(1e-4));
  opt.set_master_weights(master);
  for (int s = 0; s < 100; ++s) {
    opt.zero_grad();
    w.sum().backward();
    opt.step();
  }
  if (master_out) *master_out = opt.master_weight(0, 0);
  return w;
}
}  // namespace

TEST_CASE("master weights: bfloat16 updates below half a step add up in float32, and vanish without") {
  const gs::Tensor plain = bf16_after_steps(false);
  CHECK(plain.dtype() == gs::kBFloat16);
  CHECK(plain.to(gs::kFloat64).max().item<double>() == 1.0);  // every update rounded away
  gs::Tensor m;
  const gs::Tensor kept = bf16_after_steps(true, &m);
  REQUIRE(m.defined());
  CHECK(m.dtype() == gs::kFloat32);
  CHECK(m.to(gs::kFloat64).max().item<double>() == doctest::Approx(0.99).epsilon(1e-5));
  // The parameter is the master rounded once: 0.99 lies between bfloat16's 0.98828125 and 0.9921875,
  // 0.0017 from the first.
  CHECK(kept.dtype() == gs::kBFloat16);
  CHECK(kept.to(gs::kFloat64).max().item<double>() == 0.98828125);
}

TEST_CASE("master weights: Adam's moments are float32, and a parameter changed from outside restarts the copy") {
  gs::Tensor w = gs::full({3}, 2.0).to(gs::kFloat16).requires_grad_(true);
  gs::optim::Adam opt({w}, gs::optim::AdamOptions(1e-3));
  opt.set_master_weights(true);
  opt.zero_grad();
  (w * w).sum().backward();
  opt.step();
  for (const auto& [key, t] : opt.state_dict())
    if (key.find("exp_avg") != std::string::npos) CHECK(t.dtype() == gs::kFloat32);
  {
    gs::NoGradGuard ng;
    w.fill_(5.0);  // e.g. a checkpoint loaded into the model
  }
  opt.zero_grad();
  (w * w).sum().backward();
  opt.step();
  // Adam's first steps move by about lr: from 5, not from the old copy near 2.
  CHECK(opt.master_weight(0, 0).to(gs::kFloat64).max().item<double>() == doctest::Approx(5.0).epsilon(2e-3));
  CHECK_THROWS_WITH_AS(opt.set_master_weights(false), doctest::Contains("before the first step"), gs::Error);
}
