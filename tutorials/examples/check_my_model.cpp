// Checking your own model: the example of docs/checks.md, built and run as a test.
#include <gradsleuth.h>

#include <iostream>
using namespace gradsleuth;

struct Net : nn::Module {  // a model written by hand: Linear, ReLU, Linear
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(8, 32));
  std::shared_ptr<nn::ReLU> act = register_module("act", std::make_shared<nn::ReLU>());
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 3));
  Net() : Module("Net") {}
  Tensor forward(const Tensor& x) override { return (*fc2)((*act)((*fc1)(x))); }
};

int main() {
  manual_seed(0);
  Tensor centres = randn({3, 8}) * 2.0;  // three classes of points around three centres
  auto blobs = [&](int64_t n) {
    Tensor y = randint(0, 3, {n});
    return std::make_shared<nn::TensorDataset>(index_select(centres, 0, y) + randn({n, 8}), y);
  };
  nn::DataLoader train(blobs(2048), nn::DataLoaderOptions().batch_size(64).shuffle(true));
  nn::DataLoader val(blobs(512), nn::DataLoaderOptions().batch_size(256));
  nn::CrossEntropyLoss loss;

  // 1. One call: the data checks, the gate, 3 epochs with a Trainer, the end-of-run diagnoses.
  auto model = std::make_shared<Net>();
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  debug::DiagnoseOptions o;
  o.epochs = 3;
  debug::RunReport r = debug::diagnose(*model, loss, opt, train, &val, nullptr, o);
  std::cout << r.str();

  // 2. Your own loop: attach a Session first (data checks and gate run now), finish() at the end.
  auto model2 = std::make_shared<Net>();
  optim::Adam opt2(model2->parameters(), optim::AdamOptions(1e-2));
  debug::Session dbg(*model2, loss, opt2, {.train = &train, .val = &val});
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (const nn::Batch& b : train) {
      opt2.zero_grad();
      loss((*model2)(b.x), b.y).backward();
      opt2.step();  // the Session hears the loss and the step through hooks
    }
    dbg.epoch();  // evaluates on val and records the epoch
  }
  debug::RunReport r2 = dbg.finish();
  std::cout << r2.str();
  return r.fired_checks().empty() && r2.fired_checks().empty() ? 0 : 1;  // 1 when a check fired
}
