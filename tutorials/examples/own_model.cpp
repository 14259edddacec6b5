// `gradsleuth doctor` on your own code: a model written by hand, trained by its own loop, with
// a debug::Session attached. It prints the report (what fired, where, why, the fix) and writes
// the HTML report (plots and findings) to --out. A bug can be switched on to see what the checks
// say about it; tests/test_example_own_model.cpp checks the report for each and silence without.
//
//   own_model [--bug no-zero-grad|eval-mode|inplace] [--out DIR] [--json]
//     no-zero-grad  the loop never calls optimizer.zero_grad(): gradients pile up (O5)
//     eval-mode     the evaluation forgets model.eval(): dropout stays on while validating (M2)
//     inplace       the hand-written Gate layer scales its sigmoid in place, after the sigmoid
//                   saved it for backward: every backward fails (M20)
#include <gradsleuth.h>

#include <cstring>
#include <iostream>
#include <string>

using namespace gradsleuth;

namespace {

std::string bug;  // "" (no bug), "no-zero-grad", "eval-mode" or "inplace"

// A hand-written layer: x * 2 sigmoid(x), a smooth gate (like SiLU, scaled).
struct Gate : nn::Module {
  Gate() : Module("Gate") {}
  Tensor forward(const Tensor& x) override {
    Tensor g = sigmoid(x);
    // BUG inplace: mul_ changes the output the sigmoid saved for its backward. Correct: g * 2.0.
    if (bug == "inplace")
      g.mul_(2.0);
    else
      g = g * 2.0;
    return x * g;
  }
};

// The model: Linear, Gate, Dropout, Linear, with named parts (findings name them: "drop (Dropout)").
struct Net : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(16, 64));
  std::shared_ptr<Gate> gate = register_module("gate", std::make_shared<Gate>());
  std::shared_ptr<nn::Dropout> drop = register_module("drop", std::make_shared<nn::Dropout>(0.2));
  std::shared_ptr<nn::Linear> fc2 = register_module("fc2", std::make_shared<nn::Linear>(64, 4));
  Net() : Module("Net") {}
  Tensor forward(const Tensor& x) override { return (*fc2)((*drop)((*gate)((*fc1)(x)))); }
};

// Four classes of points in 16 dimensions, each around its own centre.
std::shared_ptr<nn::TensorDataset> blobs(const Tensor& centres, int64_t n) {
  Tensor y = randint(0, centres.size(0), {n});
  return std::make_shared<nn::TensorDataset>(index_select(centres, 0, y) + randn({n, centres.size(1)}), y);
}

}  // namespace

int main(int argc, char** argv) {
  std::string out = "runs/own_model";
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--bug" && i + 1 < argc)
      bug = argv[++i];
    else if (a == "--out" && i + 1 < argc)
      out = argv[++i];
    else if (a == "--json")
      json = true;
    else {
      std::cerr << "usage: own_model [--bug no-zero-grad|eval-mode|inplace] [--out DIR] [--json]\n";
      return 2;
    }
  }
  if (!bug.empty() && bug != "no-zero-grad" && bug != "eval-mode" && bug != "inplace") {
    std::cerr << "own_model: unknown --bug '" << bug << "': use no-zero-grad, eval-mode or inplace\n";
    return 2;
  }
  manual_seed(1);
  const Tensor centres = randn({4, 16}) * 1.5;
  nn::DataLoader train(blobs(centres, 2048), nn::DataLoaderOptions().batch_size(64).shuffle(true).seed(1));
  nn::DataLoader val(blobs(centres, 512), nn::DataLoaderOptions().batch_size(256));
  auto model = std::make_shared<Net>();
  nn::CrossEntropyLoss loss;
  optim::Adam opt(model->parameters(), optim::AdamOptions(3e-3));

  // Attach before the loop: the data checks and the pre-training gate run now, on the first batch.
  debug::DiagnoseOptions o;
  o.report_dir = out;
  o.title = "own_model" + (bug.empty() ? std::string() : " with --bug " + bug);
  debug::Session dbg(*model, loss, opt, {.train = &train, .val = &val}, o);
  try {
    for (int epoch = 0; epoch < 4; ++epoch) {
      double total = 0.0;
      int64_t n = 0;
      for (const nn::Batch& b : train) {
        if (bug != "no-zero-grad") opt.zero_grad();
        Tensor l = loss((*model)(b.x), b.y);
        l.backward();
        opt.step();
        total += l.item<double>();
        ++n;
      }
      // The evaluation, by hand: eval mode and no gradients.
      if (bug != "eval-mode") model->eval();
      double vloss = 0.0, hits = 0.0, seen = 0.0;
      {
        NoGradGuard ng;
        for (const nn::Batch& b : val) {
          Tensor pred = (*model)(b.x);
          vloss += loss(pred, b.y).item<double>() * static_cast<double>(b.size());
          hits += sum(eq(argmax(pred, 1), b.y).to(kFloat64)).item<double>();
          seen += static_cast<double>(b.size());
        }
      }
      model->train();
      dbg.epoch(total / static_cast<double>(n), vloss / seen, hits / seen);
    }
  } catch (const std::exception& e) {
    dbg.error(e);  // the loop's error becomes a finding (M20 for an in-place error)
  }
  debug::RunReport r = dbg.finish();
  if (json)
    std::cout << r.json() << "\n";
  else
    std::cout << r.str() << "report: " << r.html_path << "\n";
  return 0;
}
