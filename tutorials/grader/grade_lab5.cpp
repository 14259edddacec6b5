// The grader of lab 5 (batches that mix examples). The answer keys: a reference
// probe written here (the same test, done once by the grader), layers whose
// mixing is known (library layers with and without bugs B13, B14, B23, and a few
// small ones defined below), the library's BatchNorm1d, a batch-major formula for
// TimeAverage, and debug::batch_mixing_test for the comparison of Task 5.5.
//
// Dimension letters: B = batch, T = time steps, D = features, M = outputs, C = channels.
#include "tutorials/grader/grader.h"
#include "tutorials/grader/labs.h"
#include "tutorials/lab5_batch_mixing/lab5.h"

#include <algorithm>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/model/model_checks.h"
#include "nn/nn.h"

namespace gradsleuth::labs {

namespace {

using ModelFn = std::function<nn::ModulePtr()>;

std::string rows_str(const std::vector<int64_t>& r) {
  std::string s = "{";
  for (size_t k = 0; k < r.size(); ++k) s += (k ? ", " : "") + std::to_string(r[k]);
  return s + "}";
}

// ---- small layers with known mixing ----------------------------------------------------------------
// out[i] = x[i] - x[0]: rows 1.. depend on row 0; row 0's output is 0 whatever the input.
// A probe of row 0 alone sees nothing wrong (and no gradient at all).
class SubtractFirst : public nn::Module {
 public:
  SubtractFirst() : Module("SubtractFirst") {}
  Tensor forward(const Tensor& x) override { return x - x.narrow(0, 0, 1); }
};

// out[i] = x[(i + 1) % B]: the batch rotated by one row (a shuffle inside the model).
class RollBatch : public nn::Module {
 public:
  RollBatch() : Module("RollBatch") {}
  Tensor forward(const Tensor& x) override {
    const int64_t B = x.size(0);
    return cat({x.narrow(0, 1, B - 1), x.narrow(0, 0, 1)}, 0);
  }
};

// Rows 0 and 1 swapped, the others left alone: only those two rows are mixed.
class SwapFirstTwo : public nn::Module {
 public:
  SwapFirstTwo() : Module("SwapFirstTwo") {}
  Tensor forward(const Tensor& x) override {
    return cat({x.narrow(0, 1, 1), x.narrow(0, 0, 1), x.narrow(0, 2, x.size(0) - 2)}, 0);
  }
};

// TimeAverage done right, batch-major, one time step at a time (the answer key of Task 5.3).
Tensor ref_time_average(const Tensor& x, const Tensor& w, const Tensor& b) {
  tensor_list hs;
  for (int64_t t = 0; t < x.size(1); ++t) hs.push_back(x.narrow(1, 0, t + 1).mean({1}));  // (B, D)
  return linear(stack(hs, 1), w, b);                                                      // (B, T, M)
}

class GraderTimeAverage : public nn::Module {
 public:
  GraderTimeAverage(int64_t d, int64_t m) : Module("GraderTimeAverage") {
    weight = register_parameter("weight", randn_seeded({m, d}, 70, 0.5));
    bias = register_parameter("bias", randn_seeded({m}, 71, 0.5));
  }
  Tensor forward(const Tensor& x) override { return ref_time_average(x, weight, bias); }
  Tensor weight, bias;
};

// A linear layer on x.detach(): its output needs gradients (the parameters), x gets none.
class DetachedInput : public nn::Module {
 public:
  explicit DetachedInput(int64_t d) : Module("DetachedInput") {
    fc = register_module("fc", std::make_shared<nn::Linear>(d, 2));
  }
  Tensor forward(const Tensor& x) override { return (*fc)(x.detach()); }
  std::shared_ptr<nn::Linear> fc;
};

// Outputs without a batch dim first: the probe must refuse them.
class SumAll : public nn::Module {
 public:
  SumAll() : Module("SumAll") {}
  Tensor forward(const Tensor& x) override { return x.sum(); }
};
class AppendFirst : public nn::Module {  // (B, D) -> (B + 1, D)
 public:
  AppendFirst() : Module("AppendFirst") {}
  Tensor forward(const Tensor& x) override { return cat({x, x.narrow(0, 0, 1)}, 0); }
};

// The student's batchnorm_forward as a layer, in the layer's mode, with fixed statistics.
class StudentBatchNorm : public nn::Module {
 public:
  explicit StudentBatchNorm(int64_t c) : Module("StudentBatchNorm") {
    mean = randn_seeded({c}, 40, 0.5);
    var = randn_seeded({c}, 41).abs() + 0.5;
  }
  Tensor forward(const Tensor& x) override {
    return lab5::batchnorm_forward(x, mean, var, Tensor(), Tensor(), 1e-5, is_training());
  }
  Tensor mean, var;
};

std::shared_ptr<nn::Linear> buggy_linear(int64_t d, int64_t m) {
  auto l = std::make_shared<nn::Linear>(d, m);
  l->inject_bug(nn::Bug::B13);
  return l;
}

// ---- the reference probe ------------------------------------------------------------------------
struct RefProbe {
  Tensor grad_norms;
  std::vector<int64_t> rows;
};

RefProbe ref_probe(nn::Module& model, const Tensor& x, int64_t i, uint64_t weight_seed = 0) {
  std::vector<Tensor> params = model.parameters();
  std::vector<Tensor> grads;
  for (Tensor& p : params) {
    grads.push_back(p.grad());
    p.set_grad(Tensor());
  }
  Tensor xi = x.detach().clone().requires_grad_(true);
  const Tensor row = model(xi).select(0, i);
  Tensor loss = row.sum();
  if (weight_seed != 0) {
    Generator gen(weight_seed);
    loss = (row * randn(row.shape(), kFloat32, &gen)).sum();
  }
  if (loss.requires_grad()) loss.backward();
  for (size_t k = 0; k < params.size(); ++k) params[k].set_grad(grads[k]);
  NoGradGuard no_grad;
  const Tensor g = xi.grad().defined() ? xi.grad() : zeros_like(xi.detach());
  const int64_t B = x.size(0);
  RefProbe r;
  r.grad_norms = g.reshape({B, -1}).square().sum({1}).sqrt();
  const std::vector<double> largest = g.reshape({B, -1}).abs().max(1).to_vector<double>();
  for (int64_t j = 0; j < B; ++j)
    if (largest[j] > 0.0) r.rows.push_back(j);
  return r;
}

std::vector<int64_t> ref_mixing_rows(nn::Module& model, const Tensor& x) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < x.size(0); ++i) {
    const auto rows = ref_probe(model, x, i).rows;
    if (std::any_of(rows.begin(), rows.end(), [i](int64_t j) { return j != i; })) out.push_back(i);
  }
  return out;
}

// ---- Task 5.1 ------------------------------------------------------------------------------------
Case probe_case(const std::string& name, ModelFn make, Shape xs, int64_t i, bool train = true,
                uint64_t weight_seed = 0) {
  const std::string probe = weight_seed ? ", weight_seed " + std::to_string(weight_seed) : std::string();
  return {name + ", row " + std::to_string(i) + probe, [=](Check& c) {
            manual_seed(31);
            const nn::ModulePtr model = make();
            model->train(train);
            const Tensor x = randn_seeded(xs, 32);
            c.input(name + " (" + (train ? "training" : "eval") + " mode), x " + x.str() +
                    ", i = " + std::to_string(i) + probe);
            // Both probes see the same state (a training-mode BatchNorm moves its statistics).
            const auto saved = model->buffers();
            std::vector<Tensor> copies;
            for (const Tensor& b : saved) copies.push_back(b.clone());
            const RefProbe want = ref_probe(*model, x, i, weight_seed);
            {
              NoGradGuard ng;
              for (size_t k = 0; k < saved.size(); ++k) Tensor(saved[k]).copy_(copies[k]);
            }
            const lab5::MixingProbe got = lab5::batch_mixing_probe(*model, x, i, weight_seed);
            c.require(got.rows == want.rows, "rows: expected " + rows_str(want.rows) + ", got " + rows_str(got.rows) +
                                                 " (the rows j whose gradient has a non-zero element)");
            c.require_close(got.grad_norms, want.grad_norms, "grad_norms", 1e-4, 1e-6);
          }};
}

// ---- Task 5.2 ------------------------------------------------------------------------------------
struct Layer {
  std::string name;
  ModelFn make;
  bool train = true;
};

// Two layers that differ in one respect, one keeping the rows apart and one mixing
// them: both answers must be right (a constant answer gets nothing).
Case classify_pair(const std::string& name, const Layer& clean, const Layer& mixing, Shape xs,
                   const std::string& hint = "", uint64_t x_seed = 34) {
  return {name, [=](Check& c) {
            const Tensor x = randn_seeded(xs, x_seed);
            for (const Layer* l : {&clean, &mixing}) {
              const bool want = l == &mixing;
              manual_seed(33);
              const nn::ModulePtr layer = l->make();
              layer->train(l->train);
              c.input(l->name + " (" + (l->train ? "training" : "eval") + " mode), x " + x.str());
              const bool got = lab5::mixes_batch(*layer, x);
              c.require(got == want, std::string("expected ") + (want ? "mixes the batch" : "does not mix the batch") +
                                         ", got " + (got ? "mixes" : "does not mix") +
                                         (hint.empty() ? "" : ". " + hint));
            }
          }};
}

// ---- Task 5.3 ------------------------------------------------------------------------------------

Case time_average_case(const std::string& name, Shape xs, int64_t m, bool transposed_input = false) {
  return {
      name, [=](Check& c) {
        manual_seed(35);
        auto layer = std::make_shared<lab5::TimeAverage>(xs[2], m);
        Tensor x = transposed_input ? randn_seeded({xs[1], xs[0], xs[2]}, 36).transpose(0, 1) : randn_seeded(xs, 36);
        c.input("TimeAverage(" + std::to_string(xs[2]) + ", " + std::to_string(m) + "), x " + describe(x));
        const Tensor got = (*layer)(x);
        c.require_close(got, ref_time_average(x, layer->weight, layer->bias).detach(), "y", 1e-4, 1e-5);
      }};
}

// ---- Task 5.4 ------------------------------------------------------------------------------------
struct BnSetup {
  std::shared_ptr<nn::BatchNorm1d> bn;
  Tensor x;
};

BnSetup bn_setup(int64_t b, int64_t ch, bool affine, uint64_t seed) {
  BnSetup s;
  s.bn = std::make_shared<nn::BatchNorm1d>(nn::BatchNormOptions(ch).affine(affine));
  NoGradGuard ng;
  s.bn->running_mean.copy_(randn_seeded({ch}, seed, 0.5));
  s.bn->running_var.copy_(randn_seeded({ch}, seed + 1).abs() + 0.5);
  if (affine) {
    s.bn->weight.copy_(randn_seeded({ch}, seed + 2) + 1.0);
    s.bn->bias.copy_(randn_seeded({ch}, seed + 3));
  }
  s.x = randn_seeded({b, ch}, seed + 4, 2.0) + 1.0;
  return s;
}

Case bn_case(const std::string& name, int64_t b, int64_t ch, bool affine, bool training) {
  return {name, [=](Check& c) {
            const BnSetup s = bn_setup(b, ch, affine, 50);
            c.input("x " + s.x.str() + ", " + (training ? "training" : "eval") + " mode, " +
                    (affine ? "with weight and bias" : "weight and bias undefined") + ", eps 1e-5, running_mean " +
                    values_str(s.bn->running_mean) + ", running_var " + values_str(s.bn->running_var));
            const Tensor rm = s.bn->running_mean.clone(), rv = s.bn->running_var.clone();
            Tensor x1 = s.x.clone().requires_grad_(true), x2 = s.x.clone().requires_grad_(true);
            const Tensor got = lab5::batchnorm_forward(x1, s.bn->running_mean, s.bn->running_var, s.bn->weight,
                                                       s.bn->bias, 1e-5, training);
            c.require_close(s.bn->running_mean, rm, "running_mean after your forward (it must not change)", 0.0, 0.0);
            c.require_close(s.bn->running_var, rv, "running_var after your forward (it must not change)", 0.0, 0.0);
            s.bn->train(training);
            const Tensor want = (*s.bn)(x2);
            c.require_close(got, want.detach(), "y", 1e-4, 1e-5);
            const Tensor v = randn_seeded({b, ch}, 60);
            (got * v).sum().backward();
            (want * v).sum().backward();
            c.require(x1.grad().defined(), "x.grad is undefined after backward(): build y with tensor ops");
            c.require_close(x1.grad(), x2.grad(), "x.grad (loss = sum(y * v), v fixed and random)", 1e-3, 1e-4);
          }};
}

// ---- Task 5.5 ------------------------------------------------------------------------------------
bool is_batchnorm_model(nn::Module& m) {
  for (auto& [p, sub] : m.named_modules())
    if (dynamic_cast<nn::BatchNormBase*>(sub.get())) return true;
  return false;
}

std::string verdict_str(bool mixes, const std::vector<int64_t>& rows, bool bn) {
  return std::string("mixes ") + (mixes ? "true" : "false") + ", mixing_rows " + rows_str(rows) +
         ", batchnorm_coupling " + (bn ? "true" : "false");
}

std::string findings_str(const std::vector<debug::Finding>& fs) {
  if (fs.empty()) return "no findings";
  std::string s;
  for (const debug::Finding& f : fs)
    s += (s.empty() ? "" : "; ") + std::string("[") + debug::severity_name(f.severity) + "] " + f.title;
  return s;
}

// Every module's mode and a copy of every buffer.
struct StateSnapshot {
  std::vector<bool> modes;
  std::vector<Tensor> buffers;
  explicit StateSnapshot(nn::Module& m) {
    for (auto& [p, sub] : m.named_modules()) modes.push_back(sub->is_training());
    for (const Tensor& b : m.buffers()) buffers.push_back(b.clone());
  }
};

Case verdict_case(const std::string& name, ModelFn make, bool train, const std::string& hint = "", int weight = 1) {
  return {name,
          [=](Check& c) {
            manual_seed(37);
            const nn::ModulePtr model = make();
            model->train(train);
            const Tensor x = randn_seeded({6, 4}, 38);
            c.input(name + " (in " + (train ? "training" : "eval") + " mode), x " + x.str());
            // The expected verdict, from the reference probe (on the same state as the student's run).
            const StateSnapshot before(*model);
            bool want_bn = false;
            std::vector<int64_t> want_rows;
            {
              model->eval();
              want_rows = ref_mixing_rows(*model, x);
              if (want_rows.empty() && is_batchnorm_model(*model)) {
                model->train();
                want_bn = !ref_mixing_rows(*model, x).empty();
              }
              NoGradGuard ng;
              const auto live = model->buffers();
              for (size_t k = 0; k < live.size(); ++k) Tensor(live[k]).copy_(before.buffers[k]);
              model->train(train);
            }
            int64_t eval_runs = 0, train_runs = 0;
            const size_t hook = model->register_forward_hook(
                [&](nn::Module& m, const Tensor&, const Tensor&) { ++(m.is_training() ? train_runs : eval_runs); });
            lab5::MixingVerdict got;
            try {
              got = lab5::check_batch_mixing(*model, x);
            } catch (...) {
              model->remove_forward_hook(hook);
              throw;
            }
            model->remove_forward_hook(hook);
            const StateSnapshot after(*model);
            c.require(eval_runs > 0,
                      "check_batch_mixing never ran the model in eval mode: probe its rows after "
                      "model.eval()");
            c.require(!is_batchnorm_model(*model) || !want_rows.empty() || train_runs > 0,
                      "the model has BatchNorm and is clean in eval mode, but check_batch_mixing never ran it in "
                      "training mode");
            // The library's test, for comparison (it probes row 0 only).
            const std::string lib = "debug::batch_mixing_test: " + findings_str(debug::batch_mixing_test(*model, x));
            c.note(lib);
            c.require(
                got.mixes == !want_rows.empty() && got.mixing_rows == want_rows && got.batchnorm_coupling == want_bn,
                "expected " + verdict_str(!want_rows.empty(), want_rows, want_bn) + ", got " +
                    verdict_str(got.mixes, got.mixing_rows, got.batchnorm_coupling) +
                    (hint.empty() ? "" : ". " + hint) + "\n" + lib);
            // The model is left as it was.
            c.require(after.modes == before.modes, "the modules' modes changed: the model was in " +
                                                       std::string(train ? "training" : "eval") +
                                                       " mode and must be again afterwards, every submodule included");
            for (size_t k = 0; k < before.buffers.size(); ++k)
              c.require_close(after.buffers[k], before.buffers[k],
                              "buffer " + std::to_string(k) +
                                  " (a training-mode forward moves BatchNorm's running "
                                  "statistics; put them back)",
                              0.0, 0.0);
          },
          weight};
}

nn::ModulePtr seq(std::initializer_list<nn::ModulePtr> layers) { return std::make_shared<nn::Sequential>(layers); }

}  // namespace

Lab make_lab5() {
  Lab lab;
  lab.number = 5;
  lab.dir = "lab5_batch_mixing";
  lab.title = "Batches that mix examples";
  lab.starter = "tutorials/lab5_batch_mixing/lab5.cpp";

  const ModelFn linear43 = [] { return nn::ModulePtr(std::make_shared<nn::Linear>(4, 3)); };
  const ModelFn b13_43 = [] { return nn::ModulePtr(buggy_linear(4, 3)); };
  const ModelFn bn3 = [] { return nn::ModulePtr(std::make_shared<nn::BatchNorm1d>(3)); };
  const ModelFn b13_softmax = [] { return seq({buggy_linear(6, 4), std::make_shared<nn::Softmax>(1)}); };

  // ---- Task 5.1 ------------------------------------------------------------------------------
  lab.tasks.push_back(
      {1,
       "the batch-mixing probe",
       20,
       "lab5::batch_mixing_probe()",
       {probe_case("nn::Linear(4, 3), x (5, 4)", linear43, {5, 4}, 0),
        probe_case("nn::Linear(4, 3), x (5, 4)", linear43, {5, 4}, 4),
        probe_case("nn::Linear(4, 3) with bug B13, x (5, 4)", b13_43, {5, 4}, 0),
        probe_case("nn::Linear(4, 3) with bug B13, x (5, 4)", b13_43, {5, 4}, 3),
        probe_case(
            "nn::LogSoftmax(1) with bug B14, x (4, 3)",
            [] {
              auto l = std::make_shared<nn::LogSoftmax>(1);
              l->inject_bug(nn::Bug::B14);
              return nn::ModulePtr(l);
            },
            {4, 3}, 1),
        probe_case("nn::BatchNorm1d(3), x (5, 3)", bn3, {5, 3}, 2, true),
        probe_case("nn::BatchNorm1d(3), x (5, 3)", bn3, {5, 3}, 2, false),
        probe_case(
            "lab5::TimeAverageBuggy(2, 3), x (3, 4, 2) (3-D input)",
            [] { return nn::ModulePtr(std::make_shared<lab5::TimeAverageBuggy>(2, 3)); }, {3, 4, 2}, 1),
        probe_case("nn::Linear(4, 3), x (5, 4)", linear43, {5, 4}, 2, true, 7),
        probe_case("nn::Linear(6, 4) with bug B13, then nn::Softmax(1), x (5, 6)", b13_softmax, {5, 6}, 0, true, 7),
        probe_case(
            "DetachedInput: Linear(x.detach()), x (4, 3): no gradient reaches x",
            [] { return nn::ModulePtr(std::make_shared<DetachedInput>(3)); }, {4, 3}, 0),
        {"leaves no trace: x and the parameters' gradients",
         [](Check& c) {
           manual_seed(39);
           auto model = std::make_shared<nn::Linear>(4, 3);
           const Tensor x = randn_seeded({5, 4}, 40);
           const Tensor g = randn_seeded({3, 4}, 41);
           model->weight.set_grad(g.clone());
           c.input(
               "nn::Linear(4, 3) whose weight.grad holds an earlier gradient and whose bias.grad is undefined, "
               "x (5, 4), i = 1");
           const lab5::MixingProbe got = lab5::batch_mixing_probe(*model, x, 1);
           c.require(got.rows == std::vector<int64_t>{1}, "rows: expected {1}, got " + rows_str(got.rows));
           c.require(!x.grad().defined() && !x.requires_grad(),
                     "x now requires grad or has a .grad: probe a copy, x.detach().clone().requires_grad_(true)");
           c.require(model->weight.grad().defined(), "weight.grad is undefined after the probe: put it back");
           c.require_close(model->weight.grad(), g,
                           "weight.grad after the probe (the probe's backward must not add "
                           "into it: backward accumulates in place, so set it aside before and put it back after)",
                           0.0, 0.0);
           const Tensor bg = model->bias.grad();
           c.require(!bg.defined() || (within_storage(bg) && bg.abs().sum().item<double>() == 0.0),
                     "bias.grad is set after the probe; it was undefined before");
         }},
        {"bad input throws", [](Check& c) {
           manual_seed(42);
           auto lin = std::make_shared<nn::Linear>(4, 3);
           c.input(
               "Linear(4, 3): i = 5 and i = -1 with x (5, 4); x (1, 4); a model returning x.sum() (no batch "
               "dim); a model returning (B + 1, D)");
           const Tensor x = randn_seeded({5, 4}, 43);
           c.require_throws([&] { lab5::batch_mixing_probe(*lin, x, 5); }, "i = 5 for a batch of 5");
           c.require_throws([&] { lab5::batch_mixing_probe(*lin, x, -1); }, "i = -1");
           c.require_throws(
               [&] {
                 lab5::batch_mixing_probe(*lin, randn_seeded({1, 4}, 44), 0);
               },
               "a batch of one (nothing to mix with)");
           auto sum_all = std::make_shared<SumAll>();
           c.require_throws([&] { lab5::batch_mixing_probe(*sum_all, x, 0); }, "an output without a batch dim");
           auto append = std::make_shared<AppendFirst>();
           c.require_throws([&] { lab5::batch_mixing_probe(*append, x, 0); },
                            "an output of 6 rows for a batch of 5 (check out.size(0) == B)");
         }}}});

  // ---- Task 5.2 ------------------------------------------------------------------------------
  auto lin = [](int64_t d, int64_t m, bool b13) -> ModelFn {
    return [=] { return nn::ModulePtr(b13 ? buggy_linear(d, m) : std::make_shared<nn::Linear>(d, m)); };
  };
  auto log_softmax = [](bool b14) -> ModelFn {
    return [=] {
      auto l = std::make_shared<nn::LogSoftmax>(1);
      if (b14) l->inject_bug(nn::Bug::B14);
      return nn::ModulePtr(l);
    };
  };
  auto softmax = [](int64_t dim) -> ModelFn {
    return [=] { return nn::ModulePtr(std::make_shared<nn::Softmax>(dim)); };
  };
  const ModelFn bn6 = [] { return nn::ModulePtr(std::make_shared<nn::BatchNorm1d>(6)); };
  const ModelFn mlp6 = [] {
    return seq({std::make_shared<nn::Linear>(6, 8), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 3)});
  };
  lab.tasks.push_back(
      {2,
       "which layers mix the batch",
       15,
       "lab5::mixes_batch()",
       {classify_pair("nn::Linear(6, 4) without and with bug B13", {"nn::Linear(6, 4)", lin(6, 4, false)},
                      {"nn::Linear(6, 4) with bug B13", lin(6, 4, true)}, {5, 6}),
        classify_pair("bug B13 with one output feature and with four",
                      {"nn::Linear(6, 1) with bug B13", lin(6, 1, true)},
                      {"nn::Linear(6, 4) with bug B13", lin(6, 4, true)}, {5, 6},
                      "With one output, (1, B) reshaped to (B, 1) is the transpose: nothing moves"),
        classify_pair("nn::LogSoftmax(1) without and with bug B14", {"nn::LogSoftmax(1)", log_softmax(false)},
                      {"nn::LogSoftmax(1) with bug B14", log_softmax(true)}, {5, 6}),
        classify_pair("a softmax over the features and over the batch", {"nn::Softmax(1)", softmax(1)},
                      {"nn::Softmax(0)", softmax(0)}, {5, 6}),
        classify_pair("nn::Softmax(1) alone and after a Linear with bug B13", {"nn::Softmax(1)", softmax(1)},
                      {"nn::Linear(6, 4) with bug B13, then nn::Softmax(1)", b13_softmax}, {5, 6},
                      "Each softmax row sums to 1 whatever its inputs, so out[i].sum() has no gradient at all: "
                      "probe with a weight_seed",
                      38),  // an input on which every plain-sum probe's gradient is exactly 0 (no rounding noise)
        classify_pair("nn::BatchNorm1d(6) in eval and in training mode", {"nn::BatchNorm1d(6)", bn6, false},
                      {"nn::BatchNorm1d(6)", bn6, true}, {5, 6}),
        classify_pair("nn::LayerNorm(6) and nn::BatchNorm1d(6), both in training mode",
                      {"nn::LayerNorm(6)", [] { return nn::ModulePtr(std::make_shared<nn::LayerNorm>(6)); }},
                      {"nn::BatchNorm1d(6)", bn6}, {5, 6}),
        classify_pair("nn::Dropout(0.5) and a rotation of the batch, out[i] = x[(i + 1) % B]",
                      {"nn::Dropout(0.5)", [] { return nn::ModulePtr(std::make_shared<nn::Dropout>(0.5)); }},
                      {"RollBatch", [] { return nn::ModulePtr(std::make_shared<RollBatch>()); }}, {5, 6}),
        classify_pair("an MLP and out[i] = x[i] - x[0]", {"Linear(6, 8), ReLU, Linear(8, 3)", mlp6},
                      {"SubtractFirst", [] { return nn::ModulePtr(std::make_shared<SubtractFirst>()); }}, {5, 6},
                      "Did you probe every row? This layer couples only some of them"),
        classify_pair(
            "a time-major running mean with transposes and with reshapes (TimeAverageBuggy)",
            {"GraderTimeAverage(3, 2)", [] { return nn::ModulePtr(std::make_shared<GraderTimeAverage>(3, 2)); }},
            {"lab5::TimeAverageBuggy(3, 2)",
             [] { return nn::ModulePtr(std::make_shared<lab5::TimeAverageBuggy>(3, 2)); }},
            {4, 5, 3})}});

  // ---- Task 5.3 ------------------------------------------------------------------------------
  lab.tasks.push_back(
      {3,
       "fix the time-major layer",
       25,
       "lab5::TimeAverage::forward()",
       {time_average_case("x (3, 4, 5) -> (3, 4, 2)", {3, 4, 5}, 2),
        time_average_case("a batch of one: x (1, 3, 2)", {1, 3, 2}, 3),
        time_average_case("one time step: x (4, 1, 3)", {4, 1, 3}, 2),
        time_average_case("a non-contiguous input (a transposed view) (2, 5, 3)", {2, 5, 3}, 4, true),
        {"gradients of x, weight and bias",
         [](Check& c) {
           manual_seed(45);
           auto layer = std::make_shared<lab5::TimeAverage>(3, 2);
           const Tensor x0 = randn_seeded({3, 4, 3}, 46), v = randn_seeded({3, 4, 2}, 47);
           c.input("TimeAverage(3, 2), x (3, 4, 3), loss = sum(y * v) for a fixed random v");
           Tensor x = x0.clone().requires_grad_(true), xr = x0.clone().requires_grad_(true);
           Tensor w = layer->weight.detach().clone().requires_grad_(true);
           Tensor b = layer->bias.detach().clone().requires_grad_(true);
           const Tensor y = (*layer)(x);
           c.require_tensor(y, {3, 4, 2}, "y");
           (y * v).sum().backward();
           (ref_time_average(xr, w, b) * v).sum().backward();
           c.require(x.grad().defined() && layer->weight.grad().defined() && layer->bias.grad().defined(),
                     "a gradient is undefined after backward(): build y with tensor ops from x, weight and bias");
           c.require_close(x.grad(), xr.grad(), "x.grad", 1e-4, 1e-5);
           c.require_close(layer->weight.grad(), w.grad(), "weight.grad", 1e-4, 1e-5);
           c.require_close(layer->bias.grad(), b.grad(), "bias.grad", 1e-4, 1e-5);
         }},
        {"passes the batch-mixing test, every row", [](Check& c) {
           manual_seed(48);
           auto layer = std::make_shared<lab5::TimeAverage>(3, 2);
           const Tensor x = randn_seeded({4, 5, 3}, 49);
           c.input(
               "TimeAverage(3, 2), x (4, 5, 3); the grader's own probe of each row, and "
               "debug::batch_mixing_test");
           c.require_tensor((*layer)(x), {4, 5, 2}, "y");
           for (int64_t i = 0; i < x.size(0); ++i) {
             const RefProbe p = ref_probe(*layer, x, i);
             c.require(p.rows == std::vector<int64_t>{i},
                       "output row " + std::to_string(i) + " depends on the input rows " + rows_str(p.rows) +
                           ", expected only {" + std::to_string(i) + "}: some reshape still moves examples");
           }
           for (const debug::Finding& f : debug::batch_mixing_test(*layer, x))
             c.require(!f.fires(), "debug::batch_mixing_test reports: " + f.title);
         }}}});

  // ---- Task 5.4 ------------------------------------------------------------------------------
  lab.tasks.push_back(
      {4,
       "BatchNorm's two modes",
       15,
       "lab5::batchnorm_forward()",
       {bn_case("training mode: the batch's statistics", 6, 3, true, true),
        bn_case("eval mode: the running statistics", 6, 3, true, false),
        bn_case("training mode without weight and bias", 5, 4, false, true),
        bn_case("eval mode without weight and bias", 5, 4, false, false),
        {"your layer couples the batch in training mode only", [](Check& c) {
           manual_seed(51);
           auto layer = std::make_shared<StudentBatchNorm>(3);
           const Tensor x = randn_seeded({5, 3}, 52);
           c.input("your batchnorm_forward as a layer, x (5, 3): the grader's probe of row 2 in each mode");
           layer->train();
           c.require_tensor((*layer)(x), {5, 3}, "y");
           const RefProbe tr = ref_probe(*layer, x, 2);
           c.require(tr.rows == std::vector<int64_t>{0, 1, 2, 3, 4},
                     "in training mode row 2's output should depend on every row (through the batch's mean and "
                     "variance); got rows " +
                         rows_str(tr.rows));
           layer->eval();
           const RefProbe ev = ref_probe(*layer, x, 2);
           c.require(ev.rows == std::vector<int64_t>{2},
                     "in eval mode row 2's output should depend on row 2 only; got rows " + rows_str(ev.rows));
         }}}});

  // ---- Task 5.5 ------------------------------------------------------------------------------
  auto mlp = [] {
    return seq({std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 3)});
  };
  auto bn_mlp = [](bool track) {
    return [track] {
      return seq({std::make_shared<nn::Linear>(4, 8),
                  std::make_shared<nn::BatchNorm1d>(nn::BatchNormOptions(8).track_running_stats(track)),
                  std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 3)});
    };
  };
  lab.tasks.push_back(
      {5,
       "a verdict that knows BatchNorm",
       25,
       "lab5::check_batch_mixing()",
       {verdict_case("an MLP, Linear(4, 8), ReLU, Linear(8, 3)", mlp, true),
        verdict_case("an MLP with BatchNorm1d(8)", bn_mlp(true), true,
                     "BatchNorm couples the rows in training mode only: probe in eval mode first"),
        verdict_case("an MLP with BatchNorm1d(8)", bn_mlp(true), false),
        verdict_case(
            "an MLP whose first Linear has bug B13",
            [] {
              return seq({buggy_linear(4, 8), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 3)});
            },
            true),
        verdict_case(
            "an MLP with BatchNorm1d(8) and bug B13 in its first Linear",
            [] {
              return seq({buggy_linear(4, 8), std::make_shared<nn::BatchNorm1d>(8), std::make_shared<nn::ReLU>(),
                          std::make_shared<nn::Linear>(8, 3)});
            },
            true),
        verdict_case("an MLP with BatchNorm1d(8, track_running_stats = false): batch statistics in eval too (B23)",
                     bn_mlp(false), true),
        verdict_case(
            "Dropout(0.5), Linear(4, 3)",
            [] {
              return seq({std::make_shared<nn::Dropout>(0.5), std::make_shared<nn::Linear>(4, 3)});
            },
            true, "eval mode switches dropout off; put the training mode back afterwards"),
        verdict_case(
            "SubtractFirst, Linear(4, 3): row 0 looks fine, every other row depends on row 0",
            [] {
              return seq({std::make_shared<SubtractFirst>(), std::make_shared<nn::Linear>(4, 3)});
            },
            true, "probe every row: a probe of row 0 alone (what debug::batch_mixing_test does) misses it", 2),
        verdict_case(
            "Linear(4, 8), SwapFirstTwo, ReLU, Linear(8, 3): only rows 0 and 1 are mixed",
            [] {
              return seq({std::make_shared<nn::Linear>(4, 8), std::make_shared<SwapFirstTwo>(),
                          std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 3)});
            },
            true, "mixing_rows lists the rows whose output depends on another row, from a probe of each row", 2),
        verdict_case(
            "Linear(4, 8), BatchNorm1d(8), SwapFirstTwo, ReLU, Linear(8, 3)",
            [] {
              return seq({std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::BatchNorm1d>(8),
                          std::make_shared<SwapFirstTwo>(), std::make_shared<nn::ReLU>(),
                          std::make_shared<nn::Linear>(8, 3)});
            },
            false, "in eval mode BatchNorm is innocent, and the swap is a bug", 2)}});
  return lab;
}

}  // namespace gradsleuth::labs
