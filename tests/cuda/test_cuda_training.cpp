// Training on the CUDA backend: the Trainer's device option (model and batches moved, losses as
// on the CPU) and the fused optimizer steps (Backend::sgd_step/adam_step/rmsprop_step, cuda/optim.cu)
// giving the CPU's parameters and state after a few steps, for each option that changes the kernel;
// the debug checks on device tensors (summaries computed there, the monitor's findings as on the CPU).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "debug/checks/model/anomaly.h"
#include "debug/checks/model/model_checks.h"
#include "debug/evidence/tensor_stats.h"
#include "debug/run/monitor.h"
#include "nn/activation.h"
#include "nn/container.h"
#include "nn/data.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "optim/adam.h"
#include "optim/rmsprop.h"
#include "optim/sgd.h"
#include "optim/trainer.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/reduced_float_tolerance.h"

namespace {

using gs::Tensor;
const gs::Device kCPU = gs::kCPU, kCUDA = gs::kCUDA;

// Runs `steps` optimizer steps on a (37, 5) parameter of dtype t placed on d, with the same
// gradients on both devices; returns the parameter after each step (on the CPU).
using MakeOpt = std::function<std::unique_ptr<gs::optim::Optimizer>(std::vector<Tensor>)>;
std::vector<Tensor> run(const MakeOpt& make, gs::DType t, gs::Device d, bool fused = true, int steps = 4) {
  gs::Generator g;
  Tensor p = gs::randn({37, 5}, t, &g).to(d);
  p.requires_grad_(true);
  auto opt = make({p});
  opt->set_fused(fused);
  std::vector<Tensor> out;
  for (int s = 0; s < steps; ++s) {
    p.set_grad(gs::randn({37, 5}, t, &g).to(d));
    opt->step();
    out.push_back(p.detach().cpu().clone());
  }
  return out;
}

void same_steps(const char* name, const MakeOpt& make) {
  for (gs::DType t : {gs::kFloat32, gs::kFloat64}) {
    CAPTURE(name);
    CAPTURE(t);
    const auto cpu = run(make, t, kCPU), dev = run(make, t, kCUDA), dev_ops = run(make, t, kCUDA, false);
    REQUIRE(cpu.size() == dev.size());
    for (size_t s = 0; s < cpu.size(); ++s) {
      CAPTURE(s);
      CHECK(cuda_test::compare(dev[s], cpu[s]) == "");
      CHECK(cuda_test::compare(dev_ops[s], cpu[s]) == "");  // the tensor-op path agrees too
    }
  }
  // 16-bit parameters: the device takes the optimizer's float32 reference path, the cpu its fused
  // step in float32; each step rounds p and the state once: a few roundings per step apart at most.
  for (gs::DType t : {gs::kFloat16, gs::kBFloat16}) {
    CAPTURE(name);
    CAPTURE(t);
    const auto cpu = run(make, t, kCPU), dev = run(make, t, kCUDA);
    REQUIRE(cpu.size() == dev.size());
    for (size_t s = 0; s < cpu.size(); ++s) {
      CAPTURE(s);
      CHECK(dev[s].dtype() == t);
      CHECK(reduced_float::compare(dev[s], cpu[s], t, 2 * static_cast<int>(s + 1)) == "");
    }
  }
}

}  // namespace

TEST_CASE("the CUDA backend has fused optimizer steps (they are not the tensor-op fallback)") {
  Tensor p = gs::ones({300}).to(kCUDA), g = gs::full({300}, 0.5).to(kCUDA), buf;
  gs::SgdStep s;
  s.lr = 0.1;
  CHECK(gs::backend_for(kCUDA).sgd_step(p, g, buf, s));
  CHECK(p.cpu().to_vector<float>()[299] == doctest::Approx(0.95));
  Tensor m = gs::zeros({300}).to(kCUDA), v = gs::zeros({300}).to(kCUDA);
  CHECK(gs::backend_for(kCUDA).adam_step(p, g, m, v, Tensor(), gs::AdamStep{}));
  CHECK(gs::backend_for(kCUDA).rmsprop_step(p, g, v, Tensor(), Tensor(), gs::RmspropStep{}));
  // Not contiguous: refused, the optimizer takes its tensor ops.
  Tensor q = gs::ones({4, 3}).to(kCUDA).t();
  CHECK_FALSE(gs::backend_for(kCUDA).sgd_step(q, gs::ones({3, 4}).to(kCUDA), buf, s));
}

TEST_CASE("SGD steps on cuda equal the cpu's (momentum, dampening, nesterov, weight decay)") {
  using gs::optim::SGDOptions;
  auto sgd = [](SGDOptions o) -> MakeOpt {
    return [o](std::vector<Tensor> p) { return std::make_unique<gs::optim::SGD>(std::move(p), o); };
  };
  same_steps("plain", sgd(SGDOptions(0.1)));
  same_steps("momentum", sgd(SGDOptions(0.1).momentum(0.9)));
  same_steps("dampening+decay", sgd(SGDOptions(0.05).momentum(0.8).dampening(0.3).weight_decay(0.01)));
  same_steps("nesterov", sgd(SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.1)));
}

TEST_CASE("Adam and AdamW steps on cuda equal the cpu's (weight decay, amsgrad)") {
  using gs::optim::AdamOptions;
  auto adam = [](AdamOptions o) -> MakeOpt {
    return [o](std::vector<Tensor> p) { return std::make_unique<gs::optim::Adam>(std::move(p), o); };
  };
  same_steps("adam", adam(AdamOptions(1e-2)));
  same_steps("adam l2", adam(AdamOptions(1e-2).weight_decay(0.1)));
  same_steps("adam amsgrad", adam(AdamOptions(1e-2).amsgrad(true).weight_decay(0.05)));
  same_steps("adamw", [](std::vector<Tensor> p) {
    return std::make_unique<gs::optim::AdamW>(std::move(p),
                                              gs::optim::AdamWOptions(1e-2).weight_decay(0.1).amsgrad(true));
  });
}

TEST_CASE("RMSprop steps on cuda equal the cpu's (centered, momentum, weight decay)") {
  using gs::optim::RMSpropOptions;
  auto rms = [](RMSpropOptions o) -> MakeOpt {
    return [o](std::vector<Tensor> p) { return std::make_unique<gs::optim::RMSprop>(std::move(p), o); };
  };
  same_steps("plain", rms(RMSpropOptions(1e-2)));
  same_steps("centered", rms(RMSpropOptions(1e-2).centered(true)));
  same_steps("momentum+decay", rms(RMSpropOptions(1e-2).momentum(0.9).weight_decay(0.01)));
  same_steps("all", rms(RMSpropOptions(1e-2).centered(true).momentum(0.5).weight_decay(0.1)));
}

TEST_CASE("Trainer device option: the model and batches move to cuda, the losses follow the cpu's") {
  gs::Generator g;
  Tensor x = gs::randn({96, 6}, {}, &g);
  Tensor y = gs::randint(0, 3, {96}, gs::kInt64, &g);
  auto data = std::make_shared<gs::nn::TensorDataset>(x, y);
  auto fit_on = [&](gs::Device d, gs::optim::FitResult& r) {
    gs::manual_seed(7);
    auto model =
        std::make_shared<gs::nn::Sequential>(std::make_shared<gs::nn::Linear>(6, 16), std::make_shared<gs::nn::ReLU>(),
                                             std::make_shared<gs::nn::Linear>(16, 3));
    gs::optim::Adam opt(model->parameters(), gs::optim::AdamOptions(1e-2));  // made before the move: fine
    gs::nn::DataLoader train(data, gs::nn::DataLoaderOptions().batch_size(32).shuffle(true).seed(3));
    gs::nn::DataLoader val(data, gs::nn::DataLoaderOptions().batch_size(50));
    gs::optim::Trainer t(*model, opt,
                         gs::optim::TrainerOptions().device(d).epochs(2).progress(gs::optim::Progress::Off));
    bool batches_on_device = true;
    t.on_step([&](const gs::optim::StepInfo& s) { batches_on_device = batches_on_device && s.batch->x.device() == d; });
    r = t.fit(train, &val);
    CHECK(batches_on_device);
    CHECK(t.device() == d);
    for (const Tensor& p : model->parameters()) CHECK(p.device() == d);
  };
  gs::optim::FitResult rc, rd;
  fit_on(kCPU, rc);
  fit_on(kCUDA, rd);
  REQUIRE(rc.step_losses.size() == 6);
  REQUIRE(rd.step_losses.size() == rc.step_losses.size());
  for (size_t i = 0; i < rc.step_losses.size(); ++i)
    CHECK(rd.step_losses[i] == doctest::Approx(rc.step_losses[i]).epsilon(1e-4));
  CHECK(rd.last().val_loss == doctest::Approx(rc.last().val_loss).epsilon(1e-4));
  CHECK(rd.last().val_accuracy == rc.last().val_accuracy);
}

// Mixed precision on the device: a 2-layer MLP trained 12 Adam steps under bfloat16 autocast on cuda
// follows the cpu's run (the same initial weights and batches). Both compute each 16-bit op in
// float32 and round once, so the losses agree within a few bfloat16 roundings; the parameters and
// their gradients stay float32 on the device.
TEST_CASE("bfloat16 autocast training on cuda follows the cpu's losses") {
  gs::Generator g(11);
  const Tensor x = gs::randn({64, 8}, {}, &g);
  const Tensor y = gs::randint(0, 3, {64}, gs::kInt64, &g);
  auto train_on = [&](gs::Device d) {
    gs::manual_seed(5);
    auto model =
        std::make_shared<gs::nn::Sequential>(std::make_shared<gs::nn::Linear>(8, 32), std::make_shared<gs::nn::ReLU>(),
                                             std::make_shared<gs::nn::Linear>(32, 3));
    model->to(d);
    gs::optim::Adam opt(model->parameters(), gs::optim::AdamOptions(1e-2));
    const Tensor xd = x.to(d), yd = y.to(d);
    std::vector<double> losses;
    for (int step = 0; step < 12; ++step) {
      opt.zero_grad();
      Tensor loss;
      {
        auto ac = gs::autocast(gs::kBFloat16);
        const Tensor logits = model->forward(xd);
        CHECK(logits.dtype() == gs::kBFloat16);
        loss = gs::nn::functional::cross_entropy(logits, yd);
      }
      CHECK(loss.dtype() == gs::kFloat32);
      loss.backward();
      for (const Tensor& p : model->parameters()) {
        CHECK(p.device() == d);
        CHECK(p.grad().dtype() == gs::kFloat32);
      }
      opt.step();
      losses.push_back(loss.item<double>());
    }
    return losses;
  };
  const std::vector<double> cpu = train_on(kCPU), dev = train_on(kCUDA);
  REQUIRE(cpu.size() == dev.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    CAPTURE(i);
    CHECK(dev[i] == doctest::Approx(cpu[i]).epsilon(4 * std::ldexp(1.0, -7)));  // four bfloat16 roundings
  }
  CHECK(dev.back() < 0.8 * dev.front());  // it learns
}

// ---- debug checks on device tensors ---------------------------------------------------------
TEST_CASE("summaries of a cuda tensor (NaN/Inf counts, statistics) equal the cpu's") {
  for (gs::DType t : {gs::kFloat32, gs::kFloat64}) {
    CAPTURE(t);
    gs::Generator g;
    Tensor c = gs::randn({70, 9}, t, &g);
    {
      gs::NoGradGuard ng;
      Tensor flat = c.view({-1});
      flat.narrow(0, 3, 1).fill_(std::nan(""));
      flat.narrow(0, 100, 2).fill_(INFINITY);
      flat.narrow(0, 200, 1).fill_(-INFINITY);
      flat.narrow(0, 300, 5).fill_(0.0);
    }
    for (const Tensor& x : {c, c.t()}) {  // contiguous and strided
      const gs::debug::TensorSummary a = gs::debug::summarize(x), d = gs::debug::summarize(x.to(kCUDA));
      CHECK(d.numel == a.numel);
      CHECK(d.nan == 1);
      CHECK(d.nan == a.nan);
      CHECK(d.inf == a.inf);
      CHECK(d.finite == a.finite);
      CHECK(d.min == a.min);
      CHECK(d.max == a.max);
      CHECK(d.mean == doctest::Approx(a.mean).epsilon(1e-9));
      CHECK(d.std == doctest::Approx(a.std).epsilon(1e-9));
      CHECK(d.norm == doctest::Approx(a.norm).epsilon(1e-9));
      CHECK(d.zero_fraction == a.zero_fraction);
    }
    CHECK_FALSE(gs::debug::all_finite(c.to(kCUDA)));
    CHECK(gs::debug::all_finite(gs::randn({5000}, t, &g).to(kCUDA)));
    CHECK_FALSE(gs::debug::sampled_finite(c.to(kCUDA)));
  }
  // Integer and bool tensors, and an empty one.
  const Tensor i = gs::arange(-5, 7).to(kCUDA);
  CHECK(gs::debug::summarize(i).mean == doctest::Approx(gs::debug::summarize(i.cpu()).mean));
  CHECK(gs::debug::summarize(gs::zeros({0}).to(kCUDA)).numel == 0);
}

TEST_CASE("relu passes NaN on both devices, contiguous or strided (the dead-ReLU check relies on it)") {
  Tensor c = gs::tensor({-1.0, std::nan(""), 2.0, 0.0, std::nan(""), -3.0}).reshape({2, 3});
  for (const Tensor& x : {c, c.t()}) {
    const std::vector<double> a = x.relu().to_vector<double>(), d = x.to(kCUDA).relu().to_vector<double>();
    REQUIRE(a.size() == d.size());
    for (size_t i = 0; i < a.size(); ++i) {
      CAPTURE(i);
      CHECK(std::isnan(a[i]) == std::isnan(d[i]));
      if (!std::isnan(a[i])) CHECK(a[i] == d[i]);
    }
    CHECK(x.relu().isnan().sum().item<double>() == 2);
  }
}

// M13 and M18 work value by value on the host: a module on cuda is checked on a CPU copy
// (debug::HostCopyGuard) and goes back to cuda, exactly, with its gradients.
TEST_CASE("M13 (gradcheck_module) on a module on cuda: the cpu's findings; the module stays on cuda with its grads") {
  for (bool buggy : {false, true}) {
    CAPTURE(buggy);
    auto make = [&] {
      gs::manual_seed(5);
      auto lin = std::make_shared<gs::nn::Linear>(3, 2);
      if (buggy) lin->inject_bug(gs::nn::Bug::B22);  // a wrong hand-written weight gradient
      return lin;
    };
    gs::Generator g(2);
    const Tensor x = gs::randn({4, 3}, {}, &g);
    auto cpu = make(), dev = make();
    dev->to(kCUDA);
    const Tensor w_before = dev->weight.cpu().clone();
    const Tensor gw = gs::randn({2, 3}, {}, &g);
    dev->weight.set_grad(gw.to(kCUDA));
    const auto fc = gs::debug::gradcheck_module(*cpu, x, "lin"),
               fd = gs::debug::gradcheck_module(*dev, x.to(kCUDA), "lin");
    REQUIRE(fd.size() == fc.size());
    CHECK(fc.size() == (buggy ? 1u : 0u));
    for (size_t i = 0; i < fc.size(); ++i) {
      CHECK(fd[i].check == "M13");
      CHECK(fd[i].parameter == fc[i].parameter);
      CHECK(fd[i].evidence.at(1).value == fc[i].evidence.at(1).value);  // the same worst element
      CHECK(fd[i].cause.find("CPU copy") != std::string::npos);         // says where it was checked
      CHECK(fc[i].cause.find("CPU copy") == std::string::npos);
    }
    // Back on cuda, in float32, with the same values and the gradient it had.
    for (const Tensor& p : dev->parameters()) {
      CHECK(p.device() == kCUDA);
      CHECK(p.dtype() == gs::kFloat32);
    }
    CHECK(gs::equal(dev->weight.cpu(), w_before));
    REQUIRE(dev->weight.grad().defined());
    CHECK(dev->weight.grad().device() == kCUDA);
    CHECK(gs::equal(dev->weight.grad().cpu(), gw));
  }
}

TEST_CASE("M18 (check_half_precision) on a model on cuda: the cpu's verdict; the model stays on cuda") {
  auto make = [](bool naive) {
    auto fc = std::make_shared<gs::nn::Linear>(3, 3);
    {
      gs::NoGradGuard ng;
      fc->weight.copy_(gs::eye(3));
      fc->bias.zero_();
    }
    auto head = std::make_shared<gs::nn::LogSoftmax>(1);
    if (naive) head->inject_bug(gs::nn::Bug::B21);  // exp(x) / sum(exp(x)): overflows fp16 above 11
    return std::make_shared<gs::nn::Sequential>(fc, head);
  };
  const Tensor x = gs::tensor({20.0, 0.0, 1.0, 2.0, 3.0, 1.0, -4.0, 15.0, 0.5}, {3, 3});
  const Tensor y = gs::tensor(std::vector<int64_t>{0, 1, 1}, {3});
  for (bool naive : {true, false}) {
    CAPTURE(naive);
    auto cpu = make(naive), dev = make(naive);
    dev->to(kCUDA);
    // The targets follow the output to wherever the check computes it.
    auto loss = [&](const Tensor& out) { return gs::nn::functional::nll_loss(out, y.to(out.device())); };
    const auto fc = gs::debug::check_half_precision(*cpu, x, loss);
    const auto fd = gs::debug::check_half_precision(*dev, x.to(kCUDA), loss);
    REQUIRE(fd.size() == fc.size());
    CHECK(fc.size() == (naive ? 1u : 0u));
    for (size_t i = 0; i < fc.size(); ++i) {
      CHECK(fd[i].check == "M18");
      CHECK(fd[i].severity == fc[i].severity);
      CHECK(fd[i].module == fc[i].module);
    }
    for (const Tensor& p : dev->parameters()) CHECK(p.device() == kCUDA);
    CHECK(gs::equal(dev->parameters()[0].cpu(), gs::eye(3)));  // the rounding was undone
  }
}

TEST_CASE("the host-only checks refuse a module spread over two devices, and the fp16 emulation a device op") {
  auto model = std::make_shared<gs::nn::Sequential>(std::make_shared<gs::nn::Linear>(3, 4),
                                                    std::make_shared<gs::nn::Linear>(4, 2));
  (*model)[0]->to(kCUDA);  // only the first layer moved
  try {
    gs::debug::gradcheck_module(*model, gs::randn({2, 3}).to(kCUDA), "model");
    FAIL("no error");
  } catch (const gs::Error& e) {
    const std::string m = e.what();
    CHECK(m.find("more than one device") != std::string::npos);
    CHECK(m.find("cuda:0") != std::string::npos);
    CHECK(m.find("model->to(device)") != std::string::npos);
  }
  CHECK((*model)[0]->parameters()[0].device() == kCUDA);  // nothing moved
  CHECK((*model)[1]->parameters()[0].device() == kCPU);

  const Tensor a = gs::ones({4}).to(kCUDA);
  gs::debug::HalfPrecisionEmulation half;
  gs::debug::Scope on(&half);
  CHECK_THROWS_WITH_AS(a + a, doctest::Contains("'add' produced float32[4]@cuda:0"), gs::Error);
}

namespace {
// The finding ids a monitored short run reports, on device d, with a bug injected by `setup`.
std::vector<std::string> monitored_run(
    gs::Device d, const std::function<void(gs::optim::TrainerOptions&, gs::nn::Sequential&)>& setup) {
  gs::Generator g;
  Tensor x = gs::randn({64, 8}, {}, &g);
  Tensor y = gs::randint(0, 3, {64}, gs::kInt64, &g);
  auto data = std::make_shared<gs::nn::TensorDataset>(x, y);
  gs::manual_seed(11);
  auto model =
      std::make_shared<gs::nn::Sequential>(std::make_shared<gs::nn::Linear>(8, 16), std::make_shared<gs::nn::ReLU>(),
                                           std::make_shared<gs::nn::Linear>(16, 3));
  gs::optim::TrainerOptions o = gs::optim::TrainerOptions().device(d).epochs(3).progress(gs::optim::Progress::Off);
  setup(o, *model);
  model->to(d);
  gs::optim::Adam opt(model->parameters(), gs::optim::AdamOptions(3e-3));
  gs::nn::CrossEntropyLoss loss;
  gs::debug::MonitorOptions mo;
  mo.every = 2;
  gs::debug::Monitor m(*model, opt, &loss, mo);
  gs::nn::DataLoader loader(data, gs::nn::DataLoaderOptions().batch_size(32).shuffle(true));
  gs::optim::Trainer t(*model, opt, o);
  t.set_loss([&](const Tensor& out, const Tensor& yy) { return loss(out, yy); });
  m.attach(t);
  t.fit(loader, &loader);
  m.finish();
  return m.report().fired_checks();
}
}  // namespace

TEST_CASE("a monitored run on cuda reports the same findings as on the cpu") {
  auto none = [](gs::optim::TrainerOptions&, gs::nn::Sequential&) {};
  auto b04 = [](gs::optim::TrainerOptions& o, gs::nn::Sequential&) { o.bug(gs::nn::Bug::B04); };
  auto b05 = [](gs::optim::TrainerOptions& o, gs::nn::Sequential&) { o.bug(gs::nn::Bug::B05); };
  auto nan_weight = [](gs::optim::TrainerOptions&, gs::nn::Sequential& m) {
    gs::NoGradGuard ng;
    std::dynamic_pointer_cast<gs::nn::Linear>(m[2])->weight.view({-1}).narrow(0, 4, 1).fill_(std::nan(""));
  };
  const char* names[] = {"clean", "B04", "B05", "NaN weight"};
  int k = 0;
  for (const auto& setup : {std::function(none), std::function(b04), std::function(b05), std::function(nan_weight)}) {
    const std::string name = names[k++];
    CAPTURE(name);
    const auto cpu = monitored_run(kCPU, setup), dev = monitored_run(kCUDA, setup);
    std::string cs, ds;
    for (const auto& c : cpu) cs += c + " ";
    for (const auto& c : dev) ds += c + " ";
    CAPTURE(cs);
    CAPTURE(ds);
    CHECK(dev == cpu);
    if (name == "B04") CHECK(std::find(dev.begin(), dev.end(), "O5") != dev.end());
    // The NaN sits in a weight: O4 names it (M12 looks for an op that made one).
    if (name == "NaN weight") CHECK(std::find(dev.begin(), dev.end(), "O4") != dev.end());
  }
}
