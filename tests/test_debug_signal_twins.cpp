// A flat loss whose weights move: labels the inputs do not predict, against a learning rate too low.
// Each twin as a user writes it: a dataset that shuffles its rows once when it loads them, with
// one permutation for the inputs and another for the labels (D4 sees nothing: the loader serves the
// dataset's own pairs); fixed, one permutation for both. The learning rate stays the lead where the
// weights barely move (SGD at 1e-5).
#include <doctest/doctest.h>

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

// Rows shuffled once at load time; `apart` draws the labels' order separately from the inputs'.
struct ShuffledOnce : nn::Dataset {
  Tensor x, y;
  ShuffledOnce(const Tensor& inputs, const Tensor& labels, bool apart) {
    Generator g(5);
    const Tensor order = randperm(inputs.size(0), &g);
    x = inputs.index_select(0, order);
    y = labels.index_select(0, apart ? randperm(inputs.size(0), &g) : order);
  }
  int64_t size() const override { return x.size(0); }
  nn::Example get(int64_t i) const override { return {x[i], y[i]}; }
  std::string name() const override { return "ShuffledOnce"; }
};

debug::RunReport train_shuffled_once(bool apart) {
  manual_seed(41);
  const dtest::XY all = dtest::blobs(200, 3, 6, 7, 2.0);
  Split d = dtest::loaders(all.x.narrow(0, 0, 480), all.y.narrow(0, 0, 480), all.x.narrow(0, 480, 120),
                           all.y.narrow(0, 480, 120));
  d.train = std::make_shared<nn::DataLoader>(
      std::make_shared<ShuffledOnce>(all.x.narrow(0, 0, 480), all.y.narrow(0, 0, 480), apart),
      nn::DataLoaderOptions().batch_size(32).shuffle(true).seed(3));
  auto model = std::make_shared<Mlp>();
  nn::CrossEntropyLoss ce;
  optim::Adam opt(model->parameters(), optim::AdamOptions(2e-3));
  return dtest::train_own_loop(*model, ce, opt, d, 8);
}

}  // namespace

TEST_CASE("inputs and labels shuffled apart inside the dataset: M15 leads, the flat loss is not the rate") {
  const debug::RunReport r = train_shuffled_once(true);
  expect_lead(r, "M15", "inputs-ignored", {"L1"});
  // O6 read the flat loss and the weights' steps: they move, so the rate is not the cause.
  const debug::Finding* flat = first_of(r, "O6", debug::Kind::LrTooLow);
  REQUIRE_MESSAGE(flat != nullptr, r.str(true));
  CHECK(flat->severity == debug::Severity::Info);
  CHECK(dtest::ev(*flat, "median update/weight ratio of the weight matrices") >= 1e-3);
}

TEST_CASE("the same dataset shuffled with one order for inputs and labels: silent") {
  expect_clean(train_shuffled_once(false));
}
