// Detection by behaviour, not by type: each class of bug written as a user
// would (hand-written layers, a custom op, a hand-written training loop), with a
// buggy twin that must be caught (id, severity, the module or op named) and a
// clean twin that must stay silent.
#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "core/autograd.h"
#include "core/warning.h"
#include "debug/checks/model/behaviour.h"
#include "debug/run/monitor.h"
#include "debug_test_util.h"
#include "optim/optim.h"

using namespace dtest;
namespace optim = gs::optim;

namespace {

// A dropout written by hand: zeroes each element with probability p in training.
// The buggy twin forgets to scale the kept values by 1/(1-p).
class MyDropout : public nn::Module {
 public:
  MyDropout(double p, bool rescale) : Module("MyDropout"), p_(p), rescale_(rescale) {}
  Tensor forward(const Tensor& x) override {
    if (!is_training()) return x;
    Tensor keep = gs::ge(gs::rand(x.shape(), gs::TensorOptions(x.dtype())), p_).to(x.dtype());
    Tensor y = x * keep;
    return rescale_ ? y * (1.0 / (1.0 - p_)) : y;
  }

 private:
  double p_;
  bool rescale_;
};

// Cutout (DeVries and Taylor, 2017) as a layer: in training, one size x size square of every image,
// at a random place, set to 0 (no rescaling: evaluation sees whole images by design).
class MyCutout : public nn::Module {
 public:
  explicit MyCutout(int64_t size) : Module("MyCutout"), size_(size) {}
  Tensor forward(const Tensor& x) override {
    if (!is_training()) return x;
    const int64_t N = x.size(0), H = x.size(2), W = x.size(3);
    std::vector<float> mask(static_cast<size_t>(N * H * W), 1.0f);
    const std::vector<int64_t> at = gs::randint(0, H - size_ + 1, {N, 2}).to_vector<int64_t>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < size_; ++i)
        for (int64_t j = 0; j < size_; ++j)
          mask[static_cast<size_t>((n * H + at[n * 2] + i) * W + at[n * 2 + 1] + j)] = 0.0f;
    return x * gs::tensor(mask, {N, 1, H, W}).to(x.dtype());
  }

 private:
  int64_t size_;
};

// Gaussian noise in training (zero mean: its expected output is the input).
class MyNoise : public nn::Module {
 public:
  explicit MyNoise(double sigma) : Module("MyNoise"), sigma_(sigma) {}
  Tensor forward(const Tensor& x) override {
    if (!is_training()) return x;
    return x + gs::randn(x.shape(), gs::TensorOptions(x.dtype())) * sigma_;
  }

 private:
  double sigma_;
};

// A BatchNorm-like layer written by hand: centres each feature with the batch
// mean in training (and tracks a running mean), with the running mean in eval.
// The buggy twin (update = false) never updates its running mean.
class MyCentering : public nn::Module {
 public:
  explicit MyCentering(int64_t C, bool update = true) : Module("MyCentering"), update_(update) {
    running_mean = register_buffer("running_mean", gs::zeros({C}));
  }
  Tensor forward(const Tensor& x) override {
    if (!is_training()) return x - running_mean;
    Tensor mean = x.mean({0});
    if (update_) {
      gs::NoGradGuard ng;
      running_mean.mul_(0.9).add_(mean.detach() * 0.1);
    }
    return x - mean;
  }
  Tensor running_mean;

 private:
  bool update_;
};

// y = x^2 with a hand-written backward; the buggy twin forgets the factor 2.
class MySquare : public nn::Module {
 public:
  explicit MySquare(bool wrong) : Module("MySquare"), wrong_(wrong) {}
  Tensor forward(const Tensor& x) override {
    Tensor out;
    {
      gs::NoGradGuard ng;
      out = x * x;
    }
    if (gs::needs_grad(x))
      gs::record("my_square", out, {&x},
                 [sx = gs::SavedTensor(x, "my_square"), k = wrong_ ? 1.0 : 2.0](const Tensor& g, gs::Node& n) {
                   return gs::tensor_list{g * sx.unpack(n) * k};
                 });
    return out;
  }

 private:
  bool wrong_;
};

std::shared_ptr<nn::Sequential> with_dropout(bool rescale, uint64_t seed = 1) {
  gs::manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 32), std::make_shared<nn::ReLU>(),
                                          std::make_shared<MyDropout>(0.5, rescale),
                                          std::make_shared<nn::Linear>(32, 3));
}

std::shared_ptr<nn::Sequential> with_square(bool wrong, uint64_t seed = 1) {
  gs::manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 6), std::make_shared<MySquare>(wrong),
                                          std::make_shared<nn::Linear>(6, 3));
}

std::vector<std::string> labels_of(const dbg::ModeProbe& p) {
  std::vector<std::string> out;
  for (const auto& b : p.modules) out.push_back(b.label);
  return out;
}

}  // namespace

// ---- the train/eval probe ---------------------------------------------------------------------
TEST_CASE("probe: a hand-written dropout without 1/(1-p) is an M2 error naming it; with it, silence") {
  XY d = blobs(16, 3, 8);
  auto bad = with_dropout(false);
  const dbg::ModeProbe pb = dbg::probe_mode_dependence(*bad, d.x);
  REQUIRE(pb.modules.size() == 1);
  CHECK(pb.modules[0].label == "2 (MyDropout)");
  CHECK(pb.modules[0].stochastic);
  CHECK(pb.modules[0].mode_dependent);
  CHECK(pb.modules[0].scale == doctest::Approx(0.5).epsilon(0.1));  // keeps half, unscaled
  const auto fs = pb.findings();
  const dbg::Finding* f = find(fs, "M2", dbg::Severity::Error);
  REQUIRE(f != nullptr);
  CHECK(f->module == "2 (MyDropout)");
  CHECK(f->title.find("0.5") != std::string::npos);

  auto good = with_dropout(true);
  const dbg::ModeProbe pg = dbg::probe_mode_dependence(*good, d.x);
  REQUIRE(pg.modules.size() == 1);
  CHECK(pg.modules[0].stochastic);
  CHECK(pg.modules[0].scale == doctest::Approx(1.0).epsilon(0.1));
  CHECK(pg.findings().empty());
}

TEST_CASE(
    "probe: Cutout zeroes a patch of each image (an augmentation, silent); unscaled dropout on images is an error") {
  const Tensor images = gs::randn({16, 3, 16, 16});
  auto cutout = std::make_shared<nn::Sequential>(std::make_shared<MyCutout>(6), std::make_shared<nn::Conv2d>(3, 4, 3));
  const dbg::ModeProbe pc = dbg::probe_mode_dependence(*cutout, images);
  REQUIRE(pc.modules.size() == 1);
  CHECK(pc.modules[0].stochastic);
  CHECK(pc.modules[0].occludes);
  CHECK(pc.modules[0].scale < 0.95);  // its mean output is below the input's, by design
  CHECK(pc.findings().empty());
  // The same share of entries (6 x 6 of 16 x 16, 14%) zeroed at random places, unscaled: dropout's bug.
  auto dropout =
      std::make_shared<nn::Sequential>(std::make_shared<MyDropout>(0.14, false), std::make_shared<nn::Conv2d>(3, 4, 3));
  const dbg::ModeProbe pd = dbg::probe_mode_dependence(*dropout, images);
  REQUIRE(pd.modules.size() == 1);
  CHECK_FALSE(pd.modules[0].occludes);
  CHECK(find(pd.findings(), "M2", dbg::Severity::Error) != nullptr);
}

TEST_CASE("probe: zero-mean noise, nn::Dropout and a hand-written BatchNorm-like layer are classified, not flagged") {
  XY d = blobs(16, 3, 8);
  gs::manual_seed(2);
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 16), std::make_shared<MyCentering>(16),
                                                std::make_shared<MyNoise>(1.0), std::make_shared<nn::Dropout>(0.3),
                                                std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, 3));
  model->train();
  // The probe changes nothing: the random stream, the buffers, the modes.
  auto* centre = static_cast<MyCentering*>(model->named_children()[1].second.get());
  const Tensor rm = centre->running_mean.clone();
  const uint64_t offset = gs::default_generator().offset();
  const dbg::ModeProbe p = dbg::probe_mode_dependence(*model, d.x);
  CHECK(gs::default_generator().offset() == offset);
  CHECK(gs::allclose(centre->running_mean, rm, 0.0, 0.0));
  for (auto& [path, m] : model->named_modules()) CHECK(m->is_training());

  CHECK(labels_of(p) == std::vector<std::string>{"1 (MyCentering)", "2 (MyNoise)", "3 (Dropout)"});
  const dbg::ModuleBehaviour* c = p.find(model->named_children()[1].second.get());
  REQUIRE(c != nullptr);
  CHECK(c->mode_dependent);
  CHECK_FALSE(c->stochastic);
  CHECK(c->updates_buffers);
  CHECK(p.any_deterministic_mode_dependent());
  CHECK(p.stochastic_modules().size() == 2);
  CHECK(p.findings().empty());  // noise and nn::Dropout keep the expected value

  // set_mode_without_randomness: train mode, the random layers in eval, the BatchNorm-like one training.
  {
    dbg::ModeSnapshot modes(*model);
    model->eval();
    dbg::set_mode_without_randomness(*model, true, p);
    CHECK(model->is_training());
    CHECK(model->named_children()[1].second->is_training());
    CHECK_FALSE(model->named_children()[2].second->is_training());
    CHECK_FALSE(model->named_children()[3].second->is_training());
  }
  for (auto& [path, m] : model->named_modules()) CHECK(m->is_training());  // the snapshot put them back
}

TEST_CASE("M6: a hand-written BatchNorm-like layer gets the train-mode coupling info, like nn::BatchNorm1d") {
  XY d = blobs(8, 3, 8);
  gs::manual_seed(3);
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 16), std::make_shared<MyCentering>(16),
                                                std::make_shared<nn::Linear>(16, 3));
  const auto fs = dbg::batch_mixing_test(*model, d.x);
  CHECK_FALSE(fires(fs));
  bool coupled_info = false;
  for (const auto& f : fs) coupled_info = coupled_info || (f.check == "M6" && f.severity == dbg::Severity::Info);
  CHECK(coupled_info);
  // Without the layer, nothing couples the batch even in train mode.
  gs::manual_seed(3);
  auto plain =
      std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 16), std::make_shared<nn::Linear>(16, 3));
  CHECK(dbg::batch_mixing_test(*plain, d.x).empty());
}

TEST_CASE("M14/L4/L6: the randomness of a hand-written noise layer is switched off by the checks that need it") {
  XY d = blobs(8, 3, 8, 5, 1.5);
  gs::manual_seed(4);
  // Strong noise right before the head: with it on, the loss at init is far
  // from log C and one batch cannot be memorised.
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 32), std::make_shared<nn::ReLU>(),
                                                std::make_shared<MyNoise>(8.0), std::make_shared<nn::Linear>(32, 3));
  nn::CrossEntropyLoss ce;
  auto loss = [&ce](const Tensor& out, const Tensor& y) { return ce(out, y); };
  const auto fo = dbg::overfit_one_batch(*model, d.x, d.y, loss);
  REQUIRE(find(fo, "M14", dbg::Severity::Info) != nullptr);
  CHECK(find(fo, "M14", dbg::Severity::Info)->severity == dbg::Severity::Info);

  dbg::GateOptions go;
  go.overfit = false;
  go.gradcheck = false;
  const dbg::Report r = dbg::pretrain_gate(*model, d.x, d.y, loss, nullptr, go);
  CHECK_FALSE(r.fired("L4"));
  CHECK_FALSE(r.fired("M2"));
  const auto fr = dbg::check_loss_reduction(*model, loss, d.x, d.y);
  REQUIRE(find(fr, "L6", dbg::Severity::Info) != nullptr);
  CHECK_FALSE(fires(fr));
  CHECK(model->named_children()[2].second->is_training());  // modes restored
}

TEST_CASE("W2 gate: the unscaled hand-written dropout is reported as M2 by the gate") {
  XY d = blobs(16, 3, 8);
  nn::CrossEntropyLoss ce;
  auto loss = [&ce](const Tensor& out, const Tensor& y) { return ce(out, y); };
  dbg::GateOptions go;
  go.overfit = false;
  auto bad = with_dropout(false);
  const dbg::Report rb = dbg::pretrain_gate(*bad, d.x, d.y, loss, nullptr, go);
  const dbg::Finding* f = find(rb.findings(), "M2", dbg::Severity::Error);
  REQUIRE(f != nullptr);
  CHECK(f->module == "2 (MyDropout)");
  auto good = with_dropout(true);
  CHECK_FALSE(dbg::pretrain_gate(*good, d.x, d.y, loss, nullptr, go).fired("M2"));
}

// ---- M13 on custom ops ----------------------------------------------------------------------
TEST_CASE("M13: a parameter-free custom op with a wrong backward fails the gate, naming the module") {
  XY d = blobs(8, 3, 8);
  auto bad = with_square(true);
  const auto mods = dbg::custom_op_modules(*bad, d.x);
  REQUIRE(mods.size() == 1);
  CHECK(mods[0].first == "1");
  const auto fs = dbg::gradcheck_layers(*bad, d.x);
  const dbg::Finding* f = find(fs, "M13", dbg::Severity::Error);
  REQUIRE(f != nullptr);
  CHECK(f->module == "1 (MySquare)");

  nn::CrossEntropyLoss ce;
  auto loss = [&ce](const Tensor& out, const Tensor& y) { return ce(out, y); };
  dbg::GateOptions go;
  go.overfit = false;
  const dbg::Report rb = dbg::pretrain_gate(*bad, d.x, d.y, loss, nullptr, go);
  REQUIRE(rb.fired("M13"));
  CHECK(find(rb.findings(), "M13", dbg::Severity::Error)->module == "1 (MySquare)");

  auto good = with_square(false);
  CHECK(dbg::custom_op_modules(*good, d.x).size() == 1);
  CHECK(dbg::gradcheck_layers(*good, d.x).empty());
  CHECK_FALSE(dbg::pretrain_gate(*good, d.x, d.y, loss, nullptr, go).fired("M13"));
}

TEST_CASE("M13: the engine's own layers are not taken for custom ops") {
  XY d = blobs(8, 3, 8);
  auto model = mlp(8, 16, 3);
  CHECK(dbg::custom_op_modules(*model, d.x).empty());
  gs::manual_seed(5);
  auto cnn = std::make_shared<nn::Sequential>(std::make_shared<nn::Conv2d>(1, 4, 3), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
                                              std::make_shared<nn::Linear>(4 * 3 * 3, 3));
  CHECK(dbg::custom_op_modules(*cnn, gs::randn({4, 1, 8, 8})).empty());
  gs::manual_seed(6);
  auto misc = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Linear>(8, 12), std::make_shared<nn::LayerNorm>(12), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Sigmoid>(), std::make_shared<nn::GELU>(), std::make_shared<nn::Dropout>(0.1),
      std::make_shared<nn::Softmax>(1), std::make_shared<nn::Linear>(12, 3), std::make_shared<nn::LogSoftmax>(1));
  CHECK(dbg::custom_op_modules(*misc, d.x).empty());
}

TEST_CASE("M13: the whole-model input-gradient check catches a wrong backward and passes a right one") {
  XY d = blobs(8, 3, 8);
  auto bad = with_square(true);
  const auto fb = dbg::check_input_gradient(*bad, d.x);
  const dbg::Finding* f = find(fb, "M13", dbg::Severity::Error);
  REQUIRE(f != nullptr);
  CHECK(f->module == "(model) (Sequential)");
  // The model is back in float32 with its gradients as they were.
  for (const Tensor& p : bad->parameters()) CHECK(p.dtype() == gs::kFloat32);
  CHECK(dbg::check_input_gradient(*with_square(false), d.x).empty());
  CHECK(dbg::check_input_gradient(*mlp(8, 16, 3), d.x).empty());
}

TEST_CASE("M13: the whole-model check is silent on a clean CNN fed images with a flat background (max-pool ties)") {
  gs::manual_seed(8);
  auto cnn = std::make_shared<nn::Sequential>(std::make_shared<nn::Conv2d>(1, 4, 3), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
                                              std::make_shared<nn::Linear>(4 * 6 * 6, 3));
  // Mostly background (exact zeros) with a small bright patch: every pooling
  // window over the background is a tie.
  Tensor x = gs::zeros({4, 1, 14, 14});
  x.narrow(2, 5, 4).narrow(3, 5, 4).copy_(gs::rand({4, 1, 4, 4}));
  CHECK(dbg::check_input_gradient(*cnn, x).empty());
  CHECK(dbg::gradcheck_layers(*cnn, x).empty());
}

namespace {
// ReLUs whose inputs sit 5e-8 above their kinks at the point the check probes: the first input the model
// sees (the check's jittered batch) is kept, and each element's ReLU reads x - that + 5e-8. The check's
// step of 1e-7 along a random direction crosses most of those kinks; a step 100x smaller crosses none.
struct AtTheKink : nn::Module {
  Tensor first;
  AtTheKink() : Module("AtTheKink") {}
  Tensor forward(const Tensor& x) override {
    if (!first.defined()) first = x.detach().clone();
    return gs::relu(x - first + 5e-8) * 3.0 + x;
  }
};
}  // namespace

TEST_CASE("M13: a unit within the step of its kink is no wrong backward (the step 100x smaller agrees)") {
  XY d = blobs(8, 3, 8);
  auto model = std::make_shared<AtTheKink>();
  CHECK(dbg::check_input_gradient(*model, d.x).empty());
  // A wrong backward at the same point still fails at both steps.
  CHECK(find(dbg::check_input_gradient(*with_square(true), d.x), "M13", dbg::Severity::Error) != nullptr);
}

// ---- train-mode forwards during an evaluation ------------------------------------------------
namespace {

enum class Eval { Correct, TrainNoGrad, TrainWithGrad };

// A hand-written loop: 2 epochs of steps, then an evaluation pass the user writes.
dbg::Report run_loop(Eval how, bool update_stats = true) {
  XY d = blobs(32, 3, 8, 9, 1.5);
  gs::manual_seed(6);
  auto model = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Linear>(8, 16), std::make_shared<MyCentering>(16, update_stats),
      std::make_shared<nn::ReLU>(), std::make_shared<MyDropout>(0.3, true), std::make_shared<nn::Linear>(16, 3));
  nn::CrossEntropyLoss loss;
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  dbg::Monitor mon(*model, opt, &loss);
  for (int epoch = 0; epoch < 2; ++epoch) {
    model->train();
    double train = 0.0;
    for (int64_t b = 0; b < 4; ++b) {
      Tensor x = d.x.narrow(0, b * 16, 16), y = d.y.narrow(0, b * 16, 16);
      opt.zero_grad();
      Tensor l = loss((*model)(x), y);
      l.backward();
      opt.step();
      mon.record_step(l.item<double>());
      train += l.item<double>() / 4;
    }
    double val = 0.0;
    if (how == Eval::Correct) {
      model->eval();
      gs::NoGradGuard ng;
      val = loss((*model)(d.x.narrow(0, 64, 32)), d.y.narrow(0, 64, 32)).item<double>();
      model->train();
    } else if (how == Eval::TrainNoGrad) {
      gs::NoGradGuard ng;
      val = loss((*model)(d.x.narrow(0, 64, 32)), d.y.narrow(0, 64, 32)).item<double>();
    } else {
      val = loss((*model)(d.x.narrow(0, 64, 32)), d.y.narrow(0, 64, 32)).item<double>();
    }
    mon.record_epoch(train, val);
  }
  mon.finish();
  return mon.report();
}

const dbg::Finding* m2_on(const dbg::Report& r, const std::string& module) {
  for (const auto& f : r.findings())
    if (f.check == "M2" && f.severity == dbg::Severity::Warning && f.module == module) return &f;
  return nullptr;
}

}  // namespace

TEST_CASE("M2: an evaluation in train mode is caught for hand-written layers, with or without no_grad") {
  for (Eval how : {Eval::TrainNoGrad, Eval::TrainWithGrad}) {
    CAPTURE(static_cast<int>(how));
    const dbg::Report r = run_loop(how);
    const dbg::Finding* bn = m2_on(r, "1 (MyCentering)");
    REQUIRE(bn != nullptr);
    // The validation data moved its running statistics: named, with the buffer.
    CHECK(bn->title.find("updated its running statistics (running_mean)") != std::string::npos);
    const dbg::Finding* dr = m2_on(r, "3 (MyDropout)");
    REQUIRE(dr != nullptr);
    CHECK(dr->title.find("evaluation pass") != std::string::npos);
    CHECK(dr->cause.find("random") != std::string::npos);
    CHECK(m2_on(r, "0 (Linear)") == nullptr);  // a layer that does not depend on the mode is not named
  }
  const dbg::Report ok = run_loop(Eval::Correct);
  CHECK_FALSE(ok.fired("M2"));
  CHECK_FALSE(ok.fired("M17"));
}

TEST_CASE("M17: a hand-written BatchNorm-like layer whose running statistics are never updated is named at eval") {
  const dbg::Report r = run_loop(Eval::Correct, /*update_stats=*/false);
  const dbg::Finding* f = find(r.findings(), "M17");
  REQUIRE(f != nullptr);
  CHECK(f->severity == dbg::Severity::Warning);
  CHECK(f->module == "1 (MyCentering)");
  CHECK(f->title.find("running_mean") != std::string::npos);
  CHECK_FALSE(r.fired("M2"));
}

TEST_CASE("M2: nn::BatchNorm1d updated by validation data in the Trainer (B05) is named") {
  XY d = blobs(64, 3, 8, 7, 1.5);
  auto data = std::make_shared<nn::TensorDataset>(d.x, d.y);
  nn::DataLoader loader(data, nn::DataLoaderOptions().batch_size(32));
  for (bool bug : {true, false}) {
    auto model = mlp(8, 16, 3);
    nn::CrossEntropyLoss loss;
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    dbg::Monitor mon(*model, opt, &loss);
    optim::TrainerOptions to = optim::TrainerOptions().epochs(2).progress(optim::Progress::Off);
    if (bug) to.bug(nn::Bug::B05);
    optim::Trainer t(*model, opt, to);
    t.set_loss([&loss](const Tensor& out, const Tensor& y) { return loss(out, y); });
    mon.attach(t);
    t.fit(loader, &loader);
    mon.finish();
    const dbg::Finding* f = m2_on(mon.report(), "3 (BatchNorm1d)");
    if (bug) {
      REQUIRE(f != nullptr);
      CHECK(f->title.find("running statistics") != std::string::npos);
    } else {
      CHECK(f == nullptr);
      CHECK_FALSE(mon.report().fired("M2"));
    }
  }
}

// ---- gradient transforms with no gradient present -------------------------------------------
TEST_CASE(
    "O5: clipping before backward (or right after zero_grad) warns, naming the call; after backward it is silent") {
  XY d = blobs(8, 3, 8);
  auto model = with_dropout(true);
  nn::CrossEntropyLoss loss;
  std::vector<gs::Warning> ws;
  gs::WarningHandlerGuard g([&ws](const gs::Warning& w) { ws.push_back(w); });
  const std::vector<Tensor> ps = model->parameters();

  model->zero_grad();
  optim::clip_grad_norm_(ps, 1.0);  // bug: nothing to clip yet
  REQUIRE(ws.size() == 1);
  CHECK(ws[0].check == "O5");
  CHECK(ws[0].where == "clip_grad_norm_");
  CHECK(ws[0].message.find("before backward()") != std::string::npos);
  optim::clip_grad_value_(ps, 0.5);
  REQUIRE(ws.size() == 2);
  CHECK(ws[1].where == "clip_grad_value_");

  ws.clear();
  loss((*model)(d.x), d.y).backward();
  optim::clip_grad_norm_(ps, 1.0);  // correct place
  optim::clip_grad_value_(ps, 0.5);
  CHECK(ws.empty());
}

TEST_CASE("O5: the monitor reports a clip before backward in a hand-written loop; the right order is silent") {
  XY d = blobs(16, 3, 8);
  for (bool bug : {true, false}) {
    auto model = with_dropout(true);
    nn::CrossEntropyLoss loss;
    optim::SGD opt(model->parameters(), optim::SGDOptions(0.05));
    dbg::Monitor mon(*model, opt, &loss);
    const std::vector<Tensor> ps = model->parameters();
    for (int s = 0; s < 3; ++s) {
      opt.zero_grad();
      Tensor l = loss((*model)(d.x), d.y);
      if (bug) optim::clip_grad_norm_(ps, 1.0);
      l.backward();
      if (!bug) optim::clip_grad_norm_(ps, 1.0);
      opt.step();
      mon.record_step(l.item<double>());
    }
    mon.finish();
    const dbg::Finding* f = find(mon.report().findings(), "O5");
    if (bug) {
      REQUIRE(f != nullptr);
      CHECK(f->severity == dbg::Severity::Warning);
      CHECK(f->title.find("clip_grad_norm_ ran with no gradient present") == 0);
      CHECK(f->module == "clip_grad_norm_");
    } else {
      CHECK(f == nullptr);
    }
  }
}

// ---- a loss of the user's own ---------------------------------------------------------------
namespace {
// Cross-entropy written by hand as an nn::Loss subclass.
class MyCrossEntropy : public nn::Loss {
 public:
  MyCrossEntropy() : Loss("MyCrossEntropy") {}
  Tensor forward(const Tensor& logits, const Tensor& y) override {
    return gs::nn::functional::nll_loss(gs::log_softmax(logits, 1), y);
  }
  nn::Reduction reduction() const override { return nn::Reduction::Mean; }
};
}  // namespace

TEST_CASE("L2: a hand-written class-index loss gets the double-softmax check; raw logits are silent") {
  XY d = blobs(16, 3, 8);
  for (bool softmax_head : {true, false}) {
    gs::manual_seed(7);
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 16), std::make_shared<nn::ReLU>(),
                                                  std::make_shared<nn::Linear>(16, 3));
    if (softmax_head) model->push_back(std::make_shared<nn::Softmax>(1));
    MyCrossEntropy loss;
    optim::SGD opt(model->parameters(), optim::SGDOptions(0.05));
    dbg::Monitor mon(*model, opt, &loss);
    for (int s = 0; s < 2; ++s) {
      opt.zero_grad();
      Tensor l = loss((*model)(d.x), d.y);
      l.backward();
      opt.step();
      mon.record_step(l.item<double>());
    }
    mon.finish();
    const dbg::Finding* f = find(mon.report().findings(), "L2");
    if (softmax_head) {
      REQUIRE(f != nullptr);
      CHECK(f->severity >= dbg::Severity::Warning);
    } else {
      CHECK(f == nullptr);
    }
  }
}
