// Verdicts a check judges again with what the run showed, each beside the fault it resembles: a
// weight grown to its solution's scale under a settled loss against one grown under an unstable loss;
// a gradient zero at the gate (randomness off) but alive in training against one zero in both; rows
// with one extreme standardised entry against rows never scaled; a near-constant target column under a
// sigmoid output against targets far from the output; BatchNorm statistics recomputed after a reset
// against an evaluation in training mode; a loop whose reported accuracy pairs predictions with the
// wrong labels against one that does not; and classes imbalanced but recalled evenly.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include <gradsleuth.h>

#include "debug/checks/run_check.h"
#include "debug_test_util.h"
#include "diagnosis_test_util.h"

using namespace gradsleuth;
using dtest::expect_clean;
using dtest::expect_lead;
using dtest::Split;

namespace {

debug::Finding growth_finding() {
  debug::Finding f;
  f.check = "O3";
  f.severity = debug::Severity::Warning;
  f.parameter = "readout.weight";
  f.title = "the weight norm of readout.weight grew 41x (0.2 -> 8.2) between steps 1 and 900";
  f.evidence = {{"last / first weight norm", 41.0, "> 10 warns"}};
  return f;
}

debug::Finding zero_gradient_finding(const char* check, debug::Kind kind) {
  debug::Finding f;
  f.check = check;
  f.kind = kind;
  f.severity = debug::Severity::Warning;
  f.parameter = "lv.weight";
  f.title = "the gradient of lv.weight is zero";
  return f;
}

bool fires(const debug::RunReport& r, const char* check) {
  return dtest::any_finding(r, [&](const debug::Finding& f) { return f.check == check && f.fires(); });
}

struct BnNet : nn::Module {
  std::shared_ptr<nn::Linear> a = register_module("a", std::make_shared<nn::Linear>(6, 32));
  std::shared_ptr<nn::BatchNorm1d> bn = register_module("bn", std::make_shared<nn::BatchNorm1d>(32));
  std::shared_ptr<nn::Linear> b = register_module("b", std::make_shared<nn::Linear>(32, 3));
  BnNet() : Module("BnNet") {}
  Tensor forward(const Tensor& x) override { return (*b)(relu((*bn)((*a)(x)))); }
};

}  // namespace

TEST_CASE("O3's weight growth: info under a loss that settled, a warning under one that was unstable or still worse") {
  const std::vector<double> settled = {0.9, 0.5, 0.35, 0.3, 0.29}, rising = {0.9, 0.5, 0.35, 0.5, 0.7};
  for (const int c : {0, 1, 2}) {
    CAPTURE(c);
    debug::Report r;
    r.add(growth_finding());
    debug::revise_weight_growth(r, /*loss_unstable=*/c == 1, c == 2 ? rising : settled);
    CHECK(r.findings()[0].severity == (c == 0 ? debug::Severity::Info : debug::Severity::Warning));
  }
  // A validation loss 8% above its best at the end, with the validation accuracy at its best: a model
  // growing more confident as it gets more right (Lion's sign steps on a Fashion-MNIST MLP); with the
  // accuracy past its best, the warning stays.
  const std::vector<double> wobbly = {0.67, 0.54, 0.46, 0.41, 0.39, 0.425};
  for (const bool at_best : {true, false}) {
    CAPTURE(at_best);
    debug::Report r;
    r.add(growth_finding());
    const std::vector<double> acc = {0.76, 0.81, 0.83, 0.845, 0.852, at_best ? 0.864 : 0.84};
    debug::revise_weight_growth(r, false, wobbly, {}, acc);
    CHECK(r.findings()[0].severity == (at_best ? debug::Severity::Info : debug::Severity::Warning));
  }
}

TEST_CASE("a gradient zero at the gate: info when the run's records show it alive, kept when they show it zero") {
  for (const bool alive : {true, false}) {
    CAPTURE(alive);
    debug::TrainingHistory h;
    std::vector<std::pair<int64_t, double>> series;
    for (int64_t s = 1; s <= 20; s += 2) series.emplace_back(s, alive ? 0.03 : 0.0);
    h.grad_norms.emplace_back("lv.weight", series);
    debug::Report gate;
    gate.add(zero_gradient_finding("O1", debug::Kind::GradientVanishing));
    debug::revise_gradient_missing(gate, h);
    CHECK(gate.findings()[0].severity == (alive ? debug::Severity::Info : debug::Severity::Warning));
  }
}

TEST_CASE("D5's rows out of range: one extreme standardised entry is silent; a row never scaled warns") {
  for (const bool raw : {false, true}) {
    CAPTURE(raw);
    manual_seed(3);
    debug::RowRangeTracker t;
    for (int64_t step = 1; step <= 8; ++step) {
      Tensor x = randn({32, 100});
      if (step == 5) {
        std::vector<float> v = x.contiguous().to_vector<float>();
        if (raw)
          for (int64_t j = 0; j < 100; ++j) v[static_cast<size_t>(7 * 100 + j)] = 40.0f + 2.0f * static_cast<float>(j);
        else
          v[7 * 100 + 3] = 83.0f;  // a near-constant pixel standardised: one entry far out
        x = tensor(v, {32, 100});
      }
      t.record(x, step);
    }
    const std::vector<debug::Finding> fs = t.findings();
    CHECK(dtest::fires(fs) == raw);
  }
}

TEST_CASE("L4's start on regression targets: a near-constant column under a sigmoid is silent; targets far off warn") {
  manual_seed(4);
  const int64_t N = 64, k = 50;
  // Images in [0, 1] whose last column is 0 in all but one row; a sigmoid output of 0.5 everywhere.
  Tensor y = rand({N, k});
  std::vector<float> v = y.contiguous().to_vector<float>();
  for (int64_t i = 0; i < N; ++i) v[static_cast<size_t>(i * k + k - 1)] = i == 3 ? 0.02f : 0.0f;
  y = tensor(v, {N, k});
  const Tensor out = full({N, k}, 0.5);
  CHECK_FALSE(dtest::fires(debug::check_initial_outputs(out, y)));
  CHECK(dtest::fires(debug::check_initial_outputs(out, y * 10.0 + 40.0)));  // targets around 45
}

TEST_CASE("L4's start on 0/1 targets: untrained logits that all lie in [0, 1] are logits under BCEWithLogitsLoss") {
  // Small logits over ReLU features (0.02-0.12, sigmoid about 0.52) against targets that are 1 in 47% of
  // rows: no lean under BCEWithLogitsLoss. Read as probabilities (BCELoss's, or a loss function's when
  // every output lies in [0, 1]) the same numbers predict a 1 with 0.07 on average: a lean.
  manual_seed(5);
  const int64_t N = 64;
  const Tensor out = rand({N, 1}) * 0.1 + 0.02;
  const Tensor y = lt(arange(N, kFloat32), 30.0).to(kFloat32).unsqueeze(1);
  CHECK_FALSE(dtest::fires(debug::check_initial_outputs(out, y, {}, "BCEWithLogitsLoss")));
  CHECK(dtest::fires(debug::check_initial_outputs(out, y, {}, "BCELoss")));
  CHECK(dtest::fires(debug::check_initial_outputs(out, y)));
}

TEST_CASE("L4's start on rows of class probabilities under CrossEntropyLoss: the outputs are logits") {
  // A label distribution (Gaussian over 81 bins, sigma 2, around a target in [10, 70]) as the target of
  // cross-entropy; untrained logits of about -0.2 in every column. Read as a regression, the shift is
  // many target stds from the targets' mean (0.012 a bin); as logits it changes no probability.
  manual_seed(6);
  const int64_t N = 64, K = 81;
  std::vector<float> d(static_cast<size_t>(N * K));
  for (int64_t i = 0; i < N; ++i) {
    const double mu = 10.0 + 60.0 * static_cast<double>(i) / static_cast<double>(N - 1);
    double sum = 0.0;
    for (int64_t k = 0; k < K; ++k) sum += std::exp(-0.125 * (k - mu) * (k - mu));
    for (int64_t k = 0; k < K; ++k)
      d[static_cast<size_t>(i * K + k)] = static_cast<float>(std::exp(-0.125 * (k - mu) * (k - mu)) / sum);
  }
  const Tensor y = tensor(d, {N, K});
  Tensor out = randn({N, K}) * 0.05 - 0.2;
  CHECK_FALSE(dtest::fires(debug::check_initial_outputs(out, y, {}, "CrossEntropyLoss")));
  CHECK(dtest::fires(debug::check_initial_outputs(out, y)));  // a loss of the user's own: read as a regression
  // A final layer that starts leaning on the first bins (+6 on bins 0-4) is a start far from the targets.
  std::vector<float> lean(static_cast<size_t>(K), 0.0f);
  for (int64_t k = 0; k < 5; ++k) lean[static_cast<size_t>(k)] = 6.0f;
  out = add(out, tensor(lean, {1, K}));
  CHECK(dtest::fires(debug::check_initial_outputs(out, y, {}, "CrossEntropyLoss")));
}

TEST_CASE("BatchNorm statistics reset and recomputed in training mode under no_grad (SWA's update_bn): M2 is info") {
  for (const bool reset : {true, false}) {
    CAPTURE(reset);
    manual_seed(5);
    const Split d = dtest::split(3, 2.0);
    auto model = std::make_shared<BnNet>();
    nn::CrossEntropyLoss ce;
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    debug::Session dbg(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    for (int e = 0; e < 6; ++e) {
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        Tensor l = ce((*model)(b.x), b.y);
        l.backward();
        opt.step();
      }
      dbg.epoch();
    }
    // The statistics recomputed for the final weights (or, without the reset, a pass in training mode).
    if (reset) model->bn->reset_running_stats();
    {
      NoGradGuard ng;
      model->train();
      for (const nn::Batch& b : *d.train) (*model)(b.x);
    }
    model->eval();
    const debug::RunReport r = dbg.finish();
    CHECK_MESSAGE(fires(r, "M2") == !reset, r.str(true));
  }
}

TEST_CASE("M2 judges the watched model's layers: another model's BatchNorm in training mode under no_grad is silent") {
  // The same pass (training mode, no_grad, no reset) on a second model (an averaged copy, a teacher),
  // against the watched model itself.
  for (const bool other : {true, false}) {
    CAPTURE(other);
    manual_seed(5);
    const Split d = dtest::split(3, 2.0);
    auto model = std::make_shared<BnNet>();
    auto copy = std::make_shared<BnNet>();
    nn::CrossEntropyLoss ce;
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    debug::Session dbg(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    for (int e = 0; e < 6; ++e) {
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        Tensor l = ce((*model)(b.x), b.y);
        l.backward();
        opt.step();
      }
      dbg.epoch();
    }
    nn::Module& pass = other ? static_cast<nn::Module&>(*copy) : static_cast<nn::Module&>(*model);
    {
      NoGradGuard ng;
      pass.train();
      for (const nn::Batch& b : *d.train) pass(b.x);
    }
    model->eval();
    const debug::RunReport r = dbg.finish();
    CHECK_MESSAGE(fires(r, "M2") == !other, r.str(true));
  }
}

TEST_CASE("a loop whose validation accuracy pairs predictions with another pass's labels: L9 leads; paired, clean") {
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    manual_seed(6);
    const dtest::XY all = dtest::blobs(200, 3, 6, 3, 2.0);
    const Split d = dtest::loaders(all.x.narrow(0, 0, 480), all.y.narrow(0, 0, 480), all.x.narrow(0, 480, 120),
                                   all.y.narrow(0, 480, 120));
    // The labels' pass: the validation rows in another order (a shuffled loader read twice).
    nn::DataLoader other(std::make_shared<nn::TensorDataset>(all.x.narrow(0, 480, 120), all.y.narrow(0, 480, 120)),
                         nn::DataLoaderOptions().batch_size(40).shuffle(true).seed(99));
    nn::DataLoader same(std::make_shared<nn::TensorDataset>(all.x.narrow(0, 480, 120), all.y.narrow(0, 480, 120)),
                        nn::DataLoaderOptions().batch_size(40));
    auto model = std::make_shared<dtest::Mlp>();
    nn::CrossEntropyLoss ce;
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    debug::Session dbg(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()});
    for (int e = 0; e < 8; ++e) {
      double tl = 0;
      int64_t nb = 0;
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        Tensor l = ce((*model)(b.x), b.y);
        l.backward();
        opt.step();
        tl += l.item<double>();
        ++nb;
      }
      model->eval();
      std::vector<int64_t> pred, truth;
      double vl = 0;
      {
        NoGradGuard ng;
        for (const nn::Batch& b : same) {
          const Tensor o = (*model)(b.x);
          vl += ce(o, b.y).item<double>() / 3.0;
          for (int64_t p : argmax(o, 1).to_vector<int64_t>()) pred.push_back(p);
          if (!bug)
            for (int64_t t : b.y.to_vector<int64_t>()) truth.push_back(t);
        }
        if (bug)
          for (const nn::Batch& b : other)
            for (int64_t t : b.y.to_vector<int64_t>()) truth.push_back(t);
      }
      model->train();
      int64_t hit = 0;
      for (size_t i = 0; i < pred.size(); ++i) hit += pred[i] == truth[i];
      dbg.epoch(tl / static_cast<double>(nb), vl, static_cast<double>(hit) / static_cast<double>(pred.size()));
    }
    const debug::RunReport r = dbg.finish();
    if (bug) {
      REQUIRE_MESSAGE(dtest::first_of(r, "L9", debug::Kind::ReportedAccuracyLow) != nullptr, r.str(true));
      expect_lead(r, "L9", "metric-misaligned");
    } else {
      expect_clean(r);
    }
  }
}

TEST_CASE("classes imbalanced 11:1 and recalled evenly by the trained model: D3's count warning is info") {
  manual_seed(7);
  // Three well-separated blobs of 500, 160 and 45 rows.
  const dtest::XY all = dtest::blobs(500, 3, 6, 7, 0.5);
  std::vector<int64_t> keep;
  const std::vector<int64_t> y = all.y.to_vector<int64_t>();
  int64_t seen[3] = {0, 0, 0};
  const int64_t quota[3] = {500, 160, 45};
  for (size_t i = 0; i < y.size(); ++i)
    if (seen[y[i]] < quota[y[i]]) keep.push_back(static_cast<int64_t>(i)), ++seen[y[i]];
  const Tensor idx = tensor(keep, {static_cast<int64_t>(keep.size())});
  const Tensor x = all.x.index_select(0, idx), yy = all.y.index_select(0, idx);
  // Shuffled once so both splits hold every class; standardised by the training split's statistics.
  const Tensor perm = randperm(x.size(0));
  const Tensor xs = x.index_select(0, perm), ys = yy.index_select(0, perm);
  const int64_t n = xs.size(0), ntr = 455;
  const Tensor xtr = xs.narrow(0, 0, ntr), mu = mean(xtr, {0}, true), sd = xtr.std({0}, true, true);
  const Split d = dtest::loaders((xtr - mu) / sd, ys.narrow(0, 0, ntr), (xs.narrow(0, ntr, n - ntr) - mu) / sd,
                                 ys.narrow(0, ntr, n - ntr));
  auto model = std::make_shared<dtest::Mlp>();
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 10);
  const debug::Finding* counts = dtest::first_of(r, "D3", debug::Kind::ClassCounts);
  REQUIRE_MESSAGE(counts != nullptr, r.str(true));
  CHECK_MESSAGE(counts->severity == debug::Severity::Info, r.str(true));
  CHECK(counts->title.find("recalls every class evenly") != std::string::npos);
  expect_clean(r);
}

TEST_CASE(
    "D3: an imbalance whose rare classes are recalled as well as the common ones is info, one hard class aside; the "
    "rarest recalled well below the others warns") {
  // Ten classes, 300 down to 20 training labels; validation recall per class from the trained model.
  std::vector<int64_t> labels;
  const int64_t counts[10] = {300, 260, 200, 150, 100, 60, 50, 40, 30, 20};
  for (int64_t c = 0; c < 10; ++c)
    for (int64_t k = 0; k < counts[c]; ++k) labels.push_back(c);
  const Tensor y = tensor(labels, {static_cast<int64_t>(labels.size())});
  const std::vector<int64_t> examples(10, 100);
  auto judged = [&](const std::vector<int64_t>& correct) {
    debug::Report data;
    for (const debug::Finding& f : debug::check_label_distribution(y, 10)) data.add(f);
    REQUIRE(data.fired("D3"));
    const std::vector<debug::Finding> recall = debug::check_class_errors(examples, correct);
    debug::revise_class_imbalance(data, recall);
    return data;
  };
  // One hard class (6, as Fashion-MNIST's shirts) at 35%, the rest 75-95% whatever their count: info.
  const debug::Report hard = judged({95, 94, 78, 80, 82, 90, 35, 88, 85, 92});
  CHECK_FALSE(hard.fired("D3"));
  // The rare classes recalled far less than the common ones (the imbalance cost them): the warning stays.
  const debug::Report cost = judged({96, 95, 90, 88, 85, 60, 55, 50, 45, 40});
  CHECK(cost.fired("D3"));
  // Every class at 0.75x the others' mean or more, but the rarest (20 training rows) at 70% against 86%: 4.7
  // standard errors below, the imbalance cost it, and the warning stays. At 80% (0.93x) it is info.
  const debug::Report rarest = judged({95, 94, 78, 80, 82, 90, 85, 88, 85, 70});
  CHECK(rarest.fired("D3"));
  const debug::Finding* f = nullptr;
  for (const debug::Finding& g : rarest.findings())
    if (g.fires() && g.is("D3", debug::Kind::ClassCounts)) f = &g;
  REQUIRE(f != nullptr);
  CHECK(dtest::ev(*f, "rarest class's recall / the others' mean (trained model, validation)") ==
        doctest::Approx(70.0 / (777.0 / 9.0)).epsilon(1e-3));
  CHECK_FALSE(judged({95, 94, 78, 80, 82, 90, 85, 88, 85, 80}).fired("D3"));
}

TEST_CASE(
    "O8's rate below the range before training: info when the run's rate rose (a warm-up from 0), kept when flat") {
  for (const bool warmup : {true, false}) {
    CAPTURE(warmup);
    debug::Finding f;
    f.check = "O8";
    f.kind = debug::Kind::LrBelowRange;
    f.severity = debug::Severity::Warning;
    f.evidence = {{"learning rate", 0.0, ""}};
    debug::Report gate;
    gate.add(f);
    std::vector<double> lrs;
    for (int s = 0; s < 100; ++s) lrs.push_back(warmup ? 2e-3 * std::min(1.0, s / 50.0) : 0.0);
    debug::revise_lr_range(gate, lrs);
    CHECK(gate.findings()[0].severity == (warmup ? debug::Severity::Info : debug::Severity::Warning));
  }
}

TEST_CASE("O6's updates too small: info for a trained start whose validation loss held, kept for a fresh one") {
  for (const bool trained : {true, false}) {
    CAPTURE(trained);
    debug::Finding f;
    f.check = "O6";
    f.kind = debug::Kind::UpdatesTooSmall;
    f.severity = debug::Severity::Warning;
    debug::Report r;
    r.add(f);
    debug::revise_small_updates(r, trained, {0.47, 0.46, 0.45, 0.44});
    CHECK(r.findings()[0].severity == (trained ? debug::Severity::Info : debug::Severity::Warning));
  }
}

TEST_CASE("M9: an output layer started 100x small is info; a hidden layer started so is a warning") {
  for (const bool head : {true, false}) {
    CAPTURE(head);
    manual_seed(8);
    auto m = std::make_shared<dtest::Mlp>();
    {
      NoGradGuard ng;
      (head ? m->fc3 : m->fc2)->weight.mul_(0.01);
    }
    const std::vector<debug::Finding> fs = debug::check_initialisation(*m);
    REQUIRE(fs.size() == 1);
    CHECK(fs[0].severity == (head ? debug::Severity::Info : debug::Severity::Warning));
  }
}

TEST_CASE("M14: a loss that leaves class 0 out (ignore_index on a class the labels use) is blind to labels") {
  for (const bool blind : {true, false}) {
    CAPTURE(blind);
    manual_seed(9);
    const dtest::XY all = dtest::blobs(40, 3, 6, 9, 2.0);
    auto m = std::make_shared<dtest::Mlp>();
    nn::CrossEntropyLoss ce(nn::CrossEntropyLossOptions().ignore_index(blind ? 0 : -100));
    const std::vector<debug::Finding> fs = debug::overfit_one_batch(
        *m, all.x.narrow(0, 0, 32), all.y.narrow(0, 0, 32), [&](const Tensor& o, const Tensor& y) { return ce(o, y); });
    REQUIRE(fs.size() == 1);
    CHECK(fs[0].is("M14", debug::Kind::LossBlindToLabels) == blind);
  }
}

namespace {

// The warning confirm_rows_cancel tests: a batch loss far below its rows' own (check_rows_cancel's).
debug::Finding rows_cancel_warning() {
  debug::Finding f;
  f.check = "L6";
  f.kind = debug::Kind::RowsCancel;
  f.severity = debug::Severity::Warning;
  return f;
}

}  // namespace

TEST_CASE("L6's rows-cancel: a weighted mean of squares is info; |mean(p - y)| stays a warning") {
  for (const bool weighted : {true, false}) {
    CAPTURE(weighted);
    manual_seed(10);
    auto m = std::make_shared<dtest::Regressor>();
    const Tensor x = randn({32, 6}), y = randn({32, 1}) * 3.0;
    const Tensor w = exp(randn({32, 1}) * 2.0);  // sample weights over orders of magnitude
    debug::LossFunction loss = [&](const Tensor& p, const Tensor& t) {
      return weighted ? sum(w * square(p - t)) / sum(w) : abs(mean(p - t));
    };
    std::vector<debug::Finding> found{rows_cancel_warning()};
    debug::confirm_rows_cancel(found, *m, x, y, loss);
    CHECK(found[0].severity == (weighted ? debug::Severity::Info : debug::Severity::Warning));
  }
}

TEST_CASE("L6's rows-cancel: a non-negative PU risk, whose terms subtract by design, is info") {
  // Kiryo et al.'s nnPU risk with a sigmoid loss and the class prior pi: pi R_p+ + max(0, R_u- - pi R_p-).
  // A row alone scores differently from the batch, without errors cancelling: the targets given to other
  // rows move the loss. Labelled positives are the rows the model scores highest (a trained model's).
  manual_seed(11);
  auto m = std::make_shared<dtest::Regressor>();
  const Tensor x = randn({64, 6}) * 3.0;
  Tensor scores;
  {
    NoGradGuard ng;
    scores = (*m)(x).detach();
  }
  const Tensor y = gt(scores, scores.mean().item<double>()).to(kFloat32);
  const double pi = 0.4;
  debug::LossFunction nnpu = [pi](const Tensor& p, const Tensor& t) {
    const Tensor g = p * 5.0, u = 1.0 - t;
    const Tensor np = maximum(sum(t), 1.0), nu = maximum(sum(u), 1.0);
    const Tensor rp_pos = sum(t * sigmoid(-g)) / np, rp_neg = sum(t * sigmoid(g)) / np;
    const Tensor ru_neg = sum(u * sigmoid(g)) / nu;
    return pi * rp_pos + maximum(ru_neg - pi * rp_neg, 0.0);
  };
  std::vector<debug::Finding> found{rows_cancel_warning()};
  debug::confirm_rows_cancel(found, *m, x, y, nnpu);
  CHECK_MESSAGE(found[0].severity == debug::Severity::Info, found[0].str());
  CHECK(dtest::ev(found[0], "the batch's loss with its targets' rows rolled by half the batch") > 0.0);
}

TEST_CASE("L1 stuck below what the model reaches with its inputs zeroed (M15) is info; at that level it warns") {
  // A survival model's partial likelihood: 4.62 at the start, 4.25 at the end, where M15's probe with
  // zeroed inputs reached 4.67 on held-out rows and 4.37 with the real ones.
  auto stuck = [](double last) {
    debug::Finding f;
    f.check = "L1";
    f.kind = debug::Kind::LossStuck;
    f.severity = debug::Severity::Warning;
    f.title = "the training loss is stuck";
    f.evidence = {{"median of the first 64 steps", 4.624, ""}, {"last window median", last, ""}};
    debug::Report r;
    r.add(f);
    return r;
  };
  debug::Report gate;
  debug::Finding m15;
  m15.check = "M15";
  m15.severity = debug::Severity::Info;
  m15.title = "the model uses its inputs: held-out loss 4.366 with real inputs vs 4.673 with zeroed inputs";
  m15.evidence = {{"held-out loss, real inputs (the lowest of the run)", 4.366, ""},
                  {"held-out loss, zeroed inputs (the lowest of the run)", 4.673, ""}};
  gate.add(m15);
  debug::Report below = stuck(4.253);
  debug::revise_loss_stuck_by_baseline(below, gate);
  CHECK_FALSE(below.fired("L1"));
  // At the zeroed model's level (a classifier stuck at its classes' marginal): still stuck.
  debug::Report level = stuck(4.60);
  debug::revise_loss_stuck_by_baseline(level, gate);
  CHECK(level.fired("L1"));
  // Without M15's finding that the inputs help, nothing to judge by.
  debug::Report alone = stuck(4.253);
  debug::revise_loss_stuck_by_baseline(alone, debug::Report{});
  CHECK(alone.fired("L1"));
}

namespace {
// Halves its input: after a Sigmoid, probabilities that cannot pass 0.5.
struct HalveOutput : nn::Module {
  HalveOutput() : Module("HalveOutput") {}
  Tensor forward(const Tensor& x) override { return x * 0.5; }
};
}  // namespace

TEST_CASE("M14 on a sigmoid head under BCE on probabilities with soft targets: the floor is the targets' entropy") {
  // An image model's reconstruction (a VAE's decoder): probabilities against pixel intensities in (0, 1),
  // BCE summed over the pixels. A perfect reconstruction still scores the pixels' entropy, and the free
  // outputs that find that floor must stay probabilities (BCE refuses anything outside [0, 1]).
  manual_seed(13);
  const Tensor x = randn({32, 6});
  const Tensor y = rand({32, 40}) * 0.8 + 0.1;
  const debug::LossFunction bce = [](const Tensor& p, const Tensor& t) {
    return nn::functional::binary_cross_entropy(p, t, nn::BCELossOptions(nn::Reduction::Sum)) / 32.0;
  };
  for (const bool halved : {false, true}) {
    CAPTURE(halved);
    manual_seed(14);
    auto model =
        std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 256), std::make_shared<nn::ReLU>(),
                                         std::make_shared<nn::Linear>(256, 40), std::make_shared<nn::Sigmoid>());
    // The twin: the outputs halved after the Sigmoid, so targets above 0.5 are out of reach.
    if (halved) model->push_back(std::make_shared<HalveOutput>());
    const std::vector<debug::Finding> fit = debug::overfit_one_batch(*model, x, y, bce);
    const std::string said = fit.empty() ? std::string() : fit[0].str();
    CHECK_MESSAGE(dtest::fires(fit) == halved, said);
  }
}

// ---- the verdicts on programs from outside, as rules ----------------------------------------

TEST_CASE("O8: a group of a few scalars above the range is info beside trained weights; a group of many values warns") {
  manual_seed(21);
  auto net = std::make_shared<dtest::Mlp>();
  const Tensor log_var = zeros({3}).requires_grad_(true), wide = zeros({100}).requires_grad_(true);
  const auto judged = [&](const Tensor& extra) {
    optim::Adam opt(
        {optim::ParamGroup(net->parameters()), optim::ParamGroup({extra}, 0.02, optim::ParamGroup::kInherit, "extra")},
        optim::AdamOptions(1e-3));
    const std::vector<debug::Finding> fs = debug::check_learning_rate_range(opt);
    REQUIRE(fs.size() == 1);
    return fs[0];
  };
  CHECK(judged(log_var).severity == debug::Severity::Info);
  CHECK(judged(wide).severity == debug::Severity::Warning);
}

TEST_CASE("O8's rate above the range is info where the lr / 10 probe shows the run needs it") {
  debug::Report r;
  debug::Finding o8;
  o8.check = "O8";
  o8.severity = debug::Severity::Warning;
  o8.kind = debug::Kind::LrAboveRange;
  o8.title = "the SGD learning rate 5 is above the usual range";
  r.add(o8);
  const auto verdict = [](double probe, double run) {
    return debug::judge_lr_probe({1.0, 0.9, 0.7, 0.5}, {1.0, 1.0 - probe, 1.0 - probe, 1.0 - probe}, 5.0, "",
                                 debug::OptimCheckOptions{});
  };
  // At a tenth of the rate the loss barely moves (0.1% against 50%): needed.
  const debug::Finding barely = verdict(0.001, 0.5);
  REQUIRE(barely.is("O6", debug::Kind::LrProbeInconclusive));
  REQUIRE(debug::rate_needed(r, barely));
  debug::Report softened = r;
  debug::soften_range_for_needed_rate(softened, barely);
  CHECK(softened.findings()[0].severity == debug::Severity::Info);
  // Falling a third as far: inconclusive, and the warning stands.
  CHECK_FALSE(debug::rate_needed(r, verdict(0.17, 0.5)));
}

TEST_CASE("O1: a trunk under three parallel heads is judged against the largest head, shrinking against the last") {
  struct Heads : nn::Module {
    std::shared_ptr<nn::Linear> trunk, a, b, cls;
    Heads() : Module("Heads") {
      trunk = register_module("trunk", std::make_shared<nn::Linear>(6, 16));
      a = register_module("a", std::make_shared<nn::Linear>(16, 1));
      b = register_module("b", std::make_shared<nn::Linear>(16, 1));
      cls = register_module("cls", std::make_shared<nn::Linear>(16, 3));
    }
  } m;
  const auto grads = [&](double trunk, double a, double cls) {
    m.trunk->weight.set_grad(full({16, 6}, trunk));
    m.a->weight.set_grad(full({1, 16}, a));
    m.b->weight.set_grad(full({1, 16}, a));
    m.cls->weight.set_grad(full({3, 16}, cls));
    for (auto* l : {m.trunk.get(), m.a.get(), m.b.get(), m.cls.get()}) l->bias.set_grad(full(l->bias.shape(), 0.1));
    return debug::check_gradient_health(m);
  };
  const auto fired = [](const std::vector<debug::Finding>& fs, debug::Kind k) {
    return std::any_of(fs.begin(), fs.end(), [k](const debug::Finding& f) { return f.fires() && f.kind == k; });
  };
  // The classification head's gradient small (its task down-weighted), the regression heads' not: no growth.
  CHECK_FALSE(fired(grads(1.0, 0.5, 1e-3), debug::Kind::ExplodeTowardsInput));
  // Every head small against the trunk: growth towards the input.
  CHECK(fired(grads(1.0, 1e-3, 1e-3), debug::Kind::ExplodeTowardsInput));
}

TEST_CASE("L7's underfitting by the absolute loss is info under a loss of the user's own") {
  std::vector<debug::Finding> fs = debug::diagnose_fitting(std::vector<double>(60, 2.9), std::vector<double>(60, 3.0));
  REQUIRE(fs.size() == 1);
  REQUIRE(fs[0].is("L7", debug::Kind::Underfitting));
  CHECK(fs[0].fires());
  debug::soften_underfitting_of_own_loss(fs);
  CHECK(fs[0].severity == debug::Severity::Info);
}

TEST_CASE(
    "O2: a gradient jump with the loss falling after it is info (a flat start left); with the loss rising it warns") {
  debug::Finding jump;
  jump.check = "O2";
  jump.severity = debug::Severity::Warning;
  jump.kind = debug::Kind::NormJump;
  jump.step = 271;
  std::vector<double> plateau(600, 0.95);
  for (size_t i = 270; i < plateau.size(); ++i)
    plateau[i] = 0.12 + 0.83 * std::exp(-static_cast<double>(i - 270) / 60.0);
  std::vector<debug::Finding> escaped{jump};
  debug::soften_jumps_with_falling_loss(escaped, plateau);
  CHECK(escaped[0].severity == debug::Severity::Info);
  CHECK(escaped[0].title.find("unstable training") == std::string::npos);
  std::vector<double> blown(600, 0.95);
  for (size_t i = 270; i < blown.size(); ++i) blown[i] = 0.95 + static_cast<double>(i - 270) / 100.0;
  std::vector<debug::Finding> unstable{jump};
  debug::soften_jumps_with_falling_loss(unstable, blown);
  CHECK(unstable[0].severity == debug::Severity::Warning);
}

namespace {

// Skip-gram with negative sampling: a score per candidate (column 0 the context word, the others negatives),
// its context vectors zero at the start as word2vec's are; the targets [1, 0, 0, 0] on every row.
struct ZeroHead : nn::Module {
  std::shared_ptr<nn::Linear> body = register_module("body", std::make_shared<nn::Linear>(6, 8));
  std::shared_ptr<nn::Linear> head = register_module("head", std::make_shared<nn::Linear>(8, 4));
  ZeroHead() : Module("ZeroHead") {
    NoGradGuard ng;
    head->weight.zero_();
    head->bias.zero_();
  }
  Tensor forward(const Tensor& x) override { return (*head)(tanh((*body)(x))); }
};

}  // namespace

TEST_CASE("M15: a loss that reads its targets through y x s is not 'targets unread' at a zero-initialised head") {
  manual_seed(23);
  auto model = std::make_shared<ZeroHead>();
  Tensor y = zeros({32, 4});
  {
    NoGradGuard ng;
    y.select(1, 0).fill_(1.0);
  }
  const debug::LossFunction sgns = [](const Tensor& s, const Tensor& t) {
    return mean(sum((1.0 - t) * s + softplus(-s), {1}));
  };
  const std::vector<std::pair<Tensor, Tensor>> train{{randn({32, 6}), y}, {randn({32, 6}), y}};
  const std::vector<debug::Finding> fs = debug::input_independent_baseline(*model, train, {randn({32, 6}), y}, sgns);
  for (const debug::Finding& f : fs) {
    CAPTURE(f.str());
    CHECK_FALSE(f.is("M15", debug::Kind::TargetsUnread));
    CHECK_FALSE(f.is("M15", debug::Kind::LossIgnoresTargets));
  }
  // A loss that never reads them still is.
  const debug::LossFunction blind = [](const Tensor& s, const Tensor&) { return mean(softplus(-s)); };
  const std::vector<debug::Finding> gs = debug::input_independent_baseline(*model, train, {randn({32, 6}), y}, blind);
  CHECK(std::any_of(gs.begin(), gs.end(), [](const debug::Finding& f) {
    return f.is("M15", debug::Kind::TargetsUnread) || f.is("M15", debug::Kind::LossIgnoresTargets);
  }));
}

TEST_CASE("O1's exploding gradient: info when it passed the bar early only and the loss fell; a warning otherwise") {
  auto gate_with = [](const debug::TrainingHistory& h) {
    debug::Finding f = zero_gradient_finding("O1", debug::Kind::GradientExploding);
    f.title = "the gradient of lv.weight is exploding";
    f.evidence = {{"gradient norm", 1052.0, "> 1000 is exploding"}};
    debug::Report gate;
    gate.add(f);
    debug::revise_gradient_missing(gate, h);
    return gate.findings()[0];
  };
  debug::TrainingHistory h;
  h.gradient_judged_steps = 50;
  for (int s = 0; s < 500; ++s) h.step_losses.push_back(2000.0 * std::exp(-s / 40.0) + 3.0);
  h.gradient_exploded = {{"lv.weight", 1, 49}};  // the run's first sampled step too, then below the bar
  const debug::Finding early = gate_with(h);
  CHECK(early.severity == debug::Severity::Info);
  CHECK(dtest::ev(early, "sampled steps above the bar") == 2);
  CHECK(dtest::ev(early, "sampled steps since the last of them") == 49);
  // Above the bar at the last sampled steps, on most of them, or under a loss that did not fall: a warning.
  h.gradient_exploded = {{"lv.weight", 20, 1}};
  CHECK(gate_with(h).severity == debug::Severity::Warning);
  h.gradient_exploded = {{"lv.weight", 30, 10}};
  CHECK(gate_with(h).severity == debug::Severity::Warning);
  h.gradient_exploded = {{"lv.weight", 1, 49}};
  for (double& l : h.step_losses) l = 5.0 + 0.01 * std::sin(l);
  CHECK(gate_with(h).severity == debug::Severity::Warning);
}

TEST_CASE("O1 in a run: a regression on targets in raw units has large gradients while its loss is large; info") {
  // Targets of a few thousand units (a price, a count), a linear model under Adam: the first steps' weight
  // gradient is in the thousands, and falls with the loss as the weights reach the targets' scale.
  manual_seed(11);
  const Tensor x = randn({640, 8}), w = randn({8, 1}) * 400.0;
  const Tensor y = matmul(x, w) + randn({640, 1}) * 20.0 + 3000.0;
  dtest::Split d =
      dtest::loaders(x.narrow(0, 0, 512), y.narrow(0, 0, 512), x.narrow(0, 512, 128), y.narrow(0, 512, 128));
  auto model = std::make_shared<nn::Linear>(8, 1);
  nn::MSELoss mse;
  optim::Adam opt(model->parameters(), optim::AdamOptions(40.0));
  const debug::RunReport r = dtest::train_own_loop(*model, mse, opt, d, 12);
  const bool seen =
      dtest::any_finding(r, [](const debug::Finding& f) { return f.is("O1", debug::Kind::GradientExploding); });
  CHECK(seen);  // the gradient did pass the bar
  CHECK_FALSE(dtest::any_finding(
      r, [](const debug::Finding& f) { return f.is("O1", debug::Kind::GradientExploding) && f.fires(); }));
}
