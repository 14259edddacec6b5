// What a loop reads back and reports, healthy and faulty, each case beside its twin: a test-time
// augmentation along the wrong axis against a balanced accuracy reported on skewed classes; a restore
// that brings back the last epoch against one that brings back the best (and a last epoch that is the
// best by accuracy); the learning-curve probe against a repeat that falls short of the run (a momentum
// schedule it does not replay) and against class targets it could only score by the loss; the rate
// probe against a run whose loop changes its loss (mixup); a validation loss that rises with the
// training loss against one that rises while training improves; a hand-written multi-label loss that
// never reads its targets against the same loss written right and an objective of its inputs; random
// views of the validation inputs under an objective without labels against the same under a supervised
// loss; a checkpoint loaded and then drawn again in every layer against a new head drawn again; a +-3
// clip on raw values before the standardisation against the clip after it; a denoiser scored against its
// noisy input against the same scored against the clean targets, and a plain autoencoder; a multi-label
// loop that reports exact-match accuracy; and the split score every end-of-run probe reads (SplitScore).
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include <gradsleuth.h>

#include "debug/run/split_score.h"
#include "debug_test_util.h"
#include "diagnosis_test_util.h"

using namespace gradsleuth;
using dtest::Split;

namespace {

bool has_kind(const std::vector<debug::Finding>& fs, debug::Kind k) {
  for (const debug::Finding& f : fs)
    if (f.kind == k && f.fires()) return true;
  return false;
}

// A validation split of 1000 rows over `C` classes, each row's class recalled at `recall` (the rest
// predicted as the next class), `counts` rows per class.
std::vector<std::vector<int64_t>> confusion(const std::vector<int64_t>& counts, const std::vector<double>& recall) {
  const size_t C = counts.size();
  std::vector<std::vector<int64_t>> m(C, std::vector<int64_t>(C, 0));
  for (size_t k = 0; k < C; ++k) {
    const auto hit = static_cast<int64_t>(std::llround(recall[k] * static_cast<double>(counts[k])));
    m[k][k] = hit;
    m[k][(k + 1) % C] = counts[k] - hit;
  }
  return m;
}

debug::EndFitMeasure classifier(double val_accuracy, const std::vector<std::vector<int64_t>>& conf) {
  debug::EndFitMeasure m;
  m.train_accuracy = m.val_accuracy = val_accuracy;
  m.train_loss = m.val_loss = 0.5;
  m.train_examples = 4000;
  m.val_examples = 1000;
  m.val_confusion = conf;
  m.class_labels = true;
  return m;
}

}  // namespace

TEST_CASE("L9 reported accuracy: a flip along the wrong axis (70% against 82%) warns; a balanced accuracy does not") {
  // Ten balanced classes recalled at 82%: a loop that reports 69.5% (its test-time augmentation
  // averages in upside-down images) is 12.5 points low, 8 standard errors; one that reports 80.5% is not.
  const std::vector<int64_t> even(10, 100);
  debug::EndFitMeasure m = classifier(0.82, confusion(even, std::vector<double>(10, 0.82)));
  m.epoch_val_accuracy = {0.62, 0.66, 0.695};
  CHECK(has_kind(debug::check_end_fit(m), debug::Kind::ReportedAccuracyLow));
  m.epoch_val_accuracy = {0.62, 0.66, 0.805};
  CHECK_FALSE(has_kind(debug::check_end_fit(m), debug::Kind::ReportedAccuracyLow));
  // Skewed classes (800, 100, 100), the majority recalled at 95%, the others at 40% and 30%: accuracy
  // 83%, balanced accuracy 55%. A loop that reports the balanced accuracy reads 55% and is right; 40% is not.
  debug::EndFitMeasure skew = classifier(0.83, confusion({800, 100, 100}, {0.95, 0.4, 0.3}));
  skew.epoch_val_accuracy = {0.5, 0.55};
  CHECK_FALSE(has_kind(debug::check_end_fit(skew), debug::Kind::ReportedAccuracyLow));
  skew.epoch_val_accuracy = {0.38, 0.40};
  CHECK(has_kind(debug::check_end_fit(skew), debug::Kind::ReportedAccuracyLow));
}

TEST_CASE("L9 reported accuracy: a multi-label loop that reports exact-match accuracy is read against the model's") {
  // Ten 0/1 labels per image: 94% of the labels right, 59% of the images with every label right. A loop
  // that reports the exact-match share (58.7%) measures the model; one that reports 30% does not.
  debug::EndFitMeasure m;
  m.train_loss = m.val_loss = 0.15;
  m.train_examples = 5000;
  m.val_examples = 1000;
  m.val_accuracy = 0.941;
  m.epoch_val_accuracy = {0.52, 0.587};
  CHECK(has_kind(debug::check_end_fit(m), debug::Kind::ReportedAccuracyLow));  // against 94% alone
  m.val_exact_match = 0.59;
  CHECK_FALSE(has_kind(debug::check_end_fit(m), debug::Kind::ReportedAccuracyLow));
  m.epoch_val_accuracy = {0.28, 0.30};
  const std::vector<debug::Finding> low = debug::check_end_fit(m);
  REQUIRE(has_kind(low, debug::Kind::ReportedAccuracyLow));
  for (const debug::Finding& f : low)
    if (f.kind == debug::Kind::ReportedAccuracyLow)
      CHECK(dtest::ev(f, "its exact-match accuracy (every target of an example right)") == doctest::Approx(0.59));
}

TEST_CASE("L9 restored-last: a restore that brings back the last epoch warns; the best epoch's, or a best last, not") {
  // 40% noisy labels: the validation loss is lowest at epoch 2 (1.741) and rises to 2.063; the snapshot
  // kept with detach() shares the weights' storage, so the restore writes the last epoch back.
  debug::EndFitMeasure m = classifier(0.461, confusion(std::vector<int64_t>(10, 100), std::vector<double>(10, 0.461)));
  m.loaded_after_run = true;
  m.loaded_unchanged = true;  // the write left the last step's values
  m.epoch_val_loss = {1.80, 1.741, 1.83, 1.97, 2.063};
  m.epoch_val_accuracy = {0.49, 0.51, 0.50, 0.48, 0.461};
  m.val_loss = 2.063;
  CHECK(has_kind(debug::check_end_fit(m), debug::Kind::RestoredLast));
  // The best epoch restored (a clone kept): its loss, not the last one's.
  debug::EndFitMeasure best = m;
  best.val_loss = 1.741;
  best.val_accuracy = 0.51;
  CHECK_FALSE(has_kind(debug::check_end_fit(best), debug::Kind::RestoredLast));
  CHECK_FALSE(has_kind(debug::check_end_fit(best), debug::Kind::RestoredWorse));
  // Kept by the accuracy, whose best is the last epoch: the restore rightly brings it back.
  debug::EndFitMeasure by_accuracy = m;
  by_accuracy.epoch_val_accuracy = {0.49, 0.50, 0.50, 0.51, 0.52};
  by_accuracy.val_accuracy = 0.52;
  CHECK_FALSE(has_kind(debug::check_end_fit(by_accuracy), debug::Kind::RestoredLast));
  // No write after the last step: nothing was restored.
  debug::EndFitMeasure no_write = m;
  no_write.loaded_after_run = false;
  CHECK_FALSE(has_kind(debug::check_end_fit(no_write), debug::Kind::RestoredLast));
  // A write that changed the values (an average of the weights, an EMA, copied in at the end), scoring
  // as the last epoch reported (the loop reported the average's numbers): not a restore of the last.
  debug::EndFitMeasure averaged = m;
  averaged.loaded_unchanged = false;
  CHECK_FALSE(has_kind(debug::check_end_fit(averaged), debug::Kind::RestoredLast));
}

TEST_CASE("L9 learning curve: a repeat short of the run raises the bar; class targets are not judged by the loss") {
  // One-cycle with momentum cycling: the repeats replay the rate, not the momentum, and the one on all
  // the examples reaches 82.7% of validation where the run reached 85.9%. A quarter of the examples
  // loses 6.9 points against it: within the bar (6.5) plus the repeat's shortfall (3.2). A repeat that
  // reproduces the run (85.9%) makes the same loss a warning.
  debug::EndFitMeasure m = classifier(0.859, confusion(std::vector<int64_t>(10, 100), std::vector<double>(10, 0.859)));
  m.train_accuracy = 0.87;
  m.train_examples = 300;  // fewer than validation's 1,000: examples lost, where a steep curve warns
  m.fewer_share = 0.25;
  m.fewer_val_loss = 0.7;
  m.all_val_loss = 0.45;
  m.all_val_accuracy = 0.827;
  m.fewer_val_accuracy = 0.758;
  m.fewer_broken = 120;
  m.fewer_fixed = 51;
  CHECK_FALSE(has_kind(debug::check_end_fit(m), debug::Kind::GeneralisationGap));
  m.all_val_accuracy = 0.859;
  m.fewer_val_accuracy = 0.79;
  CHECK(has_kind(debug::check_end_fit(m), debug::Kind::GeneralisationGap));
  // Early-exit heads, (B, 3, 10) outputs: no accuracy is measured, and the loss rule on its own (a
  // confident classifier's loss rises far faster than its accuracy falls) is for regressions.
  debug::EndFitMeasure heads;
  heads.train_loss = 0.40;
  heads.val_loss = 0.452;
  heads.train_examples = 600;
  heads.val_examples = 1000;
  heads.fewer_share = 0.25;
  heads.all_val_loss = 0.452;
  heads.fewer_val_loss = 0.794;
  heads.class_labels = true;
  CHECK_FALSE(has_kind(debug::check_end_fit(heads), debug::Kind::GeneralisationGap));
  heads.class_labels = false;  // the same numbers for a regression's targets warn
  CHECK(has_kind(debug::check_end_fit(heads), debug::Kind::GeneralisationGap));
}

TEST_CASE("L9's loss gap: a regression that memorised its training split warns, unless validation ends at its best") {
  // A matrix factorisation of ratings: training loss 0.054 in eval mode, validation 0.247 (4.6x). Trained with
  // early stopping, its validation loss still improved at its last epochs: the gap costs validation nothing yet.
  debug::EndFitMeasure m;
  m.train_loss = 0.054;
  m.val_loss = 0.247;
  m.train_examples = 6400;
  m.val_examples = 4000;
  m.epoch_val_loss = {0.62, 0.45, 0.36, 0.30, 0.27, 0.255, 0.249, 0.247};
  const auto gap = [](const std::vector<debug::Finding>& fs) {
    for (const debug::Finding& f : fs)
      if (f.kind == debug::Kind::GeneralisationGap) return &f - fs.data();
    return static_cast<std::ptrdiff_t>(-1);
  };
  std::vector<debug::Finding> fs = debug::check_end_fit(m);
  REQUIRE(gap(fs) >= 0);
  CHECK(fs[gap(fs)].severity == debug::Severity::Info);
  CHECK(fs[gap(fs)].title.find("ended the run at its best") != std::string::npos);
  // Validation turned up from its best (0.247 at epoch 6, 0.29 at the end): a warning.
  m.epoch_val_loss = {0.62, 0.45, 0.36, 0.30, 0.26, 0.247, 0.27, 0.29};
  m.val_loss = 0.29;
  fs = debug::check_end_fit(m);
  REQUIRE(gap(fs) >= 0);
  CHECK(fs[gap(fs)].severity == debug::Severity::Warning);
  // A noisy classifier's loss flat near its best (1.12 at the end, 1.10 at its lowest: 1.8% above): within two
  // standard errors of the validation mean where each example's loss spreads widely (300 rows, std 1.5), a
  // warning where they agree (std 0.05).
  m.train_loss = 0.29;
  m.val_loss = 1.12;
  m.val_examples = 300;
  m.epoch_val_loss = {1.6, 1.3, 1.18, 1.12, 1.10, 1.11, 1.12, 1.12};
  std::vector<double> rows(300);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = 1.12 + (i % 2 == 0 ? 1.5 : -1.5) * (i < 150 ? 1.0 : 0.6);
  m.val_row_losses = rows;
  fs = debug::check_end_fit(m);
  REQUIRE(gap(fs) >= 0);
  CHECK(fs[gap(fs)].severity == debug::Severity::Info);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = 1.12 + (i % 2 == 0 ? 0.05 : -0.05);
  m.val_row_losses = rows;
  fs = debug::check_end_fit(m);
  REQUIRE(gap(fs) >= 0);
  CHECK(fs[gap(fs)].severity == debug::Severity::Warning);
  m.val_row_losses.clear();
  // Without an epoch history there is nothing to say it ended at its best: a warning.
  m.epoch_val_loss.clear();
  fs = debug::check_end_fit(m);
  REQUIRE(gap(fs) >= 0);
  CHECK(fs[gap(fs)].severity == debug::Severity::Warning);
}

TEST_CASE("L9 rate probe: 10x the rate must also beat the run's own rate taken the probe's way (plain batches)") {
  // A run still falling at the end, barely below its first loss: 10x the rate reaches 0.2, against the
  // run's 0.9 at the same steps: the rate is blamed. Under mixup the run's losses are the blended
  // targets'; the same steps at the run's own rate on plain batches reach 0.3, and 0.2 is no better
  // than half of that: not the rate.
  debug::EndFitMeasure m = classifier(0.7, confusion(std::vector<int64_t>(10, 100), std::vector<double>(10, 0.7)));
  m.epoch_train_loss = {1.4, 1.2, 1.0};
  m.epoch_val_loss = {1.3, 1.1, 0.9};
  m.epoch_val_accuracy = {0.5, 0.6, 0.7};
  m.run_initial_loss = 1.1;
  m.run_first_loss = 1.05;
  m.run_window_loss = 0.9;
  m.run_steps = m.probe_steps = 300;
  bool falling = false;
  debug::check_end_fit(m, {}, &falling);
  REQUIRE(falling);
  m.probe_window_loss = 0.2;
  CHECK(debug::end_fit_blames_rate(debug::check_end_fit(m)));
  m.repeat_window_loss = 0.3;
  CHECK_FALSE(debug::end_fit_blames_rate(debug::check_end_fit(m)));
  m.repeat_window_loss = 0.9;  // the repeat learns no faster than the run did: the rate stays blamed
  CHECK(debug::end_fit_blames_rate(debug::check_end_fit(m)));
}

TEST_CASE("L1 train-down-val-up: info when the trained model fits its training data no better than at the best") {
  debug::Finding f;
  f.check = "L1";
  f.kind = debug::Kind::TrainDownValUp;
  f.severity = debug::Severity::Warning;
  f.title = "the training loss keeps falling while the validation loss rises";
  f.evidence = {{"training loss near the best epoch (median)", 0.00105, ""},
                {"training loss at the end (median)", 0.00085, ""}};
  for (const double end_eval : {0.00158, 0.0004}) {
    CAPTURE(end_eval);
    debug::Report r;
    r.add(f);
    debug::revise_train_down_val_up(r, end_eval, {});
    // 0.00158: both splits' losses rose at the last weights (a constant rate's noise); 0.0004: the
    // training data is fitted far better than at the best epoch, the validation worse: memorisation.
    CHECK(r.findings().front().fires() == (end_eval < 0.00105));
  }
}

namespace {
// Multi-label targets: 4 attributes of 6 features, each 1 where its feature is positive.
struct MultiLabel {
  Split d;
  MultiLabel() {
    manual_seed(9);
    const Tensor x = randn({600, 6});
    const Tensor y = gt(x.narrow(1, 0, 4), 0.0).to(kFloat32);
    d = dtest::loaders(x.narrow(0, 0, 480), y.narrow(0, 0, 480), x.narrow(0, 480, 120), y.narrow(0, 480, 120), 9);
  }
};
}  // namespace

TEST_CASE(
    "M15: a multi-label BCE written (1 - y) log(p) never reads its targets: loss-ignores-targets; written right, "
    "clean") {
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    const MultiLabel data;
    auto model = std::make_shared<dtest::Mlp>(6, 4);
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    auto bce = [bug](const Tensor& logits, const Tensor& y) {
      const Tensor p = clamp(sigmoid(logits), 1e-6, 1 - 1e-6);
      const Tensor second = bug ? log(p) : log(1.0 - p);  // the bug: log(p) where log(1 - p) was meant
      return neg(mean(y * log(p) + (1.0 - y) * second));
    };
    const debug::RunReport r = dtest::train_own_loop(*model, bce, opt, data.d, 4);
    CHECK_MESSAGE(has_kind(r.findings.findings(), debug::Kind::LossIgnoresTargets) == bug, r.str());
    if (bug) dtest::expect_lead(r, "M15", "loss-ignores-targets");
  }
}

TEST_CASE("M15: an objective of the inputs (a reconstruction scored against the inputs passed as targets) is info") {
  manual_seed(9);
  const Tensor x = randn({600, 6});
  const Split d =
      dtest::loaders(x.narrow(0, 0, 480), x.narrow(0, 0, 480), x.narrow(0, 480, 120), x.narrow(0, 480, 120), 9);
  auto model = std::make_shared<dtest::Mlp>(6, 6);
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  // An energy of the outputs alone (its target argument, the inputs, unread).
  auto energy = [](const Tensor& out, const Tensor&) { return mean(out * out); };
  const debug::RunReport r = dtest::train_own_loop(*model, energy, opt, d, 2);
  CHECK_FALSE(has_kind(r.findings.findings(), debug::Kind::LossIgnoresTargets));
  bool unread = false;
  for (const debug::Finding& f : r.findings.findings()) unread = unread || f.kind == debug::Kind::TargetsUnread;
  CHECK_MESSAGE(unread, r.str(true));
}

TEST_CASE("M15: a pairwise ranking loss reads its targets' differences only (a shift of all of them changes nothing)") {
  manual_seed(10);
  const Tensor x = randn({600, 6});
  const Tensor grade = sum(x.narrow(1, 0, 2), {1}, true) + randn({600, 1}) * 0.1;  // a utility to rank by
  const Split d = dtest::loaders(x.narrow(0, 0, 480), grade.narrow(0, 0, 480), x.narrow(0, 480, 120),
                                 grade.narrow(0, 480, 120), 10);
  auto model = std::make_shared<dtest::Mlp>(6, 1);
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  // RankNet: over every pair of the batch, softplus(-(s_i - s_j) sign(y_i - y_j)).
  auto ranknet = [](const Tensor& s, const Tensor& y) {
    const Tensor ds = s - s.reshape({1, -1}), dy = y - y.reshape({1, -1});
    return mean(softplus(-ds * sign(dy)));
  };
  const debug::RunReport r = dtest::train_own_loop(*model, ranknet, opt, d, 2);
  for (const debug::Finding& f : r.findings.findings()) {
    CHECK(f.kind != debug::Kind::LossIgnoresTargets);
    CHECK(f.kind != debug::Kind::TargetsUnread);
  }
  CHECK_FALSE(r.findings.fired("M15"));
}

namespace {
// A dataset that draws a random view of each row at every read (noise of 0.3): an augmentation.
struct RandomViews : nn::Dataset {
  std::shared_ptr<nn::TensorDataset> rows;
  mutable Generator draw{17};
  explicit RandomViews(std::shared_ptr<nn::TensorDataset> r) : rows(std::move(r)) {}
  int64_t size() const override { return rows->size(); }
  nn::Example get(int64_t i) const override { return rows->get(i); }
  nn::Batch get_batch(const std::vector<int64_t>& idx) const override {
    nn::Batch b = rows->get_batch(idx);
    b.x = b.x + randn(b.x.shape(), {}, &draw) * 0.3;
    return b;
  }
  std::string name() const override { return "random-views"; }
};
}  // namespace

TEST_CASE(
    "D10: random views on validation under an objective without labels are info; under a supervised loss, a warning") {
  for (const bool supervised : {true, false}) {
    CAPTURE(supervised);
    manual_seed(5);
    const dtest::XY all = dtest::blobs(200, 3, 6, 5, 2.0);
    auto tr = std::make_shared<nn::TensorDataset>(all.x.narrow(0, 0, 480), all.y.narrow(0, 0, 480));
    auto va = std::make_shared<RandomViews>(
        std::make_shared<nn::TensorDataset>(all.x.narrow(0, 480, 120), all.y.narrow(0, 480, 120)));
    Split d;
    d.train = std::make_shared<nn::DataLoader>(tr, nn::DataLoaderOptions().batch_size(32).shuffle(true).seed(5));
    d.val = std::make_shared<nn::DataLoader>(va, nn::DataLoaderOptions().batch_size(120));
    auto model = std::make_shared<dtest::Mlp>(6, 3);
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    // Without labels: pull the outputs of each input towards 0 and keep their spread (an objective of
    // the inputs alone; its target argument unread).
    auto own = [](const Tensor& out, const Tensor&) { return mean(out * out) - log(mean(var(out, {0})) + 1e-6); };
    nn::CrossEntropyLoss ce;
    const debug::RunReport r =
        supervised ? dtest::train_own_loop(*model, ce, opt, d, 2) : dtest::train_own_loop(*model, own, opt, d, 2);
    bool d10_warns = false, d10 = false;
    for (const debug::Finding& f : r.findings.findings())
      if (f.check == "D10" && !std::isnan(f.value_of("values that differ between the two reads"))) {
        d10 = true;
        d10_warns = d10_warns || f.fires();
      }
    CHECK_MESSAGE(d10, r.str(true));
    CHECK_MESSAGE(d10_warns == supervised, r.str(true));
  }
}

TEST_CASE("M9 loaded-redrawn: every layer drawn again after nn::load warns; a new head is info; no re-draw, silent") {
  // A model trained on the blobs and saved: the "pretrained" checkpoint.
  const std::string path =
      (std::filesystem::temp_directory_path() / ("gs_loaded_redrawn_" + std::to_string(::getpid()) + ".ckpt")).string();
  {
    manual_seed(2);
    const Split d = dtest::split(3, 2.0);
    auto pre = std::make_shared<dtest::Mlp>();
    nn::CrossEntropyLoss ce;
    optim::Adam opt(pre->parameters(), optim::AdamOptions(3e-3));
    for (int e = 0; e < 3; ++e)
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        ce((*pre)(b.x), b.y).backward();
        opt.step();
      }
    nn::save(*pre, path);
  }
  // 0: loaded and trained on; 1: the head drawn again (transfer learning); 2: every layer drawn again
  // (the head's name filter missing from the re-initialisation loop).
  for (const int variant : {0, 1, 2}) {
    CAPTURE(variant);
    manual_seed(7);
    const Split d = dtest::split(4, 2.0);
    auto model = std::make_shared<dtest::Mlp>();
    nn::load(*model, path);
    {
      NoGradGuard ng;
      if (variant == 1) model->fc3->reset_parameters();
      if (variant == 2)
        for (const auto& l : {model->fc1, model->fc2, model->fc3}) l->reset_parameters();
    }
    nn::CrossEntropyLoss ce;
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-3));
    const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 2);
    const debug::Finding* m9 = nullptr;
    for (const debug::Finding& f : r.findings.findings())
      if (f.kind == debug::Kind::LoadedRedrawn) m9 = &f;
    CHECK_MESSAGE((m9 != nullptr) == (variant > 0), r.str(true));
    if (m9) CHECK_MESSAGE(m9->fires() == (variant == 2), m9->str());
    if (variant == 2) dtest::expect_lead(r, "M9", "loaded-redrawn");
  }
  std::remove(path.c_str());
}

namespace {
// An MLP body under a name of the caller's choice, and a head: the same architecture saved under one
// name and loaded under another.
struct NamedBody : nn::Module {
  std::shared_ptr<dtest::Mlp> body;
  std::shared_ptr<nn::Linear> head;
  NamedBody(const std::string& body_name, const std::string& head_name) : Module("NamedBody") {
    body = register_module(body_name, std::make_shared<dtest::Mlp>(6, 16));
    head = register_module(head_name, std::make_shared<nn::Linear>(16, 3));
  }
  Tensor forward(const Tensor& x) override { return (*head)(relu((*body)(x))); }
};
}  // namespace

TEST_CASE("M9 loaded-skipped: a body saved as 'features' and loaded as 'encoder' with strict=false warns") {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("gs_loaded_skipped_" + std::to_string(::getpid()) + ".ckpt")).string();
  manual_seed(2);
  nn::save(NamedBody("features", "head"), path);
  // 0: the same names (all loaded); 1: the body renamed (the checkpoint's features.* skipped: the body
  // keeps its initialisation); 2: only the head renamed, "head" for "classifier" (a new head on purpose:
  // no tail of two names in common, so no sign the file holds it).
  for (const int variant : {0, 1, 2}) {
    CAPTURE(variant);
    manual_seed(7);
    const Split d = dtest::split(4, 2.0);
    auto model =
        std::make_shared<NamedBody>(variant == 1 ? "encoder" : "features", variant == 2 ? "classifier" : "head");
    const nn::LoadReport lr = nn::load(*model, path, /*strict=*/false);
    CHECK(lr.missing.empty() == (variant == 0));
    nn::CrossEntropyLoss ce;
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-3));
    const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 2);
    const debug::Finding* m9 = nullptr;
    for (const debug::Finding& f : r.findings.findings())
      if (f.kind == debug::Kind::LoadedSkipped) m9 = &f;
    CHECK_MESSAGE((m9 != nullptr) == (variant == 1), r.str(true));
    if (m9) {
      CHECK(m9->fires());
      CHECK(dtest::has(m9->title, "features.fc1.weight for encoder.fc1.weight"));
      CHECK(m9->value_of("weights of the model the load skipped, held by the file under another prefix") == 3);
    }
  }
  std::remove(path.c_str());
}

TEST_CASE("M9 loaded-untrained: a body saved before its training, loaded and frozen, leads; saved after, silent") {
  // A body (6 -> 32 -> 32) pretrained with a head on the blobs; `before`: nn::save ran before the loop.
  for (const bool before : {true, false}) {
    CAPTURE(before);
    const std::string path =
        (std::filesystem::temp_directory_path() / ("gs_loaded_untrained_" + std::to_string(::getpid()) + ".ckpt"))
            .string();
    auto make_body = [] {
      return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 32), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::Linear>(32, 32), std::make_shared<nn::ReLU>());
    };
    {
      manual_seed(2);
      const Split d = dtest::split(3, 2.0);
      auto body = make_body();
      auto pre = std::make_shared<nn::Sequential>(body, std::make_shared<nn::Linear>(32, 3));
      nn::CrossEntropyLoss ce;
      optim::Adam opt(pre->parameters(), optim::AdamOptions(3e-3));
      if (before) nn::save(*body, path);
      for (int e = 0; e < 5; ++e)
        for (const nn::Batch& b : *d.train) {
          opt.zero_grad();
          ce((*pre)(b.x), b.y).backward();
          opt.step();
        }
      if (!before) nn::save(*body, path);
    }
    manual_seed(7);
    const Split d = dtest::split(4, 2.0);
    auto body = make_body();
    nn::load(*body, path);
    body->requires_grad_(false);
    auto head = std::make_shared<nn::Linear>(32, 3);
    auto model = std::make_shared<nn::Sequential>(body, head);
    nn::CrossEntropyLoss ce;
    optim::Adam opt(head->parameters(), optim::AdamOptions(3e-3));
    const debug::RunReport r = dtest::train_own_loop(*model, ce, opt, d, 3);
    const debug::Finding* m9 = dtest::first_of(r, "M9", debug::Kind::LoadedUntrained);
    CHECK_MESSAGE((m9 != nullptr) == before, r.str(true));
    if (m9) {
      CHECK(m9->severity == debug::Severity::Warning);
      CHECK(dtest::ev(*m9, "weights the model holds from the latest nn::load") == 2);
      CHECK(dtest::lead_cause(r) == "checkpoint-untrained");
    }
    std::remove(path.c_str());
  }
}

TEST_CASE(
    "D5: features a +-3 clip on raw values flattened (the Normalizer saw them vary) warn; the clip after, silent") {
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    manual_seed(3);
    // Six features: three on a raw scale far above 3 (an income, an age, a count), three near N(0, 1).
    const Tensor z = randn({900, 6});
    const Tensor scale = tensor(std::vector<float>{20, 15, 60, 1, 1, 1}, {6});
    const Tensor shift = tensor(std::vector<float>{50, 40, 300, 0, 0, 0}, {6});
    const Tensor x = z * scale + shift;
    const Tensor y = gt(sum(z.narrow(1, 0, 4), {1}), 0.0).to(kInt64);
    nn::Normalizer norm(nn::Normalizer::Mode::PerFeature);
    norm.fit(x.narrow(0, 0, 700), "train");
    const Tensor prepared = bug ? norm.transform(clamp(x, -3.0, 3.0)) : clamp(norm.transform(x), -3.0, 3.0);
    const Split d = dtest::loaders(prepared.narrow(0, 0, 700), y.narrow(0, 0, 700), prepared.narrow(0, 700, 200),
                                   y.narrow(0, 700, 200), 3);
    auto model = std::make_shared<dtest::Mlp>(6, 2);
    nn::CrossEntropyLoss ce;
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    debug::Session s(*model, ce, opt, {.train = d.train.get(), .val = d.val.get(), .normalizer = &norm});
    for (int e = 0; e < 2; ++e) {
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        ce((*model)(b.x), b.y).backward();
        opt.step();
      }
      s.epoch();
    }
    const debug::RunReport r = s.finish();
    bool flattened = false;
    for (const debug::Finding& f : r.findings.findings())
      flattened = flattened || (f.check == "D5" && f.fires() && f.title.find("flattened") != std::string::npos);
    CHECK_MESSAGE(flattened == bug, r.str(true));
  }
}

TEST_CASE(
    "D4 targets-are-inputs: a denoiser scored against its noisy input warns; the clean targets, or an autoencoder, "
    "not") {
  // Smooth 16-sample signals; the inputs carry noise, the targets are the clean signals.
  manual_seed(11);
  const int64_t N = 640, D = 16;
  const Tensor phase = rand({N, 1}) * 6.28, t = arange(D, kFloat32).reshape({1, D}) * 0.4;
  const Tensor clean = sin(t + phase), noisy = clean + randn({N, D}) * 0.3;
  enum class Loop { Bug, Clean, Autoencoder };
  for (const Loop how : {Loop::Bug, Loop::Clean, Loop::Autoencoder}) {
    CAPTURE(static_cast<int>(how));
    const Tensor targets = how == Loop::Autoencoder ? noisy : clean;
    const Split d = dtest::loaders(noisy.narrow(0, 0, 512), targets.narrow(0, 0, 512), noisy.narrow(0, 512, 128),
                                   targets.narrow(0, 512, 128));
    manual_seed(12);
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(D, 32), std::make_shared<nn::ReLU>(),
                                                  std::make_shared<nn::Linear>(32, D));
    nn::MSELoss mse;
    optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
    debug::Session dbg(*model, mse, opt, {.train = d.train.get(), .val = d.val.get()});
    for (int e = 0; e < 4; ++e) {
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        Tensor l = mse((*model)(b.x), how == Loop::Bug ? b.x : b.y);  // BUG arm: the input as the target
        l.backward();
        opt.step();
      }
      dbg.epoch();
    }
    const debug::RunReport r = dbg.finish();
    CHECK_MESSAGE(has_kind(r.findings.findings(), debug::Kind::TargetsAreInputs) == (how == Loop::Bug), r.str(true));
    if (how == Loop::Bug) {
      REQUIRE(r.findings.diagnosis().lead.has_value());
      CHECK(r.findings.diagnosis().lead->cause == "targets-are-inputs");
    }
  }
}

TEST_CASE(
    "L9 generalisation gap: classes validation has and training never met explain it (info); a gap on the rest warns") {
  // 95% right on training; validation holds 400 rows of two classes training never had (all wrong).
  debug::EndFitMeasure m = classifier(0.55, {});
  m.train_accuracy = 0.95;
  m.val_unseen_rows = 400;
  m.val_seen_accuracy = 0.917;  // 550 of the other 600 rows
  const std::vector<debug::Finding> unseen = debug::check_end_fit(m);
  const auto gap = std::find_if(unseen.begin(), unseen.end(),
                                [](const debug::Finding& f) { return f.kind == debug::Kind::GeneralisationGap; });
  REQUIRE(gap != unseen.end());
  CHECK(gap->severity == debug::Severity::Info);
  CHECK(gap->title.find("classes it never had") != std::string::npos);
  // The rows of the classes training has show the gap too: memorised, a warning.
  m.val_seen_accuracy = 0.62;
  CHECK(has_kind(debug::check_end_fit(m), debug::Kind::GeneralisationGap));
  // No unseen class: the warning as before.
  m.val_unseen_rows = 0;
  m.val_seen_accuracy = 0.55;
  CHECK(has_kind(debug::check_end_fit(m), debug::Kind::GeneralisationGap));
}

TEST_CASE("SplitScore: multi-label exact match, every example's loss under a class loss, the accuracy threshold") {
  // The model passes its input through, so the inputs are the outputs scored.
  nn::Identity model;
  // Three examples of two 0/1 targets, logits read at 0: rows all right, one of two right, all right.
  const Tensor logits = tensor(std::vector<float>{2, -3, 1, 1, -2, 4}, {3, 2}),
               multi = tensor(std::vector<float>{1, 0, 1, 0, 0, 1}, {3, 2});
  const nn::DataLoader ml(std::make_shared<nn::TensorDataset>(logits, multi), nn::DataLoaderOptions().batch_size(2));
  nn::BCEWithLogitsLoss bce;
  CHECK(debug::run_detail::accuracy_threshold(&bce) == 0.0);
  const debug::run_detail::SplitScore s = debug::run_detail::score(
      model, ml, [&](const Tensor& o, const Tensor& y) { return bce(o, y); }, 10, 0.0);
  CHECK(s.examples == 3);
  CHECK(s.accuracy == doctest::Approx(5.0 / 6.0));
  CHECK(s.exact_match == doctest::Approx(2.0 / 3.0));
  // Class ids under cross-entropy: every example's loss alone with RowLosses::kEvery, none without.
  const Tensor scores = tensor(std::vector<float>{3, 0, 0, 0, 2, 0, 1, 1, 0}, {3, 3});
  const Tensor ids = tensor(std::vector<int64_t>{0, 1, 2}, {3});
  const nn::DataLoader cl(std::make_shared<nn::TensorDataset>(scores, ids), nn::DataLoaderOptions().batch_size(3));
  nn::CrossEntropyLoss ce;
  auto loss = [&](const Tensor& o, const Tensor& y) { return ce(o, y); };
  CHECK(std::isnan(debug::run_detail::accuracy_threshold(&ce)));
  const debug::run_detail::SplitScore every =
      debug::run_detail::score(model, cl, loss, 10, std::nan(""), debug::run_detail::RowLosses::kEvery);
  REQUIRE(every.row_losses.size() == 3);
  CHECK(every.row_losses[0] == doctest::Approx(-std::log(std::exp(3.0) / (std::exp(3.0) + 2.0))).epsilon(1e-5));
  CHECK(every.right == std::vector<uint8_t>{1, 1, 0});
  CHECK(std::isnan(every.exact_match));  // one class per example: no exact match to speak of
  CHECK(debug::run_detail::score(model, cl, loss, 10, std::nan(""), debug::run_detail::RowLosses::kUnscored)
            .row_losses.empty());
}
