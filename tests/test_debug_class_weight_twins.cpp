// D3 on a loss's class weights, each twin written as a user writes it, on data imbalanced 20x (600,
// 60 and 30 examples of three overlapping classes): weights count / N (the rare classes pressed down
// further: a bug), N / (C x count) (the imbalance compensated: healthy), the same weights computed from
// the counts sorted in place first (the large weight on the common class: a bug), and no weights (the
// imbalance itself, D3's plain warning).
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>

#include <gradsleuth.h>

#include "debug_test_util.h"
#include "diagnosis_test_util.h"

using namespace gradsleuth;
using dtest::expect_clean;
using dtest::expect_lead;
using dtest::first_of;
using dtest::Mlp;
using dtest::Split;

namespace {

enum class Weights { CountOverN, NOverCount, NOverSortedCount, None };

debug::RunReport train(Weights how) {
  manual_seed(4);
  const auto full = nn::make_blobs(600, 3, 6, 2.5, 7, 2.0);
  std::vector<int64_t> keep;
  const int64_t per[3] = {600, 60, 30};
  for (int64_t k = 0; k < 3; ++k)
    for (int64_t i = 0; i < per[k]; ++i) keep.push_back(k * 600 + i);
  Generator gen(11);
  const Tensor idx = tensor(keep, {static_cast<int64_t>(keep.size())}).index_select(0, randperm(690, &gen));
  const Tensor x = full->x().index_select(0, idx), y = full->y().index_select(0, idx);
  const Tensor xtr = x.narrow(0, 0, 480), mu = mean(xtr, {0}, true), sd = xtr.std({0}, true, true);
  const Tensor ytr = y.narrow(0, 0, 480).contiguous();
  const Split d =
      dtest::loaders((xtr - mu) / sd, ytr, (x.narrow(0, 480, 210) - mu) / sd, y.narrow(0, 480, 210).contiguous());
  std::vector<float> count(3, 0.0f), w(3, 1.0f);
  for (int64_t c : ytr.to_vector<int64_t>()) count[static_cast<size_t>(c)] += 1;
  if (how == Weights::NOverSortedCount) std::sort(count.begin(), count.end());  // for a log line, in place
  for (size_t k = 0; k < 3; ++k)
    if (how != Weights::None) w[k] = how == Weights::CountOverN ? count[k] / 480.0f : 480.0f / (3.0f * count[k]);
  nn::CrossEntropyLoss ce(how == Weights::None ? nn::CrossEntropyLossOptions()
                                               : nn::CrossEntropyLossOptions().weight(tensor(w, {3})));
  auto m = std::make_shared<Mlp>();
  optim::Adam opt(m->parameters(), optim::AdamOptions(3e-3));
  return dtest::train_own_loop(*m, ce, opt, d, 8);
}

}  // namespace

TEST_CASE("class weights count / N lead as inverted; N / (C x count) compensate; none leave the imbalance") {
  const debug::RunReport bug = train(Weights::CountOverN);
  const debug::Finding* f = first_of(bug, "D3", debug::Kind::ClassWeightsAmplify);
  REQUIRE_MESSAGE(f != nullptr, bug.str(true));
  CHECK(f->severity == debug::Severity::Warning);
  CHECK(dtest::ev(*f, "imbalance ratio of count x the loss's class weight") > 100);
  expect_lead(bug, "D3", "class-weights-inverted");

  const debug::RunReport fixed = train(Weights::NOverCount);
  CHECK(first_of(fixed, "D3", debug::Kind::ClassWeightsAmplify) == nullptr);
  const debug::Finding* counts = first_of(fixed, "D3", debug::Kind::ClassCounts);
  REQUIRE(counts != nullptr);
  CHECK(counts->severity == debug::Severity::Info);
  CHECK(dtest::ev(*counts, "imbalance ratio of count x the loss's class weight") < 1.5);
  expect_clean(fixed);

  // The weights of N / (C x count) from the counts sorted in place: the largest on class 0, the commonest.
  const debug::RunReport sorted = train(Weights::NOverSortedCount);
  const debug::Finding* g = first_of(sorted, "D3", debug::Kind::ClassWeightsAmplify);
  REQUIRE_MESSAGE(g != nullptr, sorted.str(true));
  expect_lead(sorted, "D3", "class-weights-inverted");

  const debug::RunReport plain = train(Weights::None);
  CHECK(first_of(plain, "D3", debug::Kind::ClassWeightsAmplify) == nullptr);
  const debug::Finding* imbalance = first_of(plain, "D3", debug::Kind::ClassCounts);
  REQUIRE(imbalance != nullptr);
  CHECK(imbalance->severity == debug::Severity::Warning);
}

TEST_CASE(
    "class weights far from uniform that leave the classes as far apart as the data: they do not follow the counts") {
  // Counts 600, 60 and 30 (20x). Weights (1, 8, 0.8) differ 10x, yet the masses (600, 480, 24) lie 25x
  // apart: no closer than the counts, not 1.5x further (then they would grow with the counts).
  std::vector<int64_t> labels;
  const int64_t per[3] = {600, 60, 30};
  for (int64_t k = 0; k < 3; ++k)
    for (int64_t i = 0; i < per[k]; ++i) labels.push_back(k);
  const Tensor y = tensor(labels, {static_cast<int64_t>(labels.size())});
  const auto weighed = [&](std::vector<float> w) {
    std::vector<debug::Finding> fs = debug::check_label_distribution(y, 3);
    debug::weigh_class_counts(fs, tensor(w, {3}));
    for (const debug::Finding& f : fs)
      if (f.check == "D3" && f.kind != debug::Kind::ClassRecallLow) return f;
    return debug::Finding{};
  };
  const debug::Finding misaligned = weighed({1.0f, 8.0f, 0.8f});
  CHECK(misaligned.severity == debug::Severity::Warning);
  CHECK(misaligned.kind == debug::Kind::ClassWeightsAmplify);
  CHECK(misaligned.title.find("do not follow the class counts") != std::string::npos);
  CHECK(dtest::ev(misaligned, "largest / smallest class weight") == doctest::Approx(10.0));
  // Inverse-frequency weights in the right order: compensated, info.
  const debug::Finding right = weighed({1.0f, 10.0f, 20.0f});
  CHECK(right.severity == debug::Severity::Info);
  // Weights nearly uniform (a spread under 2): the plain imbalance warning, not this kind.
  const debug::Finding flat = weighed({1.0f, 1.5f, 1.2f});
  CHECK(flat.severity == debug::Severity::Warning);
  CHECK(flat.kind == debug::Kind::ClassCounts);
}
