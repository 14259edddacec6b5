// gradsleuth demo: what the engine alone can do. A 2-layer MLP written with raw
// ops, trained by hand-written SGD on a 3-class spiral; then the error autograd
// raises for an in-place change of a saved tensor, and a numeric gradient check.
//
// Dimension letters: N = points, D = 2 input features, H = hidden units, C = 3 classes.
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <stdexcept>

#include "cli/cli.h"
#include "core/autograd.h"
#include "core/generator.h"
#include "core/json.h"
#include "core/ops.h"
#include "debug/checks/model/gradcheck.h"

namespace gradsleuth::cli {

namespace {

// The classic spiral (CS231n): class c's points wind around the origin,
//   r = i / (P - 1),  t = c * 4 + 4 r + noise,  x = (r sin t, r cos t).
struct Spiral {
  Tensor x;  // (N, D) float32
  Tensor y;  // (N) int64
};
Spiral make_spiral(int64_t per_class, int64_t classes, Generator& gen) {
  const int64_t n = per_class * classes;
  std::vector<double> noise = randn({n}, kFloat64, &gen).to_vector<double>();
  std::vector<float> xs;
  std::vector<int64_t> ys;
  for (int64_t c = 0; c < classes; ++c)
    for (int64_t i = 0; i < per_class; ++i) {
      const double r = static_cast<double>(i) / static_cast<double>(per_class - 1);
      const double t = c * 4.0 + 4.0 * r + 0.2 * noise[c * per_class + i];
      xs.push_back(static_cast<float>(r * std::sin(t)));
      xs.push_back(static_cast<float>(r * std::cos(t)));
      ys.push_back(c);
    }
  return {tensor(xs, {n, 2}), tensor(ys, {n})};
}

// The model: logits = relu(x W1^T + b1) W2^T + b2, written with raw ops.
struct Mlp {
  Tensor w1, b1, w2, b2;  // (H, D), (H), (C, H), (C)
  tensor_list params() const { return {w1, b1, w2, b2}; }
};
Tensor logits_of(const Tensor& x, const tensor_list& p) {  // x (N, D) -> (N, C)
  return linear(relu(linear(x, p[0], p[1])), p[2], p[3]);
}
// Mean negative log-likelihood: -mean_i log softmax(logits)_i[y_i].
Tensor nll(const Tensor& logits, const Tensor& y) {  // (N, C), (N) -> ()
  return -gather(log_softmax(logits, 1), 1, y.unsqueeze(1)).mean();
}
double accuracy(const Tensor& logits, const Tensor& y) {
  return eq(argmax(logits, 1), y).to(kFloat64).mean().item<double>();
}

}  // namespace

int cmd_demo(const std::vector<std::string>& args) {
  Args a("demo", args);
  a.about(
      "Trains a 2-layer MLP (2 -> H -> 3, ReLU) written with raw ops (gs::linear, gs::relu,\n"
      "gs::log_softmax + gather for the NLL loss) by hand-written SGD with momentum on a synthetic\n"
      "3-class spiral of 600 points; then shows the error autograd raises when a tensor saved for\n"
      "backward is modified in place, and checks the model's gradients numerically (gs::debug::gradcheck).");
  a.option("steps", "N", "full-batch SGD steps", "500");
  a.option("log-every", "K", "print step, loss and accuracy every K steps", "50");
  a.option("seed", "S", "seed for the data and the initial weights", "0");
  a.option("hidden", "H", "hidden units", "32");
  a.option("lr", "LR", "learning rate", "0.2");
  a.option("momentum", "M", "momentum", "0.9");
  a.flag("json", "print only one JSON object {\"final_loss\", \"train_accuracy\", \"seconds\", ...}");
  if (!a.parse()) return 0;
  // Range-checked before any work (a NaN lr would train to NaN and then blame the gradient check).
  const int steps = static_cast<int>(a.get_int_in("steps", 0, 100000000));
  const int log_every = static_cast<int>(a.get_int_in("log-every", 1, INT32_MAX));
  const int hidden = static_cast<int>(a.get_int_in("hidden", 1, 1 << 20));
  const double lr = a.get_double_in("lr", 0.0, true, 10.0, false);  // above 10 every optimizer diverges
  const double momentum = a.get_double_in("momentum", 0.0, false, 1.0, true);
  const uint64_t seed = a.get_seed("seed");
  const bool json = a.has("json");
  const auto t0 = std::chrono::steady_clock::now();

  // ---- data and parameters ---------------------------------------------------
  Generator gen(seed);
  const int64_t C = 3, D = 2, H = hidden;
  Spiral data = make_spiral(200, C, gen);
  Mlp m;
  // He initialisation for the ReLU layer, Xavier-like for the output layer.
  m.w1 = randn({H, D}, kFloat32, &gen) * std::sqrt(2.0 / D);
  m.b1 = zeros({H});
  m.w2 = randn({C, H}, kFloat32, &gen) * std::sqrt(1.0 / H);
  m.b2 = zeros({C});
  for (Tensor* p : {&m.w1, &m.b1, &m.w2, &m.b2}) p->requires_grad_(true);
  tensor_list velocity;
  for (const Tensor& p : m.params()) velocity.push_back(zeros_like(p));

  if (!json)
    std::printf(
        "training a 2-layer MLP (2 -> %lld -> 3) on a 3-class spiral of %lld points: %d steps of SGD "
        "(lr %g, momentum %g)\n",
        static_cast<long long>(H), static_cast<long long>(data.x.size(0)), steps, lr, momentum);

  // ---- training: forward, backward, update ---------------------------------------
  double loss_v = 0.0;
  for (int step = 1; step <= steps; ++step) {
    Tensor logits = logits_of(data.x, m.params());
    Tensor loss = nll(logits, data.y);
    loss.backward();
    {
      NoGradGuard no_grad;  // the update itself must not be recorded
      tensor_list ps = m.params();
      for (size_t i = 0; i < ps.size(); ++i) {
        velocity[i].mul_(momentum).add_(ps[i].grad());  // v = momentum v + g
        ps[i].sub_(velocity[i], lr);                    // p = p - lr v
        ps[i].zero_grad();
      }
    }
    loss_v = loss.item<double>();
    if (!json && (step % log_every == 0 || step == 1 || step == steps))
      std::printf("  step %5d  loss %.4f  accuracy %.3f\n", step, loss_v, accuracy(logits.detach(), data.y));
  }
  double acc;
  {
    NoGradGuard no_grad;
    Tensor logits = logits_of(data.x, m.params());
    loss_v = nll(logits, data.y).item<double>();
    acc = accuracy(logits, data.y);
  }
  if (!json) std::printf("final: loss %.4f, train accuracy %.3f\n", loss_v, acc);

  // ---- autograd's version check: a saved tensor modified in place ---------------------
  bool inplace_caught = false;
  {
    Tensor x = randn({3}, TensorOptions().requires_grad(true), &gen);
    Tensor y = exp(x);  // exp saves its output y: d exp(x)/dx = exp(x) = y
    y.add_(1.0);        // ...and this overwrites it before backward
    try {
      y.sum().backward();
    } catch (const Error& e) {
      inplace_caught = true;
      if (!json) std::printf("\nin-place error: y = exp(x); y.add_(1); y.sum().backward() raises\n  %s\n", e.what());
    }
  }

  // ---- a numeric gradient check of the same loss (float64, 32 points) --------------------
  Tensor xs = data.x.narrow(0, 0, 32).to(kFloat64);
  Tensor ys = data.y.narrow(0, 0, 32);
  tensor_list inputs{xs, ys};
  for (const Tensor& p : m.params()) inputs.push_back(p.detach().to(kFloat64));
  auto loss_fn = [](const tensor_list& in) {  // in = {x, y, W1, b1, W2, b2}
    return nll(logits_of(in[0], {in[2], in[3], in[4], in[5]}), in[1]);
  };
  debug::GradcheckResult gc = debug::gradcheck(loss_fn, inputs);
  if (!json) std::printf("\ngradient check of the loss w.r.t. x, W1, b1, W2, b2:\n  %s\n", gc.message.c_str());

  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (json)
    std::cout << "{\"final_loss\":" << json_num(loss_v) << ",\"train_accuracy\":" << json_num(acc)
              << ",\"seconds\":" << json_num(seconds) << ",\"steps\":" << steps
              << ",\"inplace_error_caught\":" << json_bool(inplace_caught)
              << ",\"gradcheck_passed\":" << json_bool(gc.passed) << "}\n";
  else
    std::printf("\ndone in %.2f s\n", seconds);
  return gc.passed && inplace_caught ? 0 : 1;
}

}  // namespace gradsleuth::cli
