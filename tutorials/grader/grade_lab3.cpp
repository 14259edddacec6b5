// The grader of lab 3 (an MLP on Fashion-MNIST). The answer keys are the
// library's gs::linear, gs::logsumexp, nn::functional::cross_entropy and a
// reference training loop written here; the last case trains the student's MLP
// on a Fashion-MNIST subset and checks the test accuracy and the time it took.
//
// Dimension letters: B = batch, D = inputs, M = outputs, K = classes.
#include "tutorials/grader/grader.h"
#include "tutorials/grader/labs.h"
#include "tutorials/lab3_mlp/lab3.h"

#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/generator.h"
#include "debug/checks/model/gradcheck.h"
#include "nn/nn.h"

namespace gradsleuth::labs {

namespace {

// The Fashion-MNIST run: what the grader trains, and the level it must reach.
// The reference solution reaches 0.80 in under a second of training on one core.
constexpr int64_t kTrainImages = 10000;
constexpr int64_t kTestImages = 2000;
constexpr int kEpochs = 5;
constexpr int64_t kBatch = 64;
constexpr double kLr = 0.1;
constexpr double kMinAccuracy = 0.78;
constexpr double kMaxSeconds = 60.0;  // generous: a loaded 2-core CI machine, not a fast laptop

Tensor randint_seeded(int64_t hi, const Shape& s, uint64_t seed) {
  Generator gen(input_seed(seed));
  return randint(0, hi, s, kInt64, &gen);
}

// The library's cross-entropy: the answer key of Task 3.3.
Tensor ref_cross_entropy(const Tensor& logits, const Tensor& targets) {
  return nn::functional::cross_entropy(logits, targets);
}

Case logsumexp_case(const std::string& name, std::function<Tensor()> make) {
  return {name, [=](Check& c) {
            const Tensor x = make();
            c.input("x = " + describe(x));
            const Tensor got = lab3::logsumexp(x);
            c.require(got.defined(), "logsumexp returned an undefined Tensor");
            c.require_close(got, gs::logsumexp(x, {-1}), "logsumexp", 1e-5, 1e-5);
          }};
}

Case cross_entropy_case(const std::string& name, std::function<Tensor()> make_logits, std::function<Tensor()> make_t) {
  return {name, [=](Check& c) {
            const Tensor logits = make_logits(), t = make_t();
            c.input("logits " + describe(logits) + ", targets " + values_str(t));
            const Tensor got = lab3::cross_entropy(logits, t);
            c.require(got.defined(), "cross_entropy returned an undefined Tensor");
            c.require_tensor(got, {}, "the loss (a 0-dim tensor: the mean over the batch)");
            c.require_close(got, ref_cross_entropy(logits, t), "loss", 1e-5, 1e-5);
          }};
}

// Parameters and grads as (value, grad) pairs with the given seeds.
Tensor param(const Shape& s, uint64_t seed) { return randn_seeded(s, seed).requires_grad_(true); }

// Copies of a module's parameter values (not handles).
std::vector<Tensor> snapshot(const std::vector<Tensor>& ps) {
  std::vector<Tensor> out;
  for (const Tensor& p : ps) out.push_back(p.detach().clone());
  return out;
}

// The test accuracy of `model` on `data` (argmax of the logits), in eval mode, without a graph.
double test_accuracy(nn::Module& model, const nn::DatasetPtr& data) {
  NoGradGuard no_grad;
  model.eval();
  nn::DataLoader loader(data, nn::DataLoaderOptions().batch_size(500));
  int64_t right = 0, total = 0;
  for (const nn::Batch& b : loader) {
    const Tensor out = model(b.x);
    GS_CHECK(out.dim() == 2 && out.size(0) == b.size() && out.size(1) == 10, "grader", "the model's output is ",
             out.str(), ", expected (", b.size(), ", 10)");
    right += out.argmax(1).eq(b.y).sum().item<int64_t>();
    total += b.size();
  }
  model.train();
  return total ? static_cast<double>(right) / static_cast<double>(total) : 0.0;
}

}  // namespace

Lab make_lab3() {
  Lab lab;
  lab.number = 3;
  lab.dir = "lab3_mlp";
  lab.title = "An MLP on Fashion-MNIST";
  lab.starter = "tutorials/lab3_mlp/lab3.cpp";

  // ---- Task 3.1 ------------------------------------------------------------------------
  auto linear_forward_case = [](const std::string& name, int64_t b, int64_t d, int64_t m) -> Case {
    return {name, [=](Check& c) {
              manual_seed(1);
              lab3::Linear lin(d, m);
              const Tensor x = randn_seeded({b, d}, 2);
              c.input("x " + x.str() + ", weight " + lin.weight.str() + ", bias " + lin.bias.str());
              const Tensor got = lin(x);
              c.require_close(got, gs::linear(x, lin.weight, lin.bias).detach(), "y", 1e-5, 1e-5);
            }};
  };
  lab.tasks.push_back(
      {1,
       "Linear::forward",
       10,
       "lab3::Linear::forward()",
       {linear_forward_case("x (5, 4) -> y (5, 3)", 5, 4, 3),
        linear_forward_case("a batch of one: (1, 6) -> (1, 2)", 1, 6, 2),
        {"gradients reach weight and bias", [](Check& c) {
           manual_seed(1);
           lab3::Linear lin(4, 3);
           const Tensor x = randn_seeded({5, 4}, 3);
           c.input("x (5, 4), loss = sum(y * v) for a fixed random v (5, 3)");
           const Tensor v = randn_seeded({5, 3}, 4);
           (lin(x) * v).sum().backward();
           Tensor w = lin.weight.detach().clone().requires_grad_(true),
                  b = lin.bias.detach().clone().requires_grad_(true);
           (gs::linear(x, w, b) * v).sum().backward();
           c.require(lin.weight.grad().defined() && lin.bias.grad().defined(),
                     "weight.grad or bias.grad is undefined after backward(): build y from weight and bias with "
                     "tensor ops (no detach, no NoGradGuard) so that autograd records the graph");
           c.require_close(lin.weight.grad(), w.grad(), "weight.grad", 1e-4, 1e-5);
           c.require_close(lin.bias.grad(), b.grad(), "bias.grad", 1e-4, 1e-5);
         }}}});

  // ---- Task 3.2 ------------------------------------------------------------------------
  lab.tasks.push_back(
      {2,
       "logsumexp without overflow",
       15,
       "lab3::logsumexp()",
       {logsumexp_case("random (3, 5)",
                       [] {
                         return randn_seeded({3, 5}, 5);
                       }),
        logsumexp_case("large values 1000 + N(0, 1) (exp overflows float32 past ~88)",
                       [] {
                         return randn_seeded({2, 4}, 6) + 1000.0;
                       }),
        logsumexp_case("very negative values -1000 + N(0, 1) (exp underflows to 0)",
                       [] {
                         return randn_seeded({2, 4}, 7) - 1000.0;
                       }),
        logsumexp_case("one row [0, -1000, 1000]",
                       [] {
                         return tensor({0, -1000, 1000}, {1, 3});
                       }),
        logsumexp_case("a single element (1, 1)",
                       [] {
                         return tensor({3.5}, {1, 1});
                       }),
        {"gradcheck (float64): the gradient is softmax(x)", [](Check& c) {
           const Tensor x = randn_seeded({3, 4}, 8, 1.0, kFloat64);
           c.input("x " + x.str());
           const auto r = debug::gradcheck([](const tensor_list& xs) { return lab3::logsumexp(xs[0]); }, {x});
           c.require(r.passed, "gradient check failed: " + r.message +
                                   " (build the result from differentiable tensor ops; no NoGradGuard)");
         }}}});

  // ---- Task 3.3 ------------------------------------------------------------------------
  lab.tasks.push_back({3,
                       "cross-entropy from log-sum-exp",
                       15,
                       "lab3::cross_entropy()",
                       {cross_entropy_case(
                            "logits (4, 10), random",
                            [] {
                              return randn_seeded({4, 10}, 9);
                            },
                            [] { return randint_seeded(10, {4}, 10); }),
                        cross_entropy_case(
                            "a batch of one",
                            [] {
                              return randn_seeded({1, 3}, 11);
                            },
                            [] { return tensor(std::vector<int64_t>{2}, {1}); }),
                        cross_entropy_case(
                            "large logits (x 1000)",
                            [] {
                              return randn_seeded({3, 5}, 12, 1000.0);
                            },
                            [] {
                              return tensor(std::vector<int64_t>{0, 4, 2}, {3});
                            }),
                        {"the gradient is (softmax - one_hot) / B", [](Check& c) {
                           const Tensor l0 = randn_seeded({4, 6}, 13);
                           const Tensor t = randint_seeded(6, {4}, 14);
                           c.input("logits " + l0.str() + ", targets " + values_str(t));
                           Tensor l1 = l0.clone().requires_grad_(true), l2 = l0.clone().requires_grad_(true);
                           lab3::cross_entropy(l1, t).backward();
                           ref_cross_entropy(l2, t).backward();
                           c.require(l1.grad().defined(), "logits.grad is undefined after backward()");
                           c.require_close(l1.grad(), l2.grad(), "logits.grad", 1e-4, 1e-6);
                         }}}});

  // ---- Task 3.4 ------------------------------------------------------------------------
  lab.tasks.push_back(
      {4,
       "SGD: zero_grad and step",
       15,
       "lab3::SGD::zero_grad(), lab3::SGD::step()",
       {{"step: p <- p - lr * grad, in place",
         [](Check& c) {
           Tensor p1 = param({3}, 15), p2 = param({2, 2}, 16);
           const Tensor g1 = randn_seeded({3}, 17), g2 = randn_seeded({2, 2}, 18);
           p1.set_grad(g1);
           p2.set_grad(g2);
           const auto before = snapshot({p1, p2});
           c.input("p1 (3), p2 (2, 2) with gradients set, lr 0.1");
           lab3::SGD opt({p1, p2}, 0.1);
           opt.step();
           const bool unchanged = allclose(p1.detach(), before[0], 0.0, 0.0);
           c.require(!unchanged,
                     "the parameter's values did not change. Update it in place (p.sub_(...)): `p = p - lr * g` "
                     "only rebinds a handle, and the model keeps the old tensor");
           c.require_close(p1, before[0] - g1 * 0.1, "p1 after step", 1e-6, 1e-7);
           c.require_close(p2, before[1] - g2 * 0.1, "p2 after step", 1e-6, 1e-7);
           c.require(p1.is_leaf() && p1.requires_grad(),
                     "after step, p1 is no longer a leaf that requires grad: the update was recorded in the "
                     "graph; do it inside a NoGradGuard");
         }},
        {"the learning rate scales the step",
         [](Check& c) {
           Tensor p = param({4}, 19);
           const Tensor g = randn_seeded({4}, 20);
           p.set_grad(g);
           const Tensor before = p.detach().clone();
           c.input("p (4), lr 0.5");
           lab3::SGD(std::vector<Tensor>{p}, 0.5).step();
           c.require_close(p, before - g * 0.5, "p after step", 1e-6, 1e-7);
         }},
        {"a parameter without a gradient is left alone",
         [](Check& c) {
           Tensor p1 = param({3}, 21), p2 = param({2}, 22);
           p1.set_grad(randn_seeded({3}, 23));
           const Tensor before = p2.detach().clone();
           c.input("p1 with a gradient, p2 (2) without one (p2.grad() undefined)");
           lab3::SGD({p1, p2}, 0.1).step();
           c.require_close(p2, before, "p2 (no gradient) after step", 0.0, 0.0);
         }},
        {"zero_grad forgets every gradient", [](Check& c) {
           Tensor p1 = param({3}, 24), p2 = param({2, 2}, 25);
           p1.set_grad(randn_seeded({3}, 26));
           p2.set_grad(randn_seeded({2, 2}, 27));
           c.input("p1, p2 with gradients");
           lab3::SGD opt({p1, p2}, 0.1);
           opt.zero_grad();
           for (const Tensor& p : {p1, p2}) {
             const Tensor g = p.grad();
             c.require(!g.defined() || (within_storage(g) && g.abs().sum().item<double>() == 0.0),
                       "a parameter still has a non-zero gradient after zero_grad(): the next backward would add "
                       "to it");
           }
         }}}});

  // ---- Task 3.5 ------------------------------------------------------------------------
  lab.tasks.push_back(
      {5,
       "the training step",
       15,
       "lab3::train_step()",
       {{"one step: the loss before the update, and p - lr * grad",
         [](Check& c) {
           manual_seed(3);
           nn::Linear model(4, 3);  // the library's layer: this task grades the step, not the layer
           const Tensor x = randn_seeded({6, 4}, 28), y = randint_seeded(3, {6}, 29);
           const std::vector<Tensor> ps = model.parameters();
           const auto before = snapshot(ps);
           // The answer key: loss and gradients of the same model, computed here.
           Tensor w = before[0].clone().requires_grad_(true), b = before[1].clone().requires_grad_(true);
           const Tensor ref_loss = ref_cross_entropy(gs::linear(x, w, b), y);
           ref_loss.backward();
           // Stale gradients from an earlier step: a step that forgets zero_grad adds them in.
           for (Tensor p : ps) p.set_grad(full_like(p.detach(), 100.0));
           c.input("nn::Linear(4, 3), x (6, 4), y " + values_str(y) +
                   ", lr 0.1, the parameters holding stale gradients (all 100) from an earlier step");
           lab3::SGD opt(ps, 0.1);
           const double loss = lab3::train_step(model, opt, x, y);
           c.require_near(loss, ref_loss.item<double>(), 1e-4, "the returned loss (before the update)");
           const Tensor want_w = before[0] - w.grad() * 0.1;
           const Tensor stale_w = before[0] - (w.grad() + 100.0) * 0.1;
           c.require(!allclose(ps[0].detach(), stale_w, 1e-4, 1e-5),
                     "the update used the stale gradient plus the new one: call opt.zero_grad() before "
                     "loss.backward(), since backward adds into .grad");
           c.require(!allclose(ps[0].detach(), before[0], 0.0, 0.0),
                     "the weights did not change: call opt.step() after loss.backward() (and check that "
                     "Task 3.4's step updates in place)");
           c.require_close(ps[0], want_w, "weight after the step", 1e-4, 1e-5);
           c.require_close(ps[1], before[1] - b.grad() * 0.1, "bias after the step", 1e-4, 1e-5);
         }},
        {"repeated steps on one batch lower the loss", [](Check& c) {
           manual_seed(4);
           nn::Linear model(8, 4);
           const Tensor x = randn_seeded({16, 8}, 30), y = randint_seeded(4, {16}, 31);
           c.input("nn::Linear(8, 4), x (16, 8), 30 steps, lr 0.5");
           lab3::SGD opt(model.parameters(), 0.5);
           const double first = lab3::train_step(model, opt, x, y);
           double last = first;
           for (int i = 0; i < 29; ++i) last = lab3::train_step(model, opt, x, y);
           c.require(std::isfinite(last) && last < 0.5 * first, "the loss went from " + num(first) + " to " +
                                                                    num(last) +
                                                                    " after 30 steps; expected it to at least halve");
         }}}});

  // ---- Task 3.6 ------------------------------------------------------------------------
  auto mlp_case = [](const std::string& name, int64_t batch) -> Case {
    return {name, [=](Check& c) {
              manual_seed(5);
              lab3::MLP model(32);
              Generator gen(32);
              const Tensor x = rand({batch, 1, 28, 28}, kFloat32, &gen);
              c.input("MLP(32), x " + x.str());
              const Tensor got = model(x);
              const Tensor h = gs::relu(gs::linear(x.flatten(1), model.fc1->weight, model.fc1->bias));
              const Tensor want = gs::linear(h, model.fc2->weight, model.fc2->bias).detach();
              c.require_close(got, want, "logits", 1e-4, 1e-5);
            }};
  };
  lab.tasks.push_back({6,
                       "MLP::forward",
                       10,
                       "lab3::MLP::forward()",
                       {mlp_case("x (5, 1, 28, 28) -> logits (5, 10)", 5),
                        mlp_case("a batch of one", 1),
                        {"gradients reach all four parameters", [](Check& c) {
                           manual_seed(6);
                           lab3::MLP model(16);
                           Generator gen(33);
                           const Tensor x = rand({3, 1, 28, 28}, kFloat32, &gen);
                           c.input("MLP(16), x (3, 1, 28, 28), loss = sum of the logits");
                           model(x).sum().backward();
                           for (const auto& [name, p] : model.named_parameters())
                             c.require(p.grad().defined(), "parameter '" + name +
                                                               "' got no gradient: is every layer used, and "
                                                               "is the graph unbroken (no detach, no NoGradGuard)?");
                         }}}});

  // ---- Task 3.7 ------------------------------------------------------------------------
  lab.tasks.push_back(
      {7,
       "fit: train on Fashion-MNIST",
       20,
       "lab3::fit()",
       {{"one mean loss per epoch, matching a reference loop",
         [](Check& c) {
           auto data = nn::make_blobs(20, 3, 2, 1.0, 7);  // x (60, 2), y (60): 4 batches of 15
           c.input("nn::make_blobs(20, 3, 2): 60 points, nn::Linear(2, 3), batch 15, shuffled, lr 0.1, 3 epochs");
           manual_seed(7);
           nn::Linear model(2, 3);
           model.eval();
           lab3::SGD opt(model.parameters(), 0.1);
           nn::DataLoader loader(data, nn::DataLoaderOptions().batch_size(15).shuffle(true).seed(3));
           const std::vector<double> got = lab3::fit(model, opt, loader, 3);
           // The reference: the same model, data order and updates.
           manual_seed(7);
           nn::Linear ref(2, 3);
           nn::DataLoader ref_loader(data, nn::DataLoaderOptions().batch_size(15).shuffle(true).seed(3));
           std::vector<double> want;
           for (int e = 0; e < 3; ++e) {
             double total = 0.0;
             int n = 0;
             for (const nn::Batch& b : ref_loader) {
               ref.zero_grad();
               Tensor loss = ref_cross_entropy(ref(b.x), b.y);
               loss.backward();
               NoGradGuard no_grad;
               for (Tensor p : ref.parameters()) p.sub_(p.grad(), 0.1);
               total += loss.item<double>();
               ++n;
             }
             want.push_back(total / n);
           }
           c.require_eq(static_cast<int64_t>(got.size()), 3, "the number of epoch losses returned");
           c.require_eq(loader.epoch(), 3,
                        "loader.epoch() after fit (each `for (const nn::Batch& b : loader)` is one epoch)");
           for (int e = 0; e < 3; ++e)
             c.require_near(got[e], want[e], 1e-4 * std::max(1.0, std::fabs(want[e])),
                            "the mean loss of epoch " + std::to_string(e + 1));
           c.require(model.is_training(), "the model is still in eval mode: call model.train() at the start of fit");
         }},
        {"an MLP reaches the accuracy goal on Fashion-MNIST",
         [](Check& c) {
           nn::DatasetPtr train, test;
           try {
             train = nn::take(nn::load_fashion_mnist("train"), kTrainImages);
             test = nn::take(nn::load_fashion_mnist("test"), kTestImages);
           } catch (const Error& e) {
             throw Skip(std::string("Fashion-MNIST could not be loaded: ") + e.what());
           }
           c.input("lab3::MLP(128) trained with your fit on the first " + std::to_string(kTrainImages) +
                   " training images, " + std::to_string(kEpochs) + " epochs, batch " + std::to_string(kBatch) +
                   ", SGD lr " + num(kLr) + "; accuracy on the first " + std::to_string(kTestImages) + " test images");
           const auto t0 = std::chrono::steady_clock::now();
           manual_seed(0);
           lab3::MLP model(128);
           lab3::SGD opt(model.parameters(), kLr);
           nn::DataLoader loader(train, nn::DataLoaderOptions().batch_size(kBatch).shuffle(true).seed(1));
           const std::vector<double> losses = lab3::fit(model, opt, loader, kEpochs);
           const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
           const double acc = test_accuracy(model, test);
           std::string curve;
           for (double l : losses) curve += (curve.empty() ? "" : ", ") + fixed(l, 3);
           c.note("test accuracy " + fixed(acc, 3) + " (goal " + fixed(kMinAccuracy, 2) + "), epoch losses [" + curve +
                  "], " + fixed(seconds, 1) + " s of training");
           c.require(acc >= kMinAccuracy, "test accuracy " + fixed(acc, 3) + " is below the goal " +
                                              fixed(kMinAccuracy, 2) + " (epoch losses [" + curve + "])");
           c.require(seconds <= kMaxSeconds, "training took " + fixed(seconds, 1) + " s, more than the " +
                                                 fixed(kMaxSeconds, 0) + " s allowed (the reference takes about 1 s)");
         },
         3}}});
  return lab;
}

}  // namespace gradsleuth::labs
