// The grader of lab 4 (broadcasting and in-place bugs). The answer keys: the
// engine itself (each predicted shape is checked by running the expression), the
// library's mean squared error and layers, models with a broadcasting bug planted
// at a known op, and in-place errors provoked here on purpose, whose parts (the
// op that saved the tensor, the in-place op, the versions) the grader knows.
//
// Dimension letters: B = batch, D = features, N = examples.
#include "tutorials/grader/grader.h"
#include "tutorials/grader/labs.h"
#include "tutorials/lab4_broadcasting/lab4.h"

#include <cmath>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/observer.h"
#include "core/ops.h"
#include "debug/checks/model/anomaly.h"
#include "nn/nn.h"
#include "nn/synthetic.h"

namespace gradsleuth::labs {

namespace {

// The regression run of Task 4.4 and the level it must reach. The noise of the
// data is 0.1, so the best possible mean squared error is about 0.01; the given
// buggy loop stops near the variance of the targets, about 7.3.
constexpr int64_t kExamples = 256;
constexpr int kSteps = 60;
constexpr double kLr = 0.1;
constexpr double kMaxLoss = 0.02;

std::string opt_shape_str(const std::optional<Shape>& s) { return s ? shape_str(*s) : std::string("an error"); }

// True when the message names `s` as "[8, 1]" or "(8, 1)".
bool names_shape(const std::string& msg, const Shape& s) {
  std::string round = shape_str(s);
  round.front() = '(';
  round.back() = ')';
  return msg.find(shape_str(s)) != std::string::npos || msg.find(round) != std::string::npos;
}

// Runs f, which must throw a gs::Error, and returns its message.
std::string error_of(const Check& c, const std::function<void()>& f, const std::string& what) {
  try {
    f();
  } catch (const Error& e) {
    if (not_implemented_task(e.what()).first != 0) throw;
    return e.what();
  } catch (const CaseFailed&) {
    throw;
  } catch (const std::exception& e) {
    c.fail(what + ": expected a gs::Error, got another exception: " + e.what());
  }
  c.fail(what + ": expected a gs::Error, but nothing was thrown: the shapes differ, and the loss must refuse them");
}

// ---- Task 4.1 ------------------------------------------------------------------------------------
struct Expression {
  std::string text;
  std::function<Tensor()> run;
};

const std::vector<Expression>& expressions() {
  static const std::vector<Expression> e = {
      {"pred (64, 1) - target (64)",
       [] {
         return zeros({64, 1}) - zeros({64});
       }},
      {"x (32, 10) - x.mean({1})",
       [] {
         Tensor x = zeros({32, 10});
         return x - x.mean({1});
       }},
      {"x (32, 10) - x.mean({1}, true)",
       [] {
         Tensor x = zeros({32, 10});
         return x - x.mean({1}, true);
       }},
      {"x (10, 10) - x.mean({1})",
       [] {
         Tensor x = zeros({10, 10});
         return x - x.mean({1});
       }},
      {"images (16, 3, 32, 32) * scale (3)",
       [] {
         return zeros({16, 3, 32, 32}) * zeros({3});
       }},
      {"images (16, 3, 32, 32) * scale.view({3, 1, 1})",
       [] {
         return zeros({16, 3, 32, 32}) * zeros({3}).view({3, 1, 1});
       }},
      {"a (4, 1, 3) + b (5, 1)",
       [] {
         return zeros({4, 1, 3}) + zeros({5, 1});
       }},
      {"loss () * weights (8)", [] { return scalar_tensor(0.0) * zeros({8}); }},
  };
  return e;
}

Case prediction_case(size_t k) {
  const Expression& e = expressions()[k];
  const std::string name = "expression " + std::to_string(k + 1) + ": " + e.text;
  return {name, [k, e](Check& c) {
            const std::vector<std::optional<Shape>> got = lab4::predicted_shapes();
            c.input("expression " + std::to_string(k + 1) + ": " + e.text);
            c.require_eq(static_cast<int64_t>(got.size()), static_cast<int64_t>(expressions().size()),
                         "the number of predictions (one per expression of lab4.h, in order)");
            std::optional<Shape> want;
            std::string engine_says;
            try {
              want = e.run().shape();
            } catch (const Error& err) {
              engine_says = err.what();
            }
            if (got[k] == want) return;
            std::string m = "you predicted " + opt_shape_str(got[k]) + ", the engine gives " + opt_shape_str(want);
            if (!want)
              m += " (" + engine_says + ")";
            else if (!got[k])
              m += ": these shapes do broadcast (align them at the right; a size 1 or a missing dim stretches)";
            c.fail(m);
          }};
}

std::string stretch_str(const lab4::Stretch& s) {
  return "result " + shape_str(s.result) + ", a_stretched " + (s.a_stretched ? "true" : "false") + ", b_stretched " +
         (s.b_stretched ? "true" : "false") + ", suspicious " + (s.suspicious ? "true" : "false");
}

Case stretch_case(const Shape& a, const Shape& b, bool sa, bool sb, bool suspicious) {
  return {shape_str(a) + " and " + shape_str(b), [=](Check& c) {
            c.input("a = " + shape_str(a) + ", b = " + shape_str(b));
            const Shape want = broadcast_shapes(a, b, "grader");
            const lab4::Stretch got = lab4::stretch(a, b);
            c.require_dims(got.result, want, "result");
            c.require(got.a_stretched == sa && got.b_stretched == sb && got.suspicious == suspicious,
                      "expected result " + shape_str(want) + ", a_stretched " + (sa ? "true" : "false") +
                          ", b_stretched " + (sb ? "true" : "false") + ", suspicious " +
                          (suspicious ? "true" : "false") + "; got " + stretch_str(got) +
                          " (an operand is stretched when the result has more elements than it; suspicious when "
                          "both are)");
            const lab4::Stretch swapped = lab4::stretch(b, a);
            c.require(swapped.a_stretched == sb && swapped.b_stretched == sa && swapped.suspicious == suspicious,
                      "with a and b swapped: got " + stretch_str(swapped));
          }};
}

// ---- Task 4.2 ------------------------------------------------------------------------------------
Case mse_value_case(const Shape& s) {
  return {"equal shapes " + shape_str(s) + ": value and gradient", [=](Check& c) {
            const Tensor p0 = randn_seeded(s, 1), t = randn_seeded(s, 2);
            c.input("pred " + describe(p0) + ", target " + describe(t));
            Tensor p = p0.clone().requires_grad_(true), q = p0.clone().requires_grad_(true);
            const Tensor got = lab4::safe_mse(p, t);
            const Tensor want = nn::functional::mse_loss(q, t);
            c.require_tensor(got, {}, "the loss (a 0-dim tensor: the mean over every element)");
            c.require_close(got, want.detach(), "loss", 1e-5, 1e-6);
            got.backward();
            want.backward();
            c.require(p.grad().defined(),
                      "pred.grad is undefined after backward(): compute the loss with tensor "
                      "ops (no detach, no NoGradGuard)");
            c.require_close(p.grad(), q.grad(), "pred.grad", 1e-4, 1e-6);
          }};
}

// A mismatch must raise a teaching error: from lab4::safe_mse, naming both shapes and more.
Case mse_refuses_case(const Shape& ps, const Shape& ts, const std::optional<Shape>& to, bool needs_squeeze_hint) {
  return {"refuses pred " + shape_str(ps) + " against target " + shape_str(ts), [=](Check& c) {
            c.input("pred " + shape_str(ps) + ", target " + shape_str(ts));
            const std::string m = error_of(
                c, [&] { lab4::safe_mse(zeros(ps), ones(ts)); }, "safe_mse on different shapes");
            const std::string said = "\nyour message: " + m;
            c.require(m.find("safe_mse") != std::string::npos,
                      "the error does not come from lab4::safe_mse: raise it yourself (GS_FAIL(\"lab4::safe_mse\", "
                      "...)) rather than leaving it to another function" +
                          said);
            c.require(names_shape(m, ps) && names_shape(m, ts), "the message must name both shapes, " + shape_str(ps) +
                                                                    " and " + shape_str(ts) +
                                                                    " (shape_str writes them like that)" + said);
            if (to)
              c.require(names_shape(m, *to), "the message must say what the shapes would broadcast to, " +
                                                 shape_str(*to) + ": that is what makes the bug silent" + said);
            if (needs_squeeze_hint)
              c.require(m.find("squeeze") != std::string::npos,
                        "the message must say how to fix it (unsqueeze the target, or squeeze the prediction)" + said);
          }};
}

// ---- Task 4.3 ------------------------------------------------------------------------------------
// A head whose two branches disagree on shapes: gate (B, 1) times value (B), squeezed
// "to match the target", broadcasts to (B, B); the mean over dim 1 brings it back to
// (B, 1), so the model's output shape looks right.
class GatedHead : public nn::Module {
 public:
  explicit GatedHead(int64_t d) : Module("GatedHead") {
    gate = register_module("gate", std::make_shared<nn::Linear>(d, 1));
    value = register_module("value", std::make_shared<nn::Linear>(d, 1));
  }
  Tensor forward(const Tensor& x) override {
    Tensor g = (*gate)(x).sigmoid();    // (B, 1)
    Tensor v = (*value)(x).squeeze(1);  // (B)
    return (g * v).mean({1}, true);     // (B, B) -> (B, 1)
  }
  std::shared_ptr<nn::Linear> gate, value;
};

// body: Linear + ReLU; head: GatedHead.   x (B, D) -> (B, 1)
class GatedNet : public nn::Module {
 public:
  explicit GatedNet(int64_t d) : Module("GatedNet") {
    body = register_module(
        "body", std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(d, d), std::make_shared<nn::ReLU>()));
    head = register_module("head", std::make_shared<GatedHead>(d));
  }
  Tensor forward(const Tensor& x) override { return (*head)((*body)(x)); }
  std::shared_ptr<nn::Sequential> body;
  std::shared_ptr<GatedHead> head;
};

// Standardises each row: x - mean (B, 1), / std (B, 1); a bias-like (D) shift. Every
// broadcast here stretches one operand only: legitimate, and not reported.
class RowStandardize : public nn::Module {
 public:
  explicit RowStandardize(int64_t d) : Module("RowStandardize") { shift = register_parameter("shift", zeros({d})); }
  Tensor forward(const Tensor& x) override {
    Tensor c = x - x.mean({1}, true);
    return c / (c.std({1}, true, true) + 1e-5) * 2.0 + shift;
  }
  Tensor shift;
};

struct Expected {
  int64_t count;
  std::string op, module, shape;
};

Case locate_case(const std::string& name, std::function<std::shared_ptr<nn::Module>()> make,
                 std::function<void(nn::Module&)> run, const Expected& want) {
  return {
      name, [=](Check& c) {
        manual_seed(11);
        const std::shared_ptr<nn::Module> model = make();
        c.input(name);
        const bool listening_before = observers_active();
        bool ran = false;
        const lab4::BroadcastReport r = lab4::locate_broadcast(*model, [&] {
          ran = true;
          run(*model);
        });
        c.require(ran, "locate_broadcast never called run(): the code to examine runs inside it");
        c.require(listening_before || !observers_active(),
                  "an observer is still attached after locate_broadcast returned: enable the detector with "
                  "`auto on = det.enable();` inside a scope that ends before the function returns");
        c.require(!(want.count > 0 && r.count == 0),
                  "count: expected " + std::to_string(want.count) +
                      ", got 0: the detector saw nothing. Keep the "
                      "guard of det.enable() alive while run() runs (`auto on = det.enable();` in a scope around it)");
        c.require_eq(r.count, want.count, "count (the number of findings)");
        c.require(r.found == (want.count > 0), std::string("found: expected ") + (want.count ? "true" : "false"));
        if (want.count == 0) return;
        c.require(r.op == want.op, "op: expected '" + want.op + "', got '" + r.op + "'");
        c.require(r.module == want.module,
                  "module: expected '" + want.module + "', got '" + r.module + "'" +
                      (want.module.empty() ? " (the op ran outside the model, in the loss)"
                                           : " (attach the detector to the model so that it names modules)"));
        c.require(r.shape == want.shape, "shape: expected '" + want.shape + "', got '" + r.shape + "'");
        c.require(
            r.message.find("M19") != std::string::npos && r.message.find(want.op) != std::string::npos,
            "message: expected the first finding's str() (it starts with \"[M19 warning]\"), got '" + r.message + "'");
      }};
}

// ---- Task 4.4 ------------------------------------------------------------------------------------
struct RegressionRun {
  nn::RegressionSet data;
  std::shared_ptr<nn::Linear> model;
};

RegressionRun regression_setup() {
  RegressionRun r{nn::make_linear_regression(kExamples, 3, 0.1, 1), nullptr};
  manual_seed(4);
  r.model = std::make_shared<nn::Linear>(3, 1);
  return r;
}

double mse_of(nn::Module& model, const Tensor& x, const Tensor& y) {
  NoGradGuard no_grad;
  const Tensor d = model(x) - y.reshape({x.size(0), 1});
  return (d * d).mean().item<double>();
}

std::string losses_str(const std::vector<double>& l) {
  if (l.empty()) return "[]";
  return "[" + num(l.front()) + ", ..., " + num(l.back()) + "]";
}

Case regression_case(const std::string& name, bool column_targets) {
  return {name,
          [=](Check& c) {
            RegressionRun run = regression_setup();
            const Tensor x = run.data.data->x();
            const Tensor y = column_targets ? run.data.data->y() : run.data.data->y().squeeze(1);
            c.input("nn::make_linear_regression(" + std::to_string(kExamples) + ", 3, noise 0.1): x " + x.str() +
                    ", y " + y.str() + "; nn::Linear(3, 1); " + std::to_string(kSteps) + " steps, lr " + num(kLr));
            const double first = mse_of(*run.model, x, y);
            const std::vector<double> losses = lab4::train_regression(*run.model, x, y, kSteps, kLr);
            const double final_loss = mse_of(*run.model, x, y);
            c.note("mean squared error after training " + num(final_loss) + " (goal < " + num(kMaxLoss) + ")");
            c.require_eq(static_cast<int64_t>(losses.size()), kSteps, "the number of losses returned (one per step)");
            c.require(std::isfinite(final_loss) && final_loss < kMaxLoss,
                      "after training the mean squared error is " + num(final_loss) + ", expected below " +
                          num(kMaxLoss) + " (losses " + losses_str(losses) + ")" +
                          (column_targets ? ". With y (N, 1), unsqueezing again makes (N, 1, 1): bring either "
                                            "shape to (N, 1), e.g. with y.reshape({N, 1})"
                                          : ""));
            c.require_near(losses.front(), first, 1e-4 * std::max(1.0, first),
                           "the first returned loss (the mean squared error of the untrained model, (N, 1) against "
                           "(N, 1), computed before the first update)");
          },
          2};
}

// ---- Task 4.5 ------------------------------------------------------------------------------------
// Runs a scenario that must raise, and returns the engine's message.
std::string provoke(const Check& c, const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  c.fail("grader: the scenario did not raise an error (the engine changed?)");
}

Case read_error_case(const std::string& name, std::function<void()> scenario, const lab4::InplaceReport& want) {
  return {name, [=](Check& c) {
            c.input(name);
            const std::string m = provoke(c, scenario);
            c.input(name + "\nthe message: " + m);
            const lab4::InplaceReport got = lab4::read_inplace_error(m);
            if (!want.found) {
              c.require(!got.found,
                        "found: expected false: this is another error, not a saved tensor changed in "
                        "place (look for the words \"modified by an in-place operation\")");
              // ... and the real one is still recognised (a function that always says "no" gets nothing here).
              const std::string real = provoke(c, [] {
                Tensor a = randn_seeded({2, 2}, 13).requires_grad_(true), w = randn_seeded({2, 2}, 14);
                Tensor y = a * w;
                w.add_(1.0);
                y.sum().backward();
              });
              c.require(lab4::read_inplace_error(real).found,
                        "found: expected true for the in-place error (" + real + ")");
              return;
            }
            c.require(got.found, "found: expected true (the message is the in-place error)");
            c.require(got.tensor == want.tensor, "tensor: expected '" + want.tensor + "', got '" + got.tensor + "'");
            c.require(got.saved_by == want.saved_by,
                      "saved_by: expected '" + want.saved_by + "', got '" + got.saved_by + "'");
            c.require(got.modified_by == want.modified_by,
                      "modified_by: expected '" + want.modified_by + "', got '" + got.modified_by + "'");
            c.require_eq(got.saved_version, want.saved_version, "saved_version");
            c.require_eq(got.version_now, want.version_now, "version_now");
          }};
}

lab4::InplaceReport inplace(std::string tensor, std::string saved_by, std::string modified_by, int64_t saved,
                            int64_t now) {
  lab4::InplaceReport r;
  r.found = true;
  r.tensor = std::move(tensor);
  r.saved_by = std::move(saved_by);
  r.modified_by = std::move(modified_by);
  r.saved_version = saved;
  r.version_now = now;
  return r;
}

// ---- Task 4.6 ------------------------------------------------------------------------------------
// The block computed here with the library's ops on copies of its parameters.
struct RefBlock {
  Tensor w1, b1, w2, b2;
  explicit RefBlock(const lab4::ResidualMLP& m)
      : w1(m.fc1->weight.detach().clone().requires_grad_(true)),
        b1(m.fc1->bias.detach().clone().requires_grad_(true)),
        w2(m.fc2->weight.detach().clone().requires_grad_(true)),
        b2(m.fc2->bias.detach().clone().requires_grad_(true)) {}
  Tensor operator()(const Tensor& x) const { return relu(x + linear(relu(linear(x, w1, b1)), w2, b2)); }
};

void require_block_grads(Check& c, const lab4::ResidualMLP& m, const RefBlock& ref, const std::string& who) {
  const std::vector<std::pair<std::string, std::pair<Tensor, Tensor>>> ps = {{"fc1.weight", {m.fc1->weight, ref.w1}},
                                                                             {"fc1.bias", {m.fc1->bias, ref.b1}},
                                                                             {"fc2.weight", {m.fc2->weight, ref.w2}},
                                                                             {"fc2.bias", {m.fc2->bias, ref.b2}}};
  for (const auto& [name, pr] : ps) {
    c.require(pr.first.grad().defined(), who + name + ".grad is undefined after backward()");
    c.require_close(pr.first.grad(), pr.second.grad(), who + name + ".grad", 1e-4, 1e-5);
  }
}

Case block_forward_case(const std::string& name, int64_t b, int64_t d) {
  return {name, [=](Check& c) {
            manual_seed(21);
            auto m = std::make_shared<lab4::ResidualMLP>(d);
            const Tensor x = randn_seeded({b, d}, 22);
            c.input("ResidualMLP(" + std::to_string(d) + "), x " + x.str());
            const RefBlock ref(*m);
            const Tensor got = (*m)(x);
            c.require_close(got, ref(x).detach(), "y", 1e-5, 1e-5);
          }};
}

}  // namespace

Lab make_lab4() {
  Lab lab;
  lab.number = 4;
  lab.dir = "lab4_broadcasting";
  lab.title = "Broadcasting and in-place bugs";
  lab.starter = "tutorials/lab4_broadcasting/lab4.cpp";

  // ---- Task 4.1 ------------------------------------------------------------------------------
  {
    Task t{1, "predict, then compute", 15, "lab4::predicted_shapes(), lab4::stretch()", {}};
    for (size_t k = 0; k < expressions().size(); ++k) t.cases.push_back(prediction_case(k));
    t.cases.push_back(stretch_case({64, 1}, {64}, true, true, true));
    t.cases.push_back(stretch_case({32, 10}, {32, 1}, false, true, false));
    t.cases.push_back(stretch_case({4, 3}, {3}, false, true, false));
    t.cases.push_back(stretch_case({}, {2, 2}, true, false, false));
    t.cases.push_back(stretch_case({1, 1}, {3, 1}, true, false, false));
    t.cases.push_back(stretch_case({1, 4}, {3, 1}, true, true, true));
    t.cases.push_back(stretch_case({5, 1, 3}, {4, 1}, true, true, true));
    t.cases.push_back(stretch_case({2, 3}, {2, 3}, false, false, false));
    t.cases.push_back(stretch_case({3}, {1, 3}, false, false, false));
    t.cases.push_back(stretch_case({2, 3}, {1, 1, 3}, false, true, false));
    t.cases.push_back({"shapes that do not broadcast throw", [](Check& c) {
                         c.input("(3) and (4); (2, 3) and (3, 2)");
                         c.require_throws([] { lab4::stretch({3}, {4}); }, "stretch (3) and (4)");
                         c.require_throws([] { lab4::stretch({2, 3}, {3, 2}); }, "stretch (2, 3) and (3, 2)");
                       }});
    lab.tasks.push_back(std::move(t));
  }

  // ---- Task 4.2 ------------------------------------------------------------------------------
  lab.tasks.push_back(
      {2,
       "a loss that refuses to broadcast",
       15,
       "lab4::safe_mse()",
       {mse_value_case({8, 1}), mse_value_case({2, 3, 4}), mse_value_case({5}),
        mse_refuses_case({8, 1}, {8}, Shape{8, 8}, true), mse_refuses_case({8}, {8, 1}, Shape{8, 8}, true),
        mse_refuses_case({4, 3}, {3}, Shape{4, 3}, false), mse_refuses_case({3}, {4}, std::nullopt, false)}});

  // ---- Task 4.3 ------------------------------------------------------------------------------
  auto linear31 = [] { return std::shared_ptr<nn::Module>(std::make_shared<nn::Linear>(3, 1)); };
  auto gated = [] { return std::shared_ptr<nn::Module>(std::make_shared<GatedNet>(4)); };
  auto hand_mse = [](const Tensor& p, const Tensor& y) { return ((p - y) * (p - y)).mean(); };
  lab.tasks.push_back(
      {3,
       "locate it with BroadcastDetector",
       15,
       "lab4::locate_broadcast()",
       {locate_case("Linear(3, 1), x (8, 3), a hand-written MSE against y (8, 1): nothing to report", linear31,
                    [=](nn::Module& m) {
                      hand_mse(m(randn_seeded({8, 3}, 1)), randn_seeded({8, 1}, 2));
                    },
                    {0, "", "", ""}),
        locate_case("Linear(3, 1), x (8, 3), a hand-written MSE against y (8)", linear31,
                    [=](nn::Module& m) {
                      hand_mse(m(randn_seeded({8, 3}, 1)), randn_seeded({8}, 2));
                    },
                    {1, "sub", "", "[8, 8]"}),
        locate_case("the same, with backward(): the backward's ops are not reported", linear31,
                    [=](nn::Module& m) {
                      hand_mse(m(randn_seeded({8, 3}, 1)), randn_seeded({8}, 2)).backward();
                    },
                    {1, "sub", "", "[8, 8]"}),
        locate_case("GatedNet(4), x (8, 4) -> (8, 1), MSE against y (8, 1): the output shape is right", gated,
                    [=](nn::Module& m) {
                      hand_mse(m(randn_seeded({8, 4}, 3)), randn_seeded({8, 1}, 4));
                    },
                    {1, "mul", "head (GatedHead)", "[8, 8]"}),
        locate_case("GatedNet(4), x (6, 4), MSE against y (6): two findings, the first one in the model", gated,
                    [=](nn::Module& m) {
                      hand_mse(m(randn_seeded({6, 4}, 5)), randn_seeded({6}, 6));
                    },
                    {2, "mul", "head (GatedHead)", "[6, 6]"}),
        locate_case(
            "RowStandardize(5), x (4, 5): one operand stretched at a time (legitimate)",
            [] { return std::shared_ptr<nn::Module>(std::make_shared<RowStandardize>(5)); },
            [](nn::Module& m) {
              m(randn_seeded({4, 5}, 7)).sum();
            },
            {0, "", "", ""})}});

  // ---- Task 4.4 ------------------------------------------------------------------------------
  lab.tasks.push_back({4,
                       "fix the regression loop (bug B01)",
                       20,
                       "lab4::train_regression()",
                       {{"the given buggy loop stalls (for comparison; always passes)",
                         [](Check& c) {
                           RegressionRun run = regression_setup();
                           const Tensor x = run.data.data->x(), y = run.data.data->y().squeeze(1);
                           c.input("train_regression_buggy on the data of the next check");
                           const std::vector<double> l = lab4::train_regression_buggy(*run.model, x, y, kSteps, kLr);
                           c.note("the buggy loop's losses " + losses_str(l) +
                                  "; the true mean squared error after it: " + num(mse_of(*run.model, x, y)) +
                                  " (the targets' variance: " + num(y.var({}, false).item<double>()) + ")");
                         },
                         0},  // no points: it grades nothing of yours
                        regression_case("targets y (N): the mean squared error falls below the goal", false),
                        regression_case("targets y (N, 1): the same loop works on column targets", true),
                        {"the learned weights match the data's true weights",
                         [](Check& c) {
                           RegressionRun run = regression_setup();
                           const Tensor x = run.data.data->x(), y = run.data.data->y().squeeze(1);
                           c.input("y (N); true weight " + values_str(run.data.true_weight.t()) + ", true bias " +
                                   values_str(run.data.true_bias));
                           lab4::train_regression(*run.model, x, y, kSteps, kLr);
                           c.require_close(run.model->weight, run.data.true_weight.t(), "weight", 0.0, 0.05);
                           c.require_close(run.model->bias, run.data.true_bias, "bias", 0.0, 0.05);
                         }},
                        {"other target shapes throw", [](Check& c) {
                           RegressionRun run = regression_setup();
                           const Tensor x = run.data.data->x();
                           c.input("x " + x.str() + "; y (N, 2) and y (N - 1)");
                           c.require_throws(
                               [&] {
                                 lab4::train_regression(*run.model, x, zeros({kExamples, 2}), 1, kLr);
                               },
                               "train_regression with y (N, 2) (it would broadcast to (N, 2) without an error)");
                           c.require_throws(
                               [&] { lab4::train_regression(*run.model, x, zeros({kExamples - 1}), 1, kLr); },
                               "train_regression with y (N - 1)");
                         }}}});

  // ---- Task 4.5 ------------------------------------------------------------------------------
  lab.tasks.push_back({5,
                       "read the in-place error",
                       15,
                       "lab4::read_inplace_error()",
                       {read_error_case(
                            "y = a * w, then w.add_(1): mul saved both inputs",
                            [] {
                              Tensor a = randn_seeded({3, 4}, 1).requires_grad_(true), w = randn_seeded({3, 4}, 2);
                              Tensor y = a * w;
                              w.add_(1.0);
                              y.sum().backward();
                            },
                            inplace("float32[3, 4]", "mul", "add_", 0, 1)),
                        read_error_case(
                            "y = x.sigmoid(), then y.mul_(2): sigmoid saved its output",
                            [] {
                              Tensor x = randn_seeded({2, 5}, 3).requires_grad_(true);
                              Tensor y = x.sigmoid();
                              y.mul_(2.0);
                              y.sum().backward();
                            },
                            inplace("float32[2, 5]", "sigmoid", "mul_", 0, 1)),
                        read_error_case(
                            "y = x.matmul(w), then x.add_(1) and x.mul_(2): two modifications",
                            [] {
                              Tensor x0 = randn_seeded({2, 3}, 4).requires_grad_(true);
                              Tensor x = x0 * 1.0, w = randn_seeded({3, 4}, 5).requires_grad_(true);
                              Tensor y = x.matmul(w);
                              x.add_(1.0);
                              x.mul_(2.0);
                              y.sum().backward();
                            },
                            inplace("float32[2, 3]", "matmul", "add_", 0, 2)),
                        read_error_case(
                            "x.add_(1), then y = x * w, then x.mul_(3): saved at version 1",
                            [] {
                              Tensor x0 = randn_seeded({2, 3}, 6).requires_grad_(true);
                              Tensor x = x0 * 1.0;
                              x.add_(1.0);
                              Tensor w = randn_seeded({2, 3}, 7).requires_grad_(true);
                              Tensor y = x * w;
                              x.mul_(3.0);
                              y.sum().backward();
                            },
                            inplace("float32[2, 3]", "mul", "mul_", 1, 2)),
                        read_error_case(
                            "nn::Residual(Sequential(ReLU, Linear(3, 3))) with bug B02, x = x0 * 1 (2, 3)",
                            [] {
                              manual_seed(8);
                              auto inner = std::make_shared<nn::Sequential>(std::make_shared<nn::ReLU>(),
                                                                            std::make_shared<nn::Linear>(3, 3));
                              auto r = std::make_shared<nn::Residual>(inner);
                              r->inject_bug(nn::Bug::B02);
                              Tensor x0 = randn_seeded({2, 3}, 9).requires_grad_(true);
                              (*r)(x0 * 1.0).sum().backward();  // a non-leaf x: relu records, saving it
                            },
                            inplace("float32[2, 3]", "relu", "add_", 0, 1)),
                        read_error_case(
                            "lab4::ResidualMLPInplace(6), x (4, 6) (the given block of Task 4.6)",
                            [] {
                              manual_seed(10);
                              auto m = std::make_shared<lab4::ResidualMLPInplace>(6);
                              Tensor x = randn_seeded({4, 6}, 11);
                              (*m)(x).sum().backward();
                            },
                            inplace("float32[4, 6]", "matmul", "add_", 0, 2)),
                        read_error_case(
                            "another error: matmul (3, 4) @ (3, 4)",
                            [] {
                              matmul(ones({3, 4}), ones({3, 4}));
                            },
                            lab4::InplaceReport{}),
                        read_error_case(
                            "another in-place error: add_ on a leaf that requires grad",
                            [] {
                              randn_seeded({2, 2}, 12).requires_grad_(true).add_(1.0);
                            },
                            lab4::InplaceReport{})}});

  // ---- Task 4.6 ------------------------------------------------------------------------------
  lab.tasks.push_back(
      {6,
       "fix the residual block (bug B02)",
       20,
       "lab4::ResidualMLP::forward()",
       {block_forward_case("forward: x (4, 6)", 4, 6),
        block_forward_case("forward: a batch of one, x (1, 3)", 1, 3),
        {"backward runs, and the gradients match",
         [](Check& c) {
           manual_seed(23);
           auto m = std::make_shared<lab4::ResidualMLP>(5);
           const Tensor x0 = randn_seeded({4, 5}, 24), v = randn_seeded({4, 5}, 25);
           c.input("ResidualMLP(5), x (4, 5) a leaf that requires grad, loss = sum(y * v) for a fixed random v");
           const RefBlock ref(*m);
           Tensor x = x0.clone().requires_grad_(true), xr = x0.clone().requires_grad_(true);
           ((*m)(x)*v).sum().backward();
           (ref(xr) * v).sum().backward();
           c.require(x.grad().defined(), "x.grad is undefined after backward()");
           c.require_close(x.grad(), xr.grad(), "x.grad", 1e-4, 1e-5);
           require_block_grads(c, *m, ref, "");
         }},
        {"the caller's x is left as it was",
         [](Check& c) {
           manual_seed(26);
           auto m = std::make_shared<lab4::ResidualMLP>(4);
           Tensor x = randn_seeded({3, 4}, 27);
           const Tensor before = x.clone();
           const uint64_t version = x.version();
           c.input("ResidualMLP(4), x (3, 4) not requiring grad; y = block(x); y.sum().backward()");
           (*m)(x).sum().backward();
           c.require(x.version() == version, "x was modified in place (its version went from " +
                                                 std::to_string(version) + " to " + std::to_string(x.version()) +
                                                 "): `Tensor out = x` copies the handle, not the values, "
                                                 "so out.add_(h) writes into the caller's x");
           c.require_close(x, before, "x after the forward", 0.0, 0.0);
         }},
        {"two blocks in a row: backward through both", [](Check& c) {
           manual_seed(28);
           auto b1 = std::make_shared<lab4::ResidualMLP>(4), b2 = std::make_shared<lab4::ResidualMLP>(4);
           auto net = std::make_shared<nn::Sequential>(b1, b2);
           const Tensor x0 = randn_seeded({5, 4}, 29);
           c.input("Sequential(ResidualMLP(4), ResidualMLP(4)), x (5, 4) a leaf that requires grad, loss = sum");
           const RefBlock r1(*b1), r2(*b2);
           Tensor x = x0.clone().requires_grad_(true), xr = x0.clone().requires_grad_(true);
           (*net)(x).sum().backward();
           r2(r1(xr)).sum().backward();
           c.require(x.grad().defined(), "x.grad is undefined after backward()");
           c.require_close(x.grad(), xr.grad(), "x.grad", 1e-4, 1e-5);
           require_block_grads(c, *b1, r1, "block 1: ");
           require_block_grads(c, *b2, r2, "block 2: ");
         }}}});
  return lab;
}

}  // namespace gradsleuth::labs
