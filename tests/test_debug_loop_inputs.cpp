// D10 over a run: the inputs as the loop hands them to the model, its training batches against its own
// evaluation batches. Twins written as users write them: a Gaussian-noise augmentation whose std is given
// in 0-255 grey levels on images scaled to [0, 1] and clamped back (salt and pepper on half the images),
// against the same std divided by 255; and a loop that standardises its training batches only, against one
// that standardises both. A loop that evaluates nothing itself, or runs two views a step, is not judged.
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include <gradsleuth.h>

#include "debug_test_util.h"
#include "diagnosis_test_util.h"

using namespace gradsleuth;
using dtest::first_of;

namespace {

// 8 x 8 "images" in [0, 1]: one of four smooth templates per class, at a random brightness, with a
// little pixel noise; neighbouring pixels are strongly correlated across images, as in real ones.
std::pair<Tensor, Tensor> images(int64_t n) {
  const Tensor y = randint(0, 4, {n});
  const Tensor r = arange(0.0, 8.0).reshape({8, 1}).expand({8, 8}) / 7.0;
  const Tensor c = arange(0.0, 8.0).reshape({1, 8}).expand({8, 8}) / 7.0;
  const Tensor t = stack({r, c, (r + c) / 2.0, abs(r - c)}, 0);  // (4, 8, 8)
  const Tensor x = t.index_select(0, y) * (rand({n, 1, 1}) * 0.6 + 0.4) + randn({n, 8, 8}) * 0.03;
  return {clamp(x, 0.0, 1.0).reshape({n, 64}), y};
}

enum class Loop { NoiseRightUnits, NoiseGreyLevels, BothStandardised, TrainStandardisedOnly, NoEvaluation, TwoViews };

debug::RunReport run(Loop loop) {
  manual_seed(21);
  const auto [xtr, ytr] = images(1200);
  const auto [xva, yva] = images(400);
  nn::DataLoader train(std::make_shared<nn::TensorDataset>(xtr, ytr, "images/train"),
                       nn::DataLoaderOptions().batch_size(32).shuffle(true).seed(3));
  nn::DataLoader val(std::make_shared<nn::TensorDataset>(xva, yva, "images/val"),
                     nn::DataLoaderOptions().batch_size(100));
  auto model = std::make_shared<dtest::Mlp>(64, 4);
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));
  debug::Session s(*model, ce, opt, {.train = &train, .val = &val});
  const double mu = xtr.mean().item<double>(), sd = xtr.std().item<double>();
  const double sigma = loop == Loop::NoiseGreyLevels ? 15.0 : 15.0 / 255.0;
  for (int e = 0; e < 5; ++e) {
    model->train();
    for (const nn::Batch& b : train) {
      Tensor x = b.x;
      if (loop == Loop::NoiseRightUnits || loop == Loop::NoiseGreyLevels) {
        const Tensor pick = (rand({x.size(0), 1}) < 0.5).to(kFloat32);  // half the images augmented
        x = clamp(x + randn(x.shape()) * sigma * pick, 0.0, 1.0);
      }
      if (loop == Loop::BothStandardised || loop == Loop::TrainStandardisedOnly) x = (x - mu) / sd;
      opt.zero_grad();
      Tensor l = ce((*model)(x), b.y);
      // A consistency loss on a second, heavily noised view of the batch: two forwards a step.
      if (loop == Loop::TwoViews) l = l + ce((*model)(clamp(x + randn(x.shape()) * 15.0, 0.0, 1.0)), b.y);
      l.backward();
      opt.step();
    }
    if (loop != Loop::NoEvaluation) {
      model->eval();
      NoGradGuard ng;
      for (const nn::Batch& b : val) (*model)(loop == Loop::BothStandardised ? (b.x - mu) / sd : b.x);
    }
    s.epoch();
  }
  return s.finish();
}

const debug::Finding* loop_inputs(const debug::RunReport& r) {
  for (const debug::Finding& f : r.findings.findings())
    if (f.check == "D10" && f.title.find("the loop trains the model on") != std::string::npos) return &f;
  return nullptr;
}

}  // namespace

TEST_CASE("noise in grey levels on images in [0, 1]: D10 sees the training batches lose their structure") {
  const debug::RunReport bad = run(Loop::NoiseGreyLevels);
  const debug::Finding* f = loop_inputs(bad);
  REQUIRE_MESSAGE(f != nullptr, bad.str(true));
  CHECK(f->fires());
  CHECK(dtest::ev(*f, "mean |correlation| between the widest features, training inputs") <
        0.5 * dtest::ev(*f, "the same, evaluation inputs"));
  const debug::RunReport ok = run(Loop::NoiseRightUnits);
  CHECK_MESSAGE(loop_inputs(ok) == nullptr, ok.str(true));
}

TEST_CASE(
    "a loop that standardises its training batches only: D10 warns; both standardised, or no evaluation, "
    "it is silent") {
  const debug::RunReport bad = run(Loop::TrainStandardisedOnly);
  const debug::Finding* f = loop_inputs(bad);
  REQUIRE_MESSAGE(f != nullptr, bad.str(true));
  CHECK(f->fires());
  CHECK(dtest::ev(*f, "median shift (in evaluation spreads)") > 1.0);
  CHECK(loop_inputs(run(Loop::BothStandardised)) == nullptr);
  CHECK(loop_inputs(run(Loop::NoEvaluation)) == nullptr);
}

TEST_CASE("a loop that runs the model on two views a step (one of them noise) is not judged") {
  CHECK(loop_inputs(run(Loop::TwoViews)) == nullptr);
}
