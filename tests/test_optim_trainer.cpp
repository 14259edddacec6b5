// Tests for optim/trainer: a small MLP learns the spirals, two runs with the
// same seed are identical, the metric files, callbacks, stopping, evaluation,
// schedulers and a regression loss.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/ops.h"
#include "core/warning.h"
#include "nn/nn.h"
#include "optim/optim.h"

namespace nn = gs::nn;
namespace optim = gs::optim;
namespace fs = std::filesystem;
using gs::Tensor;

namespace {

std::shared_ptr<nn::Sequential> mlp(int64_t in, int64_t hidden, int64_t out, double dropout = 0.0) {
  auto net =
      std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(in, hidden), std::make_shared<nn::ReLU>(),
                                       std::make_shared<nn::Linear>(hidden, hidden), std::make_shared<nn::ReLU>());
  if (dropout > 0) net->push_back(std::make_shared<nn::Dropout>(dropout));
  net->push_back(std::make_shared<nn::Linear>(hidden, out));
  return net;
}

// One seeded run on the spirals: the losses of every step.
std::vector<double> spiral_run(uint64_t seed, int epochs, double dropout = 0.0) {
  gs::manual_seed(seed);
  auto data = nn::make_spirals(60, 3, 0.1, 1);
  auto net = mlp(2, 32, 3, dropout);
  optim::Adam opt(net->parameters(), optim::AdamOptions(0.01));
  nn::DataLoader loader(data, nn::DataLoaderOptions().batch_size(16).shuffle(true).seed(seed));
  optim::Trainer t(*net, opt, optim::TrainerOptions().epochs(epochs).progress(optim::Progress::Off));
  return t.fit(loader).step_losses;
}

std::vector<std::string> lines(const fs::path& p) {
  std::ifstream f(p);
  std::vector<std::string> out;
  for (std::string l; std::getline(f, l);) out.push_back(l);
  return out;
}

}  // namespace

TEST_CASE("Trainer: a small MLP learns the 3-class spirals (>= 0.95 accuracy in a few seconds)") {
  const auto t0 = std::chrono::steady_clock::now();
  gs::manual_seed(0);
  auto data = nn::make_spirals(100, 3, 0.1, 0);
  auto net = mlp(2, 64, 3);
  optim::Adam opt(net->parameters(), optim::AdamOptions(0.01));
  nn::DataLoader train(data, nn::DataLoaderOptions().batch_size(32).shuffle(true).seed(0));
  nn::DataLoader eval(data, nn::DataLoaderOptions().batch_size(128));
  optim::FitResult r =
      optim::fit(*net, opt, train, &eval, optim::TrainerOptions().epochs(80).progress(optim::Progress::Off));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("spirals: accuracy " << r.last().val_accuracy << " after " << r.epochs.size() << " epochs, " << secs << " s");
  CHECK(r.epochs.size() == 80);
  CHECK(r.steps == 80 * 10);
  CHECK(r.last().val_accuracy >= 0.95);
  CHECK(r.last().train_loss < r.epochs.front().train_loss);
  CHECK(secs < 60.0);         // ~0.2 s on an idle core; generous for a loaded CI machine
  CHECK(net->is_training());  // evaluate() restored the mode
}

TEST_CASE("Trainer: the same seed gives the identical loss sequence; another seed does not") {
  std::vector<double> a = spiral_run(3, 3, 0.2), b = spiral_run(3, 3, 0.2), c = spiral_run(4, 3, 0.2);
  REQUIRE(a.size() == 36);
  CHECK(a == b);  // bit for bit, dropout included
  CHECK(a != c);
}

TEST_CASE("Trainer: steps.csv and epochs.jsonl in the run directory") {
  const fs::path dir = fs::temp_directory_path() / ("gs_trainer_run_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  gs::manual_seed(1);
  auto data = nn::make_blobs(20, 2, 2, 0.5, 1);  // 40 rows
  auto net = mlp(2, 8, 2);
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  optim::StepLR sched(opt, 1, 0.5);
  nn::DataLoader loader(data, nn::DataLoaderOptions().batch_size(16).shuffle(true));
  optim::Trainer t(*net, opt, optim::TrainerOptions().epochs(2).run_dir(dir.string()).progress(optim::Progress::Off));
  t.set_scheduler(&sched);
  optim::FitResult r = t.fit(loader, &loader);

  std::vector<std::string> steps = lines(dir / "steps.csv");
  REQUIRE(steps.size() == 1 + 6);  // header + 3 batches x 2 epochs
  CHECK(steps[0] == "step,epoch,loss,accuracy,lr");
  CHECK(steps[1].rfind("1,1,", 0) == 0);
  CHECK(steps[6].rfind("6,2,", 0) == 0);
  std::vector<std::string> epochs = lines(dir / "epochs.jsonl");
  REQUIRE(epochs.size() == 2);
  CHECK(epochs[0].find("\"epoch\":1") != std::string::npos);
  CHECK(epochs[0].find("\"val_accuracy\":") != std::string::npos);
  CHECK(epochs[1].find("\"lr\":0.05,") != std::string::npos);  // StepLR halved it after epoch 1
  CHECK(r.epochs[0].lr == doctest::Approx(0.1));
  CHECK(r.epochs[1].lr == doctest::Approx(0.05));
  CHECK(opt.lr() == doctest::Approx(0.025));
  fs::remove_all(dir);
}

TEST_CASE("Trainer: callbacks, request_stop and max_steps") {
  gs::manual_seed(2);
  auto data = nn::make_blobs(32, 2, 2, 0.5, 2);  // 64 rows -> 4 batches of 16
  auto net = mlp(2, 8, 2);
  optim::Adam opt(net->parameters());
  nn::DataLoader loader(data, nn::DataLoaderOptions().batch_size(16));
  optim::Trainer t(*net, opt, optim::TrainerOptions().epochs(5).progress(optim::Progress::Off));
  std::vector<int64_t> steps, epochs;
  t.on_step([&](const optim::StepInfo& s) {
    steps.push_back(s.step);
    CHECK(s.batch != nullptr);
    CHECK(s.output.shape() == gs::Shape{16, 2});
    CHECK(s.batches == 4);
    CHECK(s.lr == doctest::Approx(1e-3));
    CHECK(s.accuracy >= 0.0);
  });
  size_t id = t.on_epoch([&](const optim::EpochInfo& e) {
    epochs.push_back(e.epoch);
    if (e.epoch == 2) t.request_stop();
  });
  optim::FitResult r = t.fit(loader);
  CHECK(r.stopped_early);
  CHECK(epochs == std::vector<int64_t>{1, 2});
  CHECK(steps.size() == 8);
  CHECK(steps.back() == 8);

  // A second fit continues the epoch and step counts.
  t.remove_callback(id);
  epochs.clear();
  optim::Trainer t2(*net, opt, optim::TrainerOptions().epochs(5).max_steps(6).progress(optim::Progress::Off));
  optim::FitResult r2 = t2.fit(loader);
  CHECK(r2.steps == 6);
  CHECK(r2.stopped_early);
  CHECK(r2.epochs.size() == 2);
}

TEST_CASE("evaluate: eval mode, no graph, loss and accuracy, loader untouched") {
  gs::manual_seed(5);
  auto data = nn::make_blobs(10, 3, 2, 0.1, 5, 10.0);
  auto net = mlp(2, 8, 3, 0.5);
  nn::DataLoader loader(data, nn::DataLoaderOptions().batch_size(7).shuffle(true));
  bool saw_graph = false, saw_training = false;
  net->register_forward_hook([&](nn::Module& m, const Tensor&, const Tensor& out) {
    saw_graph = saw_graph || out.requires_grad();
    saw_training = saw_training || m.is_training();
  });
  optim::EvalResult a = optim::evaluate(*net, loader), b = optim::evaluate(*net, loader);
  CHECK_FALSE(saw_graph);
  CHECK_FALSE(saw_training);
  CHECK(net->is_training());
  CHECK(loader.epoch() == 0);
  CHECK(a.examples == 30);
  CHECK(a.loss == b.loss);  // dropout off: deterministic
  CHECK(a.accuracy >= 0.0);
  CHECK(a.accuracy <= 1.0);
  // The loss matches a direct computation on all rows.
  net->eval();
  gs::NoGradGuard ng;
  double direct = nn::functional::cross_entropy((*net)(data->x()), data->y()).item<double>();
  CHECK(a.loss == doctest::Approx(direct).epsilon(1e-5));
  CHECK(optim::accuracy(gs::tensor({1, 0, 0, 1}, {2, 2}), gs::tensor(std::vector<int64_t>{0, 0}, {2})) == 0.5);
}

TEST_CASE("Trainer: regression with an MSE loss (no accuracy) finds the true weights") {
  gs::manual_seed(6);
  nn::RegressionSet rs = nn::make_linear_regression(256, 3, 0.01, 6);
  auto lin = std::make_shared<nn::Linear>(3, 1);
  optim::SGD opt(lin->parameters(), optim::SGDOptions(0.1));
  nn::DataLoader loader(rs.data, nn::DataLoaderOptions().batch_size(32).shuffle(true));
  optim::Trainer t(*lin, opt, optim::TrainerOptions().epochs(30).progress(optim::Progress::Off));
  t.set_loss([](const Tensor& out, const Tensor& y) { return nn::functional::mse_loss(out, y); });
  optim::FitResult r = t.fit(loader, &loader);
  CHECK(std::isnan(r.last().train_accuracy));
  CHECK(std::isnan(r.last().val_accuracy));
  CHECK(r.last().val_loss < 1e-3);
  CHECK(gs::allclose(lin->weight.detach().t(), rs.true_weight, 0.0, 0.02));
}

TEST_CASE("Trainer: mixed precision (autocast, a GradScaler, unscale_ before clipping; B36 clips first)") {
  auto run = [](const optim::TrainerOptions& base, bool b36, std::vector<gs::Warning>& ws) {
    gs::manual_seed(3);
    auto data = nn::make_spirals(60, 3, 0.1, 2);
    auto net = mlp(2, 32, 3);
    optim::Adam opt(net->parameters(), optim::AdamOptions(0.01));
    nn::DataLoader loader(data, nn::DataLoaderOptions().batch_size(16).shuffle(true).seed(3));
    optim::GradScaler scaler;
    optim::TrainerOptions to = base;
    to.epochs(15).progress(optim::Progress::Off).grad_scaler(&scaler).clip_grad_norm(1.0);
    if (b36) to.bug(nn::Bug::B36);
    gs::WarningHandlerGuard guard([&](const gs::Warning& w) { ws.push_back(w); });
    optim::Trainer t(*net, opt, to);
    // The forward runs under autocast: the first Linear's output is float16.
    gs::DType seen = gs::kFloat32;
    t.on_step([&](const optim::StepInfo& s) { seen = s.output.dtype(); });
    t.fit(loader);
    CHECK(seen == (base.autocast() ? *base.autocast() : gs::kFloat32));
    CHECK(scaler.get_scale() > 1.0);  // it scaled the loss and did not collapse
    return optim::evaluate(*net, loader).accuracy;
  };
  std::vector<gs::Warning> clean_ws, bug_ws, fp32_ws;
  const double acc = run(optim::TrainerOptions().autocast(gs::kFloat16), false, clean_ws);
  const double acc32 = run(optim::TrainerOptions(), false, fp32_ws);  // the same loop in float32
  CHECK(acc32 > 0.7);
  CHECK(acc > acc32 - 0.05);
  CHECK(clean_ws.empty());  // unscale_ came before clip_grad_norm_
  run(optim::TrainerOptions().autocast(gs::kFloat16), true, bug_ws);
  REQUIRE(bug_ws.size() == 1);  // once per clipping function
  CHECK(bug_ws[0].check == "O10");
  CHECK(bug_ws[0].where == "clip_grad_norm_");
  // Only float16 and bfloat16 autocast.
  gs::manual_seed(3);
  auto net = mlp(2, 8, 3);
  optim::Adam opt(net->parameters());
  CHECK_THROWS_WITH_AS(optim::Trainer(*net, opt, optim::TrainerOptions().autocast(gs::kFloat64)),
                       doctest::Contains("autocast runs in float16 or bfloat16"), gs::Error);
}
