// Tests for optim::GradScaler: the growth/backoff schedule, skipped steps, unscale_ before
// clipping, the misuse errors, the state through a checkpoint, and a training run with and
// without the scaler.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "core/generator.h"
#include "core/ops.h"
#include "core/warning.h"
#include "nn/checkpoint.h"
#include "nn/nn.h"
#include "nn_test_util.h"
#include "optim/optim.h"
#include "temp_dir.h"

namespace optim = gs::optim;
namespace nn = gs::nn;
using gs::Tensor;
using Vec = std::vector<double>;

namespace {

using nntest::error_of;
using nntest::has;

constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor param_with(const Vec& v, gs::DType dt = gs::kFloat32) {
  return gs::tensor(v, {static_cast<int64_t>(v.size())}, gs::TensorOptions(dt)).requires_grad_();
}

// One iteration on a parameter whose gradient is `g` x the scale (as a scaled backward makes it).
bool iteration(optim::GradScaler& s, optim::Optimizer& opt, Tensor& p, const Vec& g) {
  opt.zero_grad();
  Tensor loss = (p * gs::tensor(g, p.shape(), gs::TensorOptions(p.dtype()))).sum();
  s.scale(loss).backward();
  const bool stepped = s.step(opt);
  s.update();
  return stepped;
}

}  // namespace

TEST_CASE("GradScaler: the growth/backoff schedule on a sequence of inf and clean steps") {
  Tensor p = param_with({1.0, 2.0});
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  optim::GradScaler s(optim::GradScalerOptions().init_scale(1024.0).growth_interval(3));
  CHECK(s.get_scale() == 1024.0);
  // Reference schedule, written out: inf halves and restarts the count; 3 clean in a row doubles.
  const std::vector<bool> inf = {true, false, false, false, true, true, false, false, false, false, false, false};
  double want = 1024.0;
  int64_t tracker = 0;
  for (size_t k = 0; k < inf.size(); ++k) {
    CAPTURE(k);
    const bool stepped = iteration(s, opt, p, inf[k] ? Vec{kInf, 1.0} : Vec{0.5, -0.25});
    if (inf[k]) {
      want *= 0.5;
      tracker = 0;
    } else if (++tracker == 3) {
      want *= 2.0;
      tracker = 0;
    }
    CHECK(stepped == !inf[k]);
    CHECK(s.get_scale() == want);
    CHECK(s.get_growth_tracker() == tracker);
  }
  // 1024 -> 512 (inf), 1024 (3 clean), 512, 256 (2 inf), 512 (3 clean), 1024 (3 clean).
  CHECK(s.get_scale() == 1024.0);
  CHECK(opt.steps_taken() == 9);
}

TEST_CASE("GradScaler: PyTorch's defaults and the scale's growth stops short of float32's overflow") {
  optim::GradScaler d;
  CHECK(d.get_scale() == 65536.0);
  CHECK(d.get_growth_factor() == 2.0);
  CHECK(d.get_backoff_factor() == 0.5);
  CHECK(d.get_growth_interval() == 2000);
  CHECK(d.is_enabled());

  Tensor p = param_with({1.0});
  optim::SGD opt({p}, optim::SGDOptions(0.0));
  // 2^127 is float32's largest power of two: growing it would overflow, so it stays.
  optim::GradScaler s(optim::GradScalerOptions().init_scale(std::ldexp(1.0, 126)).growth_interval(1));
  iteration(s, opt, p, {1e-30});
  CHECK(s.get_scale() == std::ldexp(1.0, 127));
  iteration(s, opt, p, {1e-30});
  CHECK(s.get_scale() == std::ldexp(1.0, 127));
  CHECK(s.get_growth_tracker() == 0);
}

TEST_CASE("GradScaler: an inf or NaN gradient skips the step, leaves the parameters, and names the parameter") {
  Tensor a = param_with({1.0, 2.0}), b = param_with({3.0});
  optim::SGD opt({a, b}, optim::SGDOptions(0.1));
  optim::GradScaler s(optim::GradScalerOptions().init_scale(8.0));
  std::vector<optim::ScalerUpdate> seen;
  s.add_update_hook([&](const optim::GradScaler&, const optim::ScalerUpdate& u) { seen.push_back(u); });

  opt.zero_grad();
  Tensor loss = (a * gs::tensor(Vec{1.0, 1.0}, {2})).sum() + (b * gs::tensor(Vec{std::nan("")}, {1})).sum();
  s.scale(loss).backward();
  CHECK_FALSE(s.step(opt));
  s.update();
  CHECK(nntest::vals(a) == Vec{1.0, 2.0});
  CHECK(nntest::vals(b) == Vec{3.0});
  CHECK(opt.steps_taken() == 0);
  CHECK(s.get_scale() == 4.0);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].found_inf);
  CHECK(seen[0].scale_before == 8.0);
  CHECK(seen[0].scale_after == 4.0);
  CHECK(seen[0].skipped == std::vector<std::string>{"SGD"});
  REQUIRE(seen[0].nonfinite.size() == 1);
  CHECK(seen[0].nonfinite[0].index == 1);
  CHECK(seen[0].nonfinite[0].nan == 1);
  CHECK(seen[0].nonfinite[0].param.is_same(b));

  // A clean iteration steps with the true (unscaled) gradient: p - lr * g.
  opt.zero_grad();
  s.scale((a * gs::tensor(Vec{1.0, -2.0}, {2})).sum() + b.sum()).backward();
  CHECK(nntest::vals(a.grad()) == Vec{4.0, -8.0});  // scaled by 4
  CHECK(s.step(opt));
  s.update();
  nntest::check_close(a, {1.0 - 0.1, 2.0 + 0.2}, 1e-6);
  nntest::check_close(b, {3.0 - 0.1}, 1e-6);
  REQUIRE(seen.size() == 2);
  CHECK_FALSE(seen[1].found_inf);
  CHECK(seen[1].stepped == 1);
  CHECK(seen[1].nonfinite.empty());
}

TEST_CASE("GradScaler: unscale_ then clip gives the same gradients as clipping unscaled ones") {
  for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
    CAPTURE(gs::dtype_name(dt));
    auto run = [&](bool scaled) {
      Tensor a = param_with({1.0, -2.0, 0.5}, dt), b = param_with({3.0}, dt);
      optim::SGD opt({a, b}, optim::SGDOptions(0.1));
      optim::GradScaler s(optim::GradScalerOptions().enabled(scaled));
      Tensor loss = (a * a).sum() * 3.0 + (b * b * b).sum();
      s.scale(loss).backward();
      s.unscale_(opt);
      const double total = optim::clip_grad_norm_({a, b}, 1.0);
      return std::make_pair(total, Vec{nntest::vals(a.grad())[0], nntest::vals(a.grad())[1], nntest::vals(a.grad())[2],
                                       nntest::vals(b.grad())[0]});
    };
    const auto [t_scaled, g_scaled] = run(true);
    const auto [t_plain, g_plain] = run(false);
    CHECK(t_scaled == doctest::Approx(t_plain).epsilon(1e-6));
    CHECK(t_plain > 1.0);  // the clipping acted
    nntest::check_close(g_scaled, g_plain, 0.0, 1e-6);
  }
}

TEST_CASE("GradScaler: clipping before unscale_ warns (O10), after unscale_ it does not") {
  std::vector<gs::Warning> ws;
  gs::WarningHandlerGuard guard([&](const gs::Warning& w) { ws.push_back(w); });
  Tensor p = param_with({1.0, -2.0});
  Tensor other = param_with({5.0});
  optim::Adam opt({p}, optim::AdamOptions(1e-3));
  optim::GradScaler s;

  // Clean: unscale_, clip, step.
  s.scale((p * p).sum()).backward();
  s.unscale_(opt);
  optim::clip_grad_norm_({p}, 1.0);
  s.step(opt);
  s.update();
  CHECK(ws.empty());

  // A parameter of no optimizer the scaler steps: nothing to say.
  opt.zero_grad();
  s.scale((p * p).sum() + other.sum()).backward();
  optim::clip_grad_norm_({other}, 1.0);
  s.step(opt);
  s.update();
  CHECK(ws.empty());

  // Buggy: clip while the gradients are scaled, then step (which unscales).
  opt.zero_grad();
  s.scale((p * p).sum()).backward();
  optim::clip_grad_norm_({p}, 1.0);
  s.step(opt);
  s.update();
  REQUIRE(ws.size() == 1);
  CHECK(ws[0].check == "O10");
  CHECK(ws[0].where == "clip_grad_norm_");
  CHECK(has(ws[0].message, "unscale_"));
  CHECK(has(ws[0].message, "65536"));

  // clip_grad_value_ too (once per op).
  opt.zero_grad();
  s.scale((p * p).sum()).backward();
  optim::clip_grad_value_({p}, 0.1);
  s.unscale_(opt);
  s.step(opt);
  s.update();
  REQUIRE(ws.size() == 2);
  CHECK(ws[1].where == "clip_grad_value_");
}

TEST_CASE("GradScaler: misuse is refused as PyTorch refuses it, with the fix") {
  Tensor p = param_with({1.0});
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  {
    optim::GradScaler s;
    (p * 2.0).sum().backward();
    const std::string e = error_of([&] { s.step(opt); });
    CHECK(has(e, "GradScaler.step"));
    CHECK(has(e, "scaler.scale(loss)"));
    CHECK(has(error_of([&] { s.unscale_(opt); }), "scaler.scale(loss)"));
    CHECK(has(error_of([&] { s.update(); }), "GradScaler.update"));
  }
  {
    optim::GradScaler s;
    opt.zero_grad();
    s.scale((p * 2.0).sum()).backward();
    // update without step
    const std::string e = error_of([&] { s.update(); });
    CHECK(has(e, "no inf/NaN check"));
    CHECK(has(e, "scaler.step(opt)"));
    s.unscale_(opt);
    const std::string twice = error_of([&] { s.unscale_(opt); });
    CHECK(has(twice, "already called on SGD"));
    CHECK(nntest::vals(p.grad()) == Vec{2.0});  // not divided twice
    s.step(opt);
    CHECK(has(error_of([&] { s.step(opt); }), "step() was already called"));
    CHECK(has(error_of([&] { s.unscale_(opt); }), "after step()"));
    s.update();
    // A new iteration starts clean.
    opt.zero_grad();
    s.scale((p * 2.0).sum()).backward();
    CHECK(s.step(opt));
    s.update();
  }
  CHECK(has(error_of([] { optim::GradScaler(optim::GradScalerOptions().growth_factor(1.0)); }), "growth_factor"));
  CHECK(has(error_of([] { optim::GradScaler(optim::GradScalerOptions().backoff_factor(1.5)); }), "backoff_factor"));
  CHECK(has(error_of([] { optim::GradScaler(optim::GradScalerOptions().growth_interval(0)); }), "growth_interval"));
  CHECK(has(error_of([] { optim::GradScaler(optim::GradScalerOptions().init_scale(0.0)); }), "init_scale"));
  {
    optim::GradScaler s;
    opt.zero_grad();
    s.scale((p * 2.0).sum()).backward();
    s.step(opt);
    CHECK(has(error_of([&] { s.update(-1.0); }), "new_scale"));
    s.update(4.0);
    CHECK(s.get_scale() == 4.0);
  }
}

TEST_CASE("GradScaler: disabled, it is a pass-through") {
  Tensor p = param_with({1.0});
  optim::SGD opt({p}, optim::SGDOptions(0.5));
  optim::GradScaler s(optim::GradScalerOptions().enabled(false));
  Tensor loss = (p * 2.0).sum();
  CHECK(s.scale(loss).is_same(loss));
  loss.backward();
  s.unscale_(opt);
  CHECK(nntest::vals(p.grad()) == Vec{2.0});
  CHECK(s.step(opt));
  s.update();
  CHECK(nntest::vals(p) == Vec{0.0});
  CHECK(s.get_scale() == 1.0);
  CHECK(s.state_dict().empty());
}

TEST_CASE("GradScaler: the scaled loss keeps the loss's dtype and value x scale") {
  optim::GradScaler s(optim::GradScalerOptions().init_scale(4.0));
  Tensor l32 = gs::tensor(Vec{1.5}, gs::Shape{}, gs::TensorOptions(gs::kFloat32));
  Tensor l64 = gs::tensor(Vec{1.5}, gs::Shape{}, gs::TensorOptions(gs::kFloat64));
  CHECK(s.scale(l32).dtype() == gs::kFloat32);
  CHECK(s.scale(l64).dtype() == gs::kFloat64);
  CHECK(s.scale(l64).item<double>() == 6.0);
  CHECK(has(error_of([&] { s.scale(gs::tensor(std::vector<int64_t>{1}, {1})); }), "floating-point loss"));
}

TEST_CASE("GradScaler: its state round-trips through a checkpoint with the optimizer's; old files still load") {
  TempDir dir("grad_scaler");
  const std::string path = (dir.path / "optim.ckpt").string();
  Tensor p = param_with({1.0, -1.0});
  optim::Adam opt({p}, optim::AdamOptions(1e-2));
  optim::GradScaler s(optim::GradScalerOptions().init_scale(256.0).growth_interval(5).growth_factor(4.0));
  iteration(s, opt, p, {kInf, 0.0});  // 128
  iteration(s, opt, p, {0.5, 0.25});  // tracker 1
  iteration(s, opt, p, {0.5, 0.25});  // tracker 2
  REQUIRE(s.get_scale() == 128.0);
  REQUIRE(s.get_growth_tracker() == 2);
  nn::save_state(optim::training_state_dict(opt, s), path);

  Tensor q = param_with({1.0, -1.0});
  optim::Adam opt2({q}, optim::AdamOptions(1e-2));
  optim::GradScaler s2;
  CHECK(optim::load_training_state_dict(nn::load_state(path), opt2, s2));
  CHECK(s2.get_scale() == 128.0);
  CHECK(s2.get_growth_factor() == 4.0);
  CHECK(s2.get_backoff_factor() == 0.5);
  CHECK(s2.get_growth_interval() == 5);
  CHECK(s2.get_growth_tracker() == 2);
  CHECK(s2.state_dict().at("growth_tracker").item<int64_t>() == 2);
  // Both continue identically: 3 more clean steps grow the scale x4 at the 5th.
  {
    gs::NoGradGuard ng;
    q.copy_(p.detach());
  }
  for (int k = 0; k < 3; ++k) {
    iteration(s, opt, p, {0.5, 0.25});
    iteration(s2, opt2, q, {0.5, 0.25});
  }
  CHECK(s.get_scale() == 512.0);
  CHECK(s2.get_scale() == 512.0);
  CHECK(nntest::vals(q) == nntest::vals(p));

  // The optimizer alone refuses the combined file with the way to load it.
  optim::Adam opt3({param_with({0.0, 0.0})}, optim::AdamOptions(1e-2));
  CHECK(has(error_of([&] { opt3.load_state_dict(nn::load_state(path)); }), "load_training_state_dict"));

  // A file of the optimizer alone (as written before the scaler existed) loads; the scaler stays.
  const std::string old_path = (dir.path / "old.ckpt").string();
  nn::save_state(opt.state_dict(), old_path);
  optim::GradScaler s3(optim::GradScalerOptions().init_scale(32.0));
  CHECK_FALSE(optim::load_training_state_dict(nn::load_state(old_path), opt3, s3));
  CHECK(s3.get_scale() == 32.0);
  CHECK(opt3.state_dict().size() == opt.state_dict().size());

  // Bad entries are refused by name, leaving the scaler as it was.
  auto bad = s.state_dict();
  bad["growth_tracker"] = gs::scalar_tensor(int64_t{7}, gs::TensorOptions(gs::kInt64));
  CHECK(has(error_of([&] { s3.load_state_dict(bad); }), "growth_tracker"));
  bad = s.state_dict();
  bad["backoff_factor"] = gs::scalar_tensor(2.0, gs::TensorOptions(gs::kFloat64));
  CHECK(has(error_of([&] { s3.load_state_dict(bad); }), "backoff_factor"));
  bad = s.state_dict();
  bad.erase("scale");
  CHECK(has(error_of([&] { s3.load_state_dict(bad); }), "'scale' is missing"));
  CHECK(has(error_of([&] { s3.load_state_dict({}); }), "disabled"));
  CHECK(s3.get_scale() == 32.0);
  CHECK(s3.get_backoff_factor() == 0.5);
}

TEST_CASE("GradScaler: a training run with the scaler (no overflow) matches the run without it") {
  auto run = [](bool scaled, const std::string& which) {
    gs::manual_seed(11);
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 16), std::make_shared<nn::ReLU>(),
                                                  std::make_shared<nn::Linear>(16, 3));
    std::unique_ptr<optim::Optimizer> opt;
    if (which == "sgd")
      opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions(0.05).momentum(0.9));
    else
      opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions(1e-2));
    optim::GradScaler s(optim::GradScalerOptions().enabled(scaled).growth_interval(10));
    nn::CrossEntropyLoss ce;
    gs::Generator gen(3);
    Vec losses;
    for (int step = 0; step < 40; ++step) {
      Tensor x = gs::randn({16, 8}, {}, &gen);
      Tensor y = gs::argmax(x.narrow(1, 0, 3), 1);
      opt->zero_grad();
      Tensor loss = ce((*model)(x), y);
      losses.push_back(loss.item<double>());
      s.scale(loss).backward();
      s.unscale_(*opt);
      optim::clip_grad_norm_(model->parameters(), 5.0);
      REQUIRE(s.step(*opt));
      s.update();
    }
    if (scaled) CHECK(s.get_scale() == 65536.0 * 16.0);  // grew at steps 10, 20, 30, 40
    Vec w;
    for (const Tensor& p : model->parameters())
      for (double v : nntest::vals(p)) w.push_back(v);
    return std::make_pair(losses, w);
  };
  for (const std::string which : {"sgd", "adam"}) {
    CAPTURE(which);
    const auto [l_scaled, w_scaled] = run(true, which);
    const auto [l_plain, w_plain] = run(false, which);
    CHECK(l_plain.back() < l_plain.front());
    nntest::check_close(l_scaled, l_plain, 1e-5, 1e-4);
    nntest::check_close(w_scaled, w_plain, 1e-5, 1e-4);
  }
}

TEST_CASE("GradScaler: unscale_ takes any layout through tensor ops (a strided gradient), with the same counts") {
  for (bool strided : {false, true}) {
    CAPTURE(strided);
    Tensor p = gs::zeros({2, 3}, gs::TensorOptions(gs::kFloat32)).requires_grad_();
    optim::SGD opt({p}, optim::SGDOptions(0.1));
    optim::GradScaler s(optim::GradScalerOptions().init_scale(4.0));
    std::vector<optim::ScalerUpdate> seen;
    s.add_update_hook([&](const optim::GradScaler&, const optim::ScalerUpdate& u) { seen.push_back(u); });
    s.scale(p.sum());  // starts the scale; the gradient is set by hand below
    const double nan = std::nan("");
    Tensor g = gs::tensor(Vec{4.0, 8.0, kInf, nan, -12.0, nan}, {3, 2}, gs::TensorOptions(gs::kFloat32));
    p.set_grad(strided ? g.transpose(0, 1) : g.reshape({2, 3}).contiguous());
    REQUIRE(p.grad().is_contiguous() == !strided);
    CHECK_FALSE(s.step(opt));
    s.update();
    REQUIRE(seen.size() == 1);
    REQUIRE(seen[0].nonfinite.size() == 1);
    CHECK(seen[0].nonfinite[0].nan == 2);
    CHECK(seen[0].nonfinite[0].inf == 1);
    const Vec got = nntest::vals(p.grad().contiguous());
    const Vec want = strided ? Vec{1.0, kInf, -3.0, 2.0, nan, nan} : Vec{1.0, 2.0, kInf, nan, -3.0, nan};
    for (size_t i = 0; i < want.size(); ++i) CHECK(nntest::same_bits(got[i], want[i]));
  }
}

// A scaler is told only of the clipping done on the thread it scales on: one trained on another
// thread is that thread's, and clipping there neither reaches it nor warns here (O10).
TEST_CASE("GradScaler: clipping on another thread is not this scaler's (no O10, no shared state)") {
  std::vector<gs::Warning> ws;
  gs::WarningHandlerGuard guard([&](const gs::Warning& w) { ws.push_back(w); });
  Tensor p = param_with({1.0, -2.0});
  optim::Adam opt({p}, optim::AdamOptions(1e-3));
  optim::GradScaler s;
  s.scale((p * p).sum()).backward();
  std::thread([&] { optim::clip_grad_norm_({p}, 1.0); }).join();  // not this thread's clipping
  s.step(opt);
  s.update();
  CHECK(ws.empty());
  // The same clipping on this thread warns.
  opt.zero_grad();
  s.scale((p * p).sum()).backward();
  optim::clip_grad_norm_({p}, 1.0);
  s.step(opt);
  s.update();
  REQUIRE(ws.size() == 1);
  CHECK(ws[0].check == "O10");
}
