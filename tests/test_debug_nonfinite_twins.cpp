// A NaN that an update made, against one an op made: a regression loss written as a function and
// summed over the batch and the outputs, at an SGD rate meant for a mean, blows the weights up
// within a few steps; the first Linear then passes on the NaN its weights hold, and no op of the
// forward is to blame. Averaged, the same loop trains.
#include <doctest/doctest.h>

#include <memory>

#include <gradsleuth.h>

#include "debug_test_util.h"
#include "diagnosis_test_util.h"

using namespace gradsleuth;
using dtest::expect_clean;
using dtest::expect_lead;
using dtest::Split;

namespace {

debug::RunReport train_regression(bool summed) {
  manual_seed(45);
  Generator g(15);
  const Tensor x = randn({1000, 8}, {}, &g), w = randn({8, 4}, {}, &g);
  const Tensor y = tanh(matmul(x, w) / 3.0) * 2.0 + 0.05 * randn({1000, 4}, {}, &g);
  Split d;
  d.train =
      std::make_shared<nn::DataLoader>(std::make_shared<nn::TensorDataset>(x.narrow(0, 0, 800), y.narrow(0, 0, 800)),
                                       nn::DataLoaderOptions().batch_size(64).shuffle(true).seed(45));
  d.val = std::make_shared<nn::DataLoader>(
      std::make_shared<nn::TensorDataset>(x.narrow(0, 800, 200), y.narrow(0, 800, 200)),
      nn::DataLoaderOptions().batch_size(200));
  auto loss = [summed](const Tensor& p, const Tensor& t) {
    return summed ? square(p - t).sum() : square(p - t).mean();
  };
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 32), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(32, 32), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(32, 4));
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  return dtest::train_own_loop(*model, loss, opt, d, 10);
}

}  // namespace

TEST_CASE("a loss summed over the batch blows the weights up: L6 leads, the layer holding NaN is no source") {
  const debug::RunReport r = train_regression(true);
  expect_lead(r, "L6", "sum-reduction", {"O4"});
  for (const debug::Finding& f : r.findings.findings()) CHECK_MESSAGE(f.check != "M12", f.str());
}

TEST_CASE("the same loss averaged: silent") { expect_clean(train_regression(false)); }
