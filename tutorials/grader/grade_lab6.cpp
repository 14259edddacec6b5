// The grader of lab 6 (dead ReLUs, saturation, vanishing gradients and
// initialisation). The answer keys are written here (dead units by loops over
// the values, fans and stds from their formulas, gradient norms in float64) and
// the debug module's trackers (M7 DeadReluTracker, M8 SaturationTracker, M9
// check_initialisation, O1 check_gradient_health) are run next to the student's
// code to show that both agree. The last task trains the repaired network on a
// Fashion-MNIST subset.
//
// Dimension letters: B = batch, D = features, C = channels, U = units.
#include "tutorials/grader/grader.h"
#include "tutorials/grader/labs.h"
#include "tutorials/lab6_init/lab6.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "core/generator.h"
#include "debug/checks/hooks.h"
#include "debug/checks/model/activation_stats.h"
#include "debug/checks/model/model_checks.h"
#include "debug/checks/optim/optim_checks.h"
#include "nn/nn.h"
#include "optim/sgd.h"

namespace gradsleuth::labs {

namespace {

// Task 6.5's training run and its goal. The reference solution reaches a last-epoch
// loss of about 0.52 and 81% test accuracy in about 0.2 s; the broken network stays at 2.30 and 10%.
constexpr int64_t kTrainImages = 5000;
constexpr int64_t kTestImages = 1000;
constexpr int kEpochs = 3;
constexpr double kLr = 0.05, kMomentum = 0.9;
constexpr double kMaxLoss = 0.65;
constexpr double kMinAccuracy = 0.77;

// ---- answer keys ----------------------------------------------------------------
// Dead units over batches (B, U, ...), by loops over the values: 1 = dead.
std::vector<double> key_dead(const std::vector<Tensor>& ys) {
  std::vector<double> alive;
  for (const Tensor& y : ys) {
    const int64_t B = y.size(0), U = y.size(1), rest = y.numel() / std::max<int64_t>(1, B * U);
    if (alive.empty()) alive.assign(static_cast<size_t>(U), 0.0);
    const std::vector<double> v = y.contiguous().to_vector<double>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t u = 0; u < U; ++u)
        for (int64_t r = 0; r < rest; ++r)
          if (v[(b * U + u) * rest + r] > 0.0) alive[u] = 1.0;
  }
  for (double& a : alive) a = 1.0 - a;
  return alive;
}

Tensor as_mask(const std::vector<double>& dead) { return tensor(dead, {static_cast<int64_t>(dead.size())}, kFloat64); }

// The student's dead-unit tensor, shape-checked, as float64 0/1 values.
Tensor got_mask(const Check& c, const Tensor& got, int64_t units) {
  c.require_tensor(got, {units}, "dead_units (one entry per unit: features of (B, D), channels of (B, C, H, W))");
  return got.to(kFloat64);
}

struct Moments {
  double mean = 0.0, std = 0.0, beyond2 = 0.0;  // beyond2: fraction with |x - mean| > 2 std
  int64_t n = 0;
};
Moments moments(const Tensor& t) {
  Moments m;
  const std::vector<double> v = t.detach().contiguous().to_vector<double>();
  m.n = static_cast<int64_t>(v.size());
  if (v.empty()) return m;
  for (double x : v) m.mean += x;
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.std += (x - m.mean) * (x - m.mean);
  m.std = std::sqrt(m.std / static_cast<double>(v.size()));
  for (double x : v) m.beyond2 += std::fabs(x - m.mean) > 2.0 * m.std ? 1.0 : 0.0;
  m.beyond2 /= static_cast<double>(v.size());
  return m;
}

// A weight drawn from N(0, want_std^2): mean, std and the share beyond 2 std (4.55% for a normal, 0 for a uniform).
void require_normal(const Check& c, const Tensor& w, double want_std, const std::string& what) {
  c.require(w.defined() && within_storage(w), what + ": the weight is undefined or outside its storage");
  const Moments m = moments(w);
  c.require(std::isfinite(m.std), what + ": the weight holds NaN or Inf");
  const double rel_tol = std::max(0.04, 5.0 / std::sqrt(2.0 * static_cast<double>(m.n)));
  c.require(std::fabs(m.std - want_std) <= rel_tol * want_std, what + ": std expected " + sci(want_std) + " (within " +
                                                                   fixed(100 * rel_tol, 0) + "%), got " + sci(m.std) +
                                                                   " over " + std::to_string(m.n) + " values");
  c.require(std::fabs(m.mean) <= 5.0 * want_std / std::sqrt(static_cast<double>(m.n)) + 1e-12,
            what + ": mean expected ~0, got " + sci(m.mean) + " (std " + sci(m.std) + ")");
  c.require(m.beyond2 > 0.03 && m.beyond2 < 0.065, what + ": " + fixed(100 * m.beyond2, 2) +
                                                       "% of the values lie beyond 2 std; a normal distribution has "
                                                       "4.55% there (a uniform one none): draw with randn");
}

// Gradient norms of the weights (dim >= 2, requires grad) in float64; 0 without a gradient.
std::vector<std::pair<std::string, double>> key_norms(const nn::Module& m) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [name, p] : m.named_parameters()) {
    if (p.dim() < 2 || !p.requires_grad()) continue;
    double s = 0.0;
    if (p.grad().defined())
      for (double g : p.grad().contiguous().to_vector<double>()) s += g * g;
    out.emplace_back(name, std::sqrt(s));
  }
  return out;
}

std::string norms_str(const std::vector<std::pair<std::string, double>>& ns) {
  std::string s;
  for (const auto& [n, v] : ns) s += (s.empty() ? "" : ", ") + n + " " + sci(v);
  return "[" + s + "]";
}

void require_norms(const Check& c, const std::vector<std::pair<std::string, double>>& got,
                   const std::vector<std::pair<std::string, double>>& want) {
  c.require(got.size() == want.size(), "weight_grad_norms: expected " + std::to_string(want.size()) + " weights " +
                                           norms_str(want) + ", got " + std::to_string(got.size()) + " " +
                                           norms_str(got) + " (weights: dim >= 2 and requires_grad)");
  for (size_t i = 0; i < want.size(); ++i) {
    c.require(got[i].first == want[i].first, "weight " + std::to_string(i) + ": expected the name '" + want[i].first +
                                                 "', got '" + got[i].first + "' (the path from named_parameters)");
    c.require_near(got[i].second, want[i].second, 1e-6 * std::max(1.0, want[i].second),
                   "the gradient norm of " + want[i].first);
  }
}

// One cross-entropy backward of `model` on a fixed batch x (64, in), y (64).
void backward_once(nn::Module& model, int64_t in, int64_t classes, uint64_t seed) {
  Generator gen(seed);
  const Tensor x = randn({64, in}, kFloat32, &gen);
  const Tensor y = randint(0, classes, {64}, kInt64, &gen);
  model.zero_grad();
  nn::functional::cross_entropy(model(x), y).backward();
}

// O1's depth finding: gradients that vanish or explode towards the input.
const debug::Finding* depth_warning(const std::vector<debug::Finding>& fs) {
  for (const auto& f : fs)
    if (f.fires() && (f.kind == debug::Kind::VanishTowardsInput || f.kind == debug::Kind::ExplodeTowardsInput))
      return &f;
  return nullptr;
}

std::vector<Tensor> layer_types_check(const Check& c, const nn::Sequential& m, int64_t in, int64_t width, int64_t depth,
                                      int64_t out, const std::string& act) {
  c.require(m.size() == static_cast<size_t>(2 * depth + 1),
            "the stack has " + std::to_string(m.size()) + " layers, expected 2 * depth + 1 = " +
                std::to_string(2 * depth + 1) + " (Linear, " + act + ", ..., Linear)");
  std::vector<Tensor> weights;
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string want = i % 2 == 0 ? "Linear" : act;
    c.require(m[i]->type_name() == want,
              "layer " + std::to_string(i) + " is a " + m[i]->type_name() + ", expected " + want);
    if (i % 2 == 0) {
      auto fc = m.at<nn::Linear>(i);
      const int64_t fin = i == 0 ? in : width, fout = i + 1 == m.size() ? out : width;
      c.require(fc != nullptr, "layer " + std::to_string(i) + " is not an nn::Linear");
      c.require_dims(fc->weight.shape(), {fout, fin}, "the weight shape of layer " + std::to_string(i));
      c.require(fc->bias.defined(), "layer " + std::to_string(i) + " has no bias");
      c.require(moments(fc->bias).std == 0.0 && moments(fc->bias).mean == 0.0,
                "the bias of layer " + std::to_string(i) + " is not zero");
      weights.push_back(fc->weight);
    }
  }
  return weights;
}

// Test accuracy in eval mode, without a graph.
double accuracy(nn::Module& model, const nn::DatasetPtr& data) {
  NoGradGuard no_grad;
  model.eval();
  const nn::Batch b = data->all();
  const Tensor out = model(b.x);
  model.train();
  return out.argmax(1).eq(b.y).to(kFloat64).mean().item<double>();
}

// `epochs` epochs of SGD with momentum; each epoch's mean loss.
std::vector<double> train_sgd(nn::Module& model, const nn::DatasetPtr& data, int epochs) {
  optim::SGD opt(model.parameters(), optim::SGDOptions(kLr).momentum(kMomentum));
  nn::DataLoader loader(data, nn::DataLoaderOptions().batch_size(64).shuffle(true).seed(1));
  std::vector<double> losses;
  model.train();
  for (int e = 0; e < epochs; ++e) {
    double total = 0.0;
    int n = 0;
    for (const nn::Batch& b : loader) {
      opt.zero_grad();
      Tensor loss = nn::functional::cross_entropy(model(b.x), b.y);
      loss.backward();
      opt.step();
      total += loss.item<double>();
      ++n;
    }
    losses.push_back(total / n);
  }
  return losses;
}

std::pair<nn::DatasetPtr, nn::DatasetPtr> fashion() {
  try {
    return {nn::take(nn::load_fashion_mnist("train"), kTrainImages),
            nn::take(nn::load_fashion_mnist("test"), kTestImages)};
  } catch (const Error& e) {
    throw Skip(std::string("Fashion-MNIST could not be loaded: ") + e.what());
  }
}

// The M7/M8/M9 findings on one batch of 256 images at initialisation, as "M7: ..., M8: ...".
std::string init_findings(nn::Sequential& model, const Tensor& x, double* dead, double* saturated, int* m9) {
  debug::DeadReluTracker tracker;
  debug::SaturationTracker sat;
  tracker.attach(model);
  sat.attach(model);
  {
    NoGradGuard no_grad;
    model(x);
  }
  *dead = tracker.layers().empty() ? 0.0 : tracker.layers()[0].batch_dead;
  *saturated = sat.layers().empty() ? 0.0 : sat.layers()[0].last;
  std::string s;
  for (const auto& f : tracker.findings()) s += "M7: " + f.title + "; ";
  for (const auto& f : sat.findings()) s += "M8: " + f.title + "; ";
  *m9 = 0;
  for (const auto& f : debug::check_initialisation(model))
    if (f.fires()) s += "M9: " + f.title + "; ", ++*m9;
  return s.empty() ? "none" : s.substr(0, s.size() - 2);
}

}  // namespace

Lab make_lab6() {
  Lab lab;
  lab.number = 6;
  lab.dir = "lab6_init";
  lab.title = "Dead ReLUs, saturation, vanishing gradients and initialisation";
  lab.starter = "tutorials/lab6_init/lab6.cpp";

  // ---- Task 6.1 ------------------------------------------------------------------------
  auto dead_case = [](const std::string& name, std::function<std::vector<Tensor>()> make) -> Case {
    return {name, [=](Check& c) {
              const std::vector<Tensor> ys = make();
              std::string in;
              for (const Tensor& y : ys) in += (in.empty() ? "" : "; ") + y.str() + " = " + values_str(y, 48);
              c.input("activations: " + in);
              const std::vector<double> want = key_dead(ys);
              const Tensor got = got_mask(c, lab6::dead_units(ys), static_cast<int64_t>(want.size()));
              c.require_close(got, as_mask(want), "dead_units (1 = dead)", 0.0, 0.0);
              double frac = 0.0;
              for (double d : want) frac += d;
              frac /= static_cast<double>(want.size());
              c.require_near(lab6::dead_fraction(ys), frac, 1e-12, "dead_fraction");
            }};
  };
  lab.tasks.push_back(
      {1,
       "dead units per feature and per channel",
       15,
       "lab6::dead_units(), lab6::dead_fraction()",
       {dead_case("(B, D): features 1 and 3 never fire",
                  [] {
                    return std::vector<Tensor>{tensor({0.5, 0, 1.0, 0, 0,  //
                                                       0.0, 0, 2.0, 0, 0,  //
                                                       0.0, 0, 0.0, 0, 3,  //
                                                       0.1, 0, 0.0, 0, 0},
                                                      {4, 5})};
                  }),
        dead_case("exact zeros and negative values (a LeakyReLU's outputs) are not active",
                  [] {
                    return std::vector<Tensor>{tensor({0.0, -0.01, 2.0, 0.0, -0.3, 0.0}, {2, 3})};
                  }),
        dead_case("(B, C, H, W): a unit is a channel; channel 2 fires at one pixel only",
                  [] {
                    std::vector<double> v(2 * 3 * 2 * 2, -1.0);
                    for (int i = 0; i < 4; ++i) v[i] = 0.5;  // channel 0, example 0: alive
                    v[(1 * 3 + 2) * 4 + 3] = 0.25;           // channel 2, example 1, pixel (1, 1)
                    return std::vector<Tensor>{tensor(v, {2, 3, 2, 2})};
                  }),
        dead_case("over a pass: a unit alive in any batch is alive",
                  [] {
                    return std::vector<Tensor>{tensor({0.0, 1.0, 0.0, 0.0, 2.0, 0.0}, {2, 3}),
                                               tensor({0.0, 0.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0}, {3, 3})};
                  }),
        {"bad input fails loudly",
         [](Check& c) {
           c.input("an empty list; a 1-D tensor (5); batches (2, 3) and (2, 4)");
           c.require_throws([] { lab6::dead_units({}); }, "dead_units of an empty list");
           c.require_throws([] { lab6::dead_units({zeros({5})}); }, "dead_units of a 1-D tensor (no unit dim)");
           c.require_throws(
               [] {
                 lab6::dead_units({zeros({2, 3}), zeros({2, 4})});
               },
               "dead_units of batches with 3 and 4 units");
         }},
        {"agrees with debug::DeadReluTracker (M7) over one batch and over a pass", [](Check& c) {
           manual_seed(61);
           auto fc = std::make_shared<nn::Linear>(8, 16);
           {
             NoGradGuard no_grad;
             fc->bias.narrow(0, 0, 8).fill_(-3.0);  // B18's pattern: units 0..7 never fire
             fc->bias.narrow(0, 8, 4).fill_(-1.0);  // units 8..11 fire rarely: dead in many small batches
             fc->bias.narrow(0, 12, 4).fill_(0.0);
           }
           auto relu = std::make_shared<nn::ReLU>();
           auto model = std::make_shared<nn::Sequential>(fc, relu, std::make_shared<nn::Linear>(16, 3));
           debug::DeadReluTracker tracker;
           tracker.attach(*model);
           std::vector<Tensor> outs;
           debug::HookSet hooks;
           hooks.post(relu, [&](nn::Module&, const Tensor&, const Tensor& y) { outs.push_back(y.detach().clone()); });
           tracker.begin_pass();
           {
             NoGradGuard no_grad;
             for (uint64_t s = 0; s < 6; ++s) (*model)(randn_seeded({8, 8}, 620 + s));
           }
           tracker.end_pass();
           c.input(
               "Linear(8, 16) with bias -3 on units 0..7, -1 on units 8..11, 0 on 12..15; ReLU; Linear(16, 3); "
               "6 batches x (8, 8) of N(0, 1)");
           const auto& st = tracker.layers().at(0);
           const double pass = lab6::dead_fraction(outs), first = lab6::dead_fraction({outs[0]});
           c.note("DeadReluTracker: dead in the first batch " + fixed(st.init_dead, 4) + ", over the pass " +
                  fixed(st.pass_dead, 4) + "; yours: " + fixed(first, 4) + ", " + fixed(pass, 4));
           c.require_near(first, st.init_dead, 1e-12, "dead_fraction of the first batch vs the tracker's");
           c.require_near(pass, st.pass_dead, 1e-12, "dead_fraction over the 6 batches vs the tracker's pass figure");
         }}}});

  // ---- Task 6.2 ------------------------------------------------------------------------
  auto fans_case = [](const std::string& name, Shape shape, int64_t fin, int64_t fout) -> Case {
    return {name, [=](Check& c) {
              const Tensor w = zeros(shape);
              c.input("w " + w.str());
              const auto [gi, go] = lab6::fan_in_and_out(w);
              c.require_eq(gi, fin, "fan_in");
              c.require_eq(go, fout, "fan_out");
            }};
  };
  auto init_case = [](const std::string& name, Shape shape, bool he) -> Case {
    return {name, [=](Check& c) {
              // A registered parameter: it must stay a leaf that requires grad, changed in place.
              auto holder = std::make_shared<nn::Linear>(1, 1);
              Tensor w = holder->register_parameter("w", zeros(shape));
              const Tensor handle = w;  // the model's view of the same tensor
              const auto [fi, fo] = std::pair<int64_t, int64_t>{
                  shape[1] * (shape.size() > 2 ? numel_of(Shape(shape.begin() + 2, shape.end())) : 1),
                  shape[0] * (shape.size() > 2 ? numel_of(Shape(shape.begin() + 2, shape.end())) : 1)};
              const double want = he ? std::sqrt(2.0 / fi) : std::sqrt(2.0 / (fi + fo));
              c.input(std::string(he ? "he_normal_" : "xavier_normal_") + " on a registered parameter " + w.str() +
                      " of zeros (fan_in " + std::to_string(fi) + ", fan_out " + std::to_string(fo) +
                      "), Generator(7)");
              Generator gen(7);
              if (he)
                lab6::he_normal_(w, gen);
              else
                lab6::xavier_normal_(w, gen);
              c.require_tensor(handle, shape, "the parameter after the call");
              c.require(moments(handle).std > 0.0,
                        "the parameter is still all zeros: change it in place (w.copy_(...)); `w = ...` only rebinds "
                        "the function's own handle");
              c.require(handle.is_leaf() && handle.requires_grad(),
                        "the parameter is no longer a leaf that requires grad: fill it inside a NoGradGuard");
              require_normal(c, handle, want, he ? "He normal" : "Xavier normal");
            }};
  };
  lab.tasks.push_back(
      {2,
       "fans, He and Xavier initialisation",
       20,
       "lab6::fan_in_and_out(), lab6::he_normal_(), lab6::xavier_normal_()",
       {fans_case("a Linear weight (5, 3): (fan_in, fan_out) = (3, 5)", {5, 3}, 3, 5),
        fans_case("a Conv2d weight (8, 4, 3, 3): (36, 72)", {8, 4, 3, 3}, 36, 72),
        {"a bias (1-D) has no fan",
         [](Check& c) {
           c.input("w float32[7]");
           c.require_throws([] { lab6::fan_in_and_out(zeros({7})); }, "fan_in_and_out of a 1-D tensor");
         }},
        init_case("he_normal_ on (256, 512): std sqrt(2 / 512)", {256, 512}, true),
        init_case("he_normal_ on a conv weight (64, 16, 3, 3): std sqrt(2 / 144)", {64, 16, 3, 3}, true),
        init_case("xavier_normal_ on (300, 100): std sqrt(2 / 400)", {300, 100}, false),
        {"reproducible: every draw comes from gen", [](Check& c) {
           c.input(
               "he_normal_ and xavier_normal_ on (64, 32), each twice with Generator(5) (the global generator "
               "seeded differently before each call), and once with Generator(6)");
           for (bool he : {true, false}) {
             auto run = [he](uint64_t global_seed, uint64_t gen_seed) {
               manual_seed(global_seed);
               Tensor w = zeros({64, 32});
               Generator gen(gen_seed);
               if (he)
                 lab6::he_normal_(w, gen);
               else
                 lab6::xavier_normal_(w, gen);
               return w;
             };
             const Tensor a = run(1, 5), b = run(2, 5), d = run(1, 6);
             const std::string f = he ? "he_normal_" : "xavier_normal_";
             c.require_tensor(a, {64, 32}, f + "'s weight");
             c.require(moments(a).std > 0.0, f + " left the weight all zeros: change it in place (w.copy_(...))");
             c.require(allclose(a, b, 0.0, 0.0),
                       f + ": the same Generator(5) gave different weights: draw every number from gen "
                           "(randn(w.shape(), w.dtype(), &gen)); w.normal_() and nn::init use the global generator");
             c.require(!allclose(a, d, 0.0, 0.0), f + ": Generator(5) and Generator(6) gave the same weights");
           }
         }}}});

  // ---- Task 6.3 ------------------------------------------------------------------------
  auto two_linears = [] {
    manual_seed(63);
    auto m = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::Linear>(4, 2));
    auto ps = m->named_parameters();
    ps[0].second.set_grad(ones({4, 3}));           // norm sqrt(12)
    ps[1].second.set_grad(randn_seeded({4}, 64));  // a bias: not a weight
    ps[2].second.set_grad(full({2, 4}, 2.0));      // norm sqrt(32)
    ps[3].second.set_grad(randn_seeded({2}, 65));
    return m;
  };
  lab.tasks.push_back(
      {3,
       "gradient norms across depth",
       15,
       "lab6::weight_grad_norms(), lab6::first_last_ratio()",
       {{"weights only, in registration order",
         [=](Check& c) {
           auto m = two_linears();
           c.input("Linear(3, 4), ReLU, Linear(4, 2) with grads: 0.weight all 1, 2.weight all 2, biases random");
           require_norms(c, lab6::weight_grad_norms(*m), key_norms(*m));
         }},
        {"a weight without a gradient counts 0; a frozen weight is left out",
         [](Check& c) {
           manual_seed(66);
           auto m =
               std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::Linear>(4, 4),
                                                std::make_shared<nn::Linear>(4, 2));
           m->at<nn::Linear>(1)->requires_grad_(false);
           m->named_parameters()[0].second.set_grad(full({4, 3}, 0.5));
           c.input("Linear(3, 4) with a gradient, Linear(4, 4) frozen, Linear(4, 2) without a gradient");
           require_norms(c, lab6::weight_grad_norms(*m), key_norms(*m));
         }},
        {"a conv weight (4-D) is a weight",
         [](Check& c) {
           manual_seed(67);
           auto m =
               std::make_shared<nn::Sequential>(std::make_shared<nn::Conv2d>(1, 2, 3), std::make_shared<nn::Flatten>(),
                                                std::make_shared<nn::Linear>(8, 3));
           (*m)(randn_seeded({2, 1, 4, 4}, 68)).sum().backward();
           c.input("Conv2d(1, 2, 3), Flatten, Linear(8, 3); loss = sum of the outputs of x (2, 1, 4, 4)");
           require_norms(c, lab6::weight_grad_norms(*m), key_norms(*m));
         }},
        {"first_last_ratio",
         [=](Check& c) {
           auto m = two_linears();
           c.input("the model of the first check: sqrt(12) / sqrt(32)");
           c.require_near(lab6::first_last_ratio(*m), std::sqrt(12.0 / 32.0), 1e-9, "first_last_ratio");
           auto single = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(3, 2));
           c.require_throws([&] { lab6::first_last_ratio(*single); }, "first_last_ratio of a model with one weight");
         }},
        {"agrees with O1 (debug::check_gradient_health) after a real backward", [](Check& c) {
           manual_seed(69);
           auto m = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(16, 32), std::make_shared<nn::Tanh>(),
                                                     std::make_shared<nn::Linear>(32, 32), std::make_shared<nn::Tanh>(),
                                                     std::make_shared<nn::Linear>(32, 5));
           backward_once(*m, 16, 5, 70);
           c.input("Linear(16, 32), Tanh, Linear(32, 32), Tanh, Linear(32, 5); one cross-entropy backward");
           double o1 = NAN;
           for (const auto& f : debug::check_gradient_health(*m))
             for (const auto& e : f.evidence)
               if (e.name.find("first / last") != std::string::npos) o1 = e.value;
           c.require(std::isfinite(o1), "internal: O1 reported no first/last ratio");
           const double got = lab6::first_last_ratio(*m);
           c.note("O1's first / last = " + sci(o1) + ", yours = " + sci(got));
           c.require_near(got, o1, 1e-6 * o1, "first_last_ratio vs O1's 'first / last'");
         }}}});

  // ---- Task 6.4 ------------------------------------------------------------------------
  auto structure_case = [](lab6::Stack kind) -> Case {
    const bool relu = kind == lab6::Stack::ReLUHe;
    return {std::string(relu ? "ReLUHe" : "Sigmoid") + ": 2 * depth + 1 layers, " + (relu ? "He" : "Xavier") +
                " weights, zero biases",
            [=](Check& c) {
              manual_seed(64);
              Generator gen(640);
              c.input(std::string("deep_stack(in 32, width 64, depth 4, out 10, ") + (relu ? "ReLUHe" : "Sigmoid") +
                      ", Generator(640))");
              auto m = lab6::deep_stack(32, 64, 4, 10, kind, gen);
              c.require(m != nullptr, "deep_stack returned a null pointer");
              const auto ws = layer_types_check(c, *m, 32, 64, 4, 10, relu ? "ReLU" : "Sigmoid");
              // Every weight divided by its expected std: together a unit normal.
              std::vector<Tensor> zs;
              for (size_t i = 0; i < ws.size(); ++i) {
                const double fi = static_cast<double>(ws[i].size(1)), fo = static_cast<double>(ws[i].size(0));
                const bool he = relu && i + 1 < ws.size();
                zs.push_back(ws[i].detach().flatten() / (he ? std::sqrt(2.0 / fi) : std::sqrt(2.0 / (fi + fo))));
              }
              require_normal(c, cat(zs), 1.0,
                             std::string("the weights divided by their ") +
                                 (relu ? "He std (hidden) or Xavier std (output)" : "Xavier std"));
            }};
  };
  auto depth_case = [](lab6::Stack kind) -> Case {
    const bool relu = kind == lab6::Stack::ReLUHe;
    return {relu ? "depth 10, ReLU with He: the first / last ratio stays near 1 (O1 silent)"
                 : "depth 10, sigmoid: gradients vanish towards the input (O1 fires)",
            [=](Check& c) {
              manual_seed(65);
              Generator gen(650);
              c.input(std::string("deep_stack(32, 64, depth 10, 10, ") + (relu ? "ReLUHe" : "Sigmoid") +
                      "); one cross-entropy backward on x (64, 32) ~ N(0, 1)");
              auto m = lab6::deep_stack(32, 64, 10, 10, kind, gen);
              c.require(m != nullptr && m->size() == 21, "deep_stack(..., depth 10, ...) must have 21 layers");
              backward_once(*m, 32, 10, 651);
              const auto ns = key_norms(*m);
              c.require(ns.size() == 11, "expected 11 weights, got " + std::to_string(ns.size()));
              const double ratio = ns.front().second / ns.back().second;
              const auto fs = debug::check_gradient_health(*m);
              const debug::Finding* w = depth_warning(fs);
              c.note("||grad||: first " + sci(ns.front().second) + ", middle " + sci(ns[5].second) + ", last " +
                     sci(ns.back().second) + "; first / last = " + sci(ratio) +
                     (w ? "; O1: " + w->title : "; O1: no depth warning"));
              if (relu) {
                c.require(ratio > 1e-2 && ratio < 10.0,
                          "first / last = " + sci(ratio) + ", expected within [0.01, 10] with He initialisation");
                c.require(w == nullptr, "O1 warns: " + (w ? w->title : std::string()));
              } else {
                c.require(ratio < 1e-3, "first / last = " + sci(ratio) +
                                            ", expected below 1e-3: each sigmoid layer multiplies the gradient by "
                                            "sigmoid' <= 1/4");
                c.require(w != nullptr, "O1 did not report vanishing gradients across depth");
              }
            },
            2};
  };
  lab.tasks.push_back({4,
                       "a deep sigmoid stack against ReLU with He",
                       20,
                       "lab6::deep_stack()",
                       {structure_case(lab6::Stack::Sigmoid), structure_case(lab6::Stack::ReLUHe),
                        depth_case(lab6::Stack::Sigmoid), depth_case(lab6::Stack::ReLUHe)}});

  // ---- Task 6.5 ------------------------------------------------------------------------
  lab.tasks.push_back(
      {5,
       "repair a network that dies and saturates",
       30,
       "lab6::fix_initialisation()",
       {{"the architecture and the parameter tensors are kept",
         [](Check& c) {
           auto m = lab6::make_broken_mlp(6);
           const auto before = m->named_parameters();
           std::vector<std::string> types;
           for (const auto& l : m->layers()) types.push_back(l->type_name());
           Generator gen(11);
           c.input("make_broken_mlp(6), fix_initialisation(model, Generator(11))");
           lab6::fix_initialisation(*m, gen);
           c.require(m->size() == types.size(),
                     "the model has " + std::to_string(m->size()) + " layers, it had " + std::to_string(types.size()));
           for (size_t i = 0; i < types.size(); ++i)
             c.require((*m)[i]->type_name() == types[i], "layer " + std::to_string(i) + " is a " +
                                                             (*m)[i]->type_name() + ", it was a " + types[i] +
                                                             ": repair the initialisation, not the architecture");
           const auto after = m->named_parameters();
           c.require(after.size() == before.size(), "the number of parameters changed");
           for (size_t i = 0; i < before.size(); ++i)
             c.require(
                 after[i].second.is_same(before[i].second) && after[i].second.storage() == before[i].second.storage(),
                 "parameter " + before[i].first +
                     " is a new tensor: change the values in place (copy_, zero_) "
                     "so that every handle, and an optimizer built earlier, sees them");
         }},
        {"He before the ReLU, Xavier elsewhere, biases zero",
         [](Check& c) {
           auto m = lab6::make_broken_mlp(6);
           Generator gen(11);
           c.input("make_broken_mlp(6) repaired with Generator(11)");
           lab6::fix_initialisation(*m, gen);
           const std::vector<std::tuple<size_t, bool, std::string>> want = {
               {1, false, "layer 1 (before the Sigmoid): Xavier"},
               {3, true, "layer 3 (before the ReLU): He"},
               {5, false, "layer 5 (the output): Xavier"}};
           for (const auto& [i, he, what] : want) {
             auto fc = m->at<nn::Linear>(i);
             c.require(fc != nullptr, "layer " + std::to_string(i) + " is no longer an nn::Linear");
             const double fi = static_cast<double>(fc->weight.size(1)), fo = static_cast<double>(fc->weight.size(0));
             const double s_he = std::sqrt(2.0 / fi), s_xavier = std::sqrt(2.0 / (fi + fo));
             const double got = moments(fc->weight).std;
             const double other = he ? s_xavier : s_he;
             if (std::fabs(got - other) <= 0.04 * other && std::fabs(got - (he ? s_he : s_xavier)) > 0.04 * other)
               c.fail(what + ": std expected " + sci(he ? s_he : s_xavier) + ", got " + sci(got) + ", which is " +
                      (he ? "Xavier's" : "He's") + " std for this layer: look at the layer after it");
             require_normal(c, fc->weight, he ? s_he : s_xavier, what);
             c.require(
                 moments(fc->bias).std == 0.0 && moments(fc->bias).mean == 0.0,
                 "the bias of layer " + std::to_string(i) + " is not zero (mean " + sci(moments(fc->bias).mean) + ")");
           }
         }},
        {"the debug module is silent at initialisation (M7, M8, M9)",
         [](Check& c) {
           const auto [train, test] = fashion();
           std::vector<int64_t> rows(256);
           for (int64_t i = 0; i < 256; ++i) rows[i] = i;
           const Tensor x = train->get_batch(rows).x;
           c.input(
               "the first 256 Fashion-MNIST training images through make_broken_mlp(6), before and after "
               "fix_initialisation(model, Generator(11))");
           auto m = lab6::make_broken_mlp(6);
           double dead = 0, sat = 0;
           int m9 = 0;
           const std::string before = init_findings(*m, x, &dead, &sat, &m9);
           c.note("before: dead ReLU units " + fixed(100 * dead, 1) + "%, saturated sigmoid inputs " +
                  fixed(100 * sat, 1) + "%; " + before);
           Generator gen(11);
           lab6::fix_initialisation(*m, gen);
           const std::string after = init_findings(*m, x, &dead, &sat, &m9);
           c.note("after:  dead ReLU units " + fixed(100 * dead, 1) + "%, saturated sigmoid inputs " +
                  fixed(100 * sat, 1) + "%; " + after);
           c.require(after == "none", "after the repair the debug module still reports: " + after);
         }},
        {"the repaired network trains on Fashion-MNIST",
         [](Check& c) {
           const auto [train, test] = fashion();
           c.input("make_broken_mlp(6) repaired with Generator(11); " + std::to_string(kEpochs) +
                   " epochs of SGD (lr " + num(kLr) + ", momentum " + num(kMomentum) + ", batch 64) on the first " +
                   std::to_string(kTrainImages) + " training images; accuracy on the first " +
                   std::to_string(kTestImages) + " test images");
           const auto t0 = std::chrono::steady_clock::now();
           auto broken = lab6::make_broken_mlp(6);
           const std::vector<double> bl = train_sgd(*broken, train, 1);
           auto m = lab6::make_broken_mlp(6);
           Generator gen(11);
           lab6::fix_initialisation(*m, gen);
           const std::vector<double> losses = train_sgd(*m, train, kEpochs);
           const double acc = accuracy(*m, test);
           const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
           std::string curve;
           for (double l : losses) curve += (curve.empty() ? "" : ", ") + fixed(l, 3);
           c.note("repaired: epoch losses [" + curve + "], test accuracy " + fixed(acc, 3) +
                  " (goal: last loss <= " + fixed(kMaxLoss, 2) + ", accuracy >= " + fixed(kMinAccuracy, 2) +
                  "); the broken network's first "
                  "epoch: loss " +
                  fixed(bl[0], 3) + "; " + fixed(seconds, 1) + " s");
           c.require(std::isfinite(losses.back()) && losses.back() <= kMaxLoss,
                     "the last epoch's loss is " + fixed(losses.back(), 3) + " (epoch losses [" + curve +
                         "]), the goal is <= " + fixed(kMaxLoss, 2));
           c.require(acc >= kMinAccuracy,
                     "test accuracy " + fixed(acc, 3) + " is below the goal " + fixed(kMinAccuracy, 2));
         },
         3}}});
  return lab;
}

}  // namespace gradsleuth::labs
