// End to end on real data: a small MLP trained for one epoch on 2,000
// Fashion-MNIST images must beat 0.6 test accuracy (chance is 0.1). Fails, saying
// how to install it, when dataset-fashion-mnist is not installed.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/generator.h"
#include "fashion_mnist_required.h"
#include "nn/nn.h"
#include "optim/optim.h"

namespace nn = gs::nn;
namespace optim = gs::optim;

TEST_CASE("Fashion-MNIST: 2,000 images, one epoch, MLP 784-128-10 beats 0.6 test accuracy") {
  testdata::require_fashion_mnist();
  const auto t0 = std::chrono::steady_clock::now();
  gs::manual_seed(1);
  nn::DatasetPtr train = nn::take(nn::load_fashion_mnist("train"), 2000);
  nn::DatasetPtr test = nn::load_fashion_mnist("test");
  auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 128),
                                              std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10));
  optim::Adam opt(net->parameters(), optim::AdamOptions(2e-3));
  nn::DataLoader train_loader(train, nn::DataLoaderOptions().batch_size(32).shuffle(true).seed(1));
  nn::DataLoader test_loader(test, nn::DataLoaderOptions().batch_size(500));
  optim::FitResult r = optim::fit(*net, opt, train_loader, &test_loader,
                                  optim::TrainerOptions().epochs(1).progress(optim::Progress::Off));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("test accuracy " << r.last().val_accuracy << ", test loss " << r.last().val_loss << ", " << secs << " s");
  CHECK(r.last().val_accuracy > 0.6);
  CHECK(secs < 60.0);
}
