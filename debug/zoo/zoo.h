// The bug zoo: trains the clean reference and each catalogued bug (nn/bugs.h,
// docs/catalog.md) on Fashion-MNIST with every check attached, and reports
// which checks fired, whether the intended one caught the bug, and what the
// bug did to training. `gradsleuth zoo` prints it; `gradsleuth doctor` runs
// one variant with a full report.
//
//   debug::zoo::Options o = debug::zoo::Options::quick();
//   debug::zoo::Result r = debug::zoo::run({nn::Bug::B13, nn::Bug::B28}, o);
//   std::cout << debug::zoo::matrix(r);
//
// A variant is built by a Recipe: the data pipeline, the model, the loss, the
// optimizer and the training loop of the reference, each with the bugs that
// live there switched on (the bug's `lives_in` column).
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "debug/evidence/finding.h"
#include "debug/report/graph.h"
#include "debug/run/monitor.h"
#include "nn/bugs.h"
#include "nn/data.h"
#include "nn/module.h"

namespace gradsleuth::debug::zoo {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The two tasks on Fashion-MNIST: the 10 classes, and "is it footwear?"
// (sandal, sneaker, ankle boot) for the regression/binary bugs B01 and B09.
enum class Task { Classes, Footwear };

struct Options {
  int64_t train_examples = 60000;  // the first N training images
  int64_t test_examples = 10000;   // the first N test images (evaluation)
  int64_t steps = 1000;            // optimizer steps per variant (the budget)
  int64_t batch_size = 64;
  double lr = 1e-3;  // Adam
  uint64_t seed = 1;
  int64_t monitor_every = 10;   // the monitor's sampled steps
  int64_t overfit_steps = 150;  // the gate's overfit-one-batch (M14)
  std::string model = "mlp";    // "mlp" or "cnn"
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  bool gate = true;       // run the pre-training gate (W2)
  bool footwear = false;  // the footwear task even without B01/B09/B40 (its clean reference)
  // The precision the recipe trains in: "float32"; "float16" (float16 autocast, a GradScaler, the
  // gradients unscaled and then clipped to norm 5); "bfloat16" (bfloat16 parameters, Adam with
  // float32 master weights). The mixed-precision bugs B35-B40 train in theirs whatever this says;
  // set it for their clean references.
  std::string precision = "float32";
  // Where the models train and every check runs: kCPU, or kCUDA (the CUDA backend, on a GPU or its
  // CPU emulator; register it first with gradsleuth::cuda::init() from cuda/cuda.h). The data
  // pipeline and its checks (D1-D10, D12-D16) stay on the host; M13 and M18 check a CPU copy of the model.
  Device device = kCPU;
  // Variants trained at once by run(), each on its own thread with the OpenMP thread count of the
  // caller (1: one after another). The results do not depend on it: each variant seeds and
  // checks itself alone. On kCUDA, 1 whatever this says.
  int jobs = 1;
  static Options quick();  // 6000 / 2000 images, 150 steps
  static Options full();   // 60000 / 10000 images, 1000 steps
};

// Everything one variant trains with.
struct Variant {
  std::string id;  // "clean", "clean-footwear", "B13"
  nn::BugSet bugs;
  Task task = Task::Classes;
  int64_t num_classes = 10;
  std::shared_ptr<nn::Module> model;
  std::shared_ptr<nn::Loss> loss;
  std::unique_ptr<optim::Optimizer> optimizer;
  optim::TrainerOptions trainer;
  std::shared_ptr<nn::DataLoader> train, test;
  nn::DatasetPtr train_data;                   // what the loader reads (D4's reference)
  std::shared_ptr<nn::Normalizer> normalizer;  // null when the pipeline has none (B25)
  Tensor test_x;                               // the evaluation inputs after the pipeline (D10, M18)
  std::vector<std::string> notes;              // how the recipe set the bug up
  Device device = kCPU;                        // where the model lives and trains (Options::device)
  std::string precision = "float32";           // Options::precision, or the one the bugs need
  std::unique_ptr<optim::GradScaler> scaler;   // the float16 recipe's (trainer.grad_scaler() points here)
};

// The precision `bugs` train in (B35-B37, B39, B40: "float16"; B38: "bfloat16"), else o.precision.
// Refuses (gs::Error) a set of bugs that needs two, or an unknown o.precision.
std::string precision_of(const nn::BugSet& bugs, const Options& o);

// Builds the reference recipe with `bugs` switched on (and the task they need), with the model
// on o.device. Throws when o.device has no backend registered.
Variant build(const nn::BugSet& bugs, const Options& o);

// The recipe's model alone with `width` hidden units (the MLP's hidden layers,
// the CNN's fully connected layer; the reference uses 128): for the capacity
// check (M16). Layer-level bugs are injected; head-level ones (B08, B10, ...) are not.
nn::ModulePtr make_model(const nn::BugSet& bugs, const Options& o, int64_t width, int64_t num_outputs = 10);

struct RunResult {
  std::string id;
  std::string title;                  // the bug's title, or "clean reference"
  std::vector<std::string> intended;  // the bug's intended checks
  std::vector<std::string> fired;     // every check that fired (warning or error)
  bool caught = false;                // an intended check fired
  double test_accuracy = kNaN;
  double final_loss = kNaN;  // mean training loss of the last 20 steps
  double seconds = 0.0;
  int64_t steps = 0;
  std::string reference;  // the clean run to compare with ("clean" or "clean-footwear")
  std::string stopped;    // why training stopped early ("" if it ran its budget)
  Report report;
  TrainingHistory history;
};

// Trains one variant with every check attached.
// progress(text) is called with a one-line status now and then.
RunResult run_variant(const nn::BugSet& bugs, const Options& o,
                      const std::function<void(const std::string&)>& progress = nullptr);
// The same on a variant built (and possibly adjusted) by the caller.
RunResult run_variant(Variant& v, const Options& o, const std::function<void(const std::string&)>& progress = nullptr);

struct Result {
  RunResult clean, clean_footwear;  // clean_footwear runs only when a footwear bug is selected
  std::vector<RunResult> bugs;
  double seconds = 0.0;
  Options options;
};

// Where a run is: called after each variant (done of total, the variant just finished
// and a one-line summary of it), so a caller can draw a progress bar with an ETA.
struct Progress {
  size_t done = 0, total = 0;
  const RunResult* last = nullptr;
  std::string line;  // "B13: caught, lead M6 (fired: M6, M14), test accuracy 0.61, 0.9 s"
};

// The bugs of the catalog that the model's recipe reproduces (the table's recipes
// column), in order: the default selection of `gradsleuth zoo --model M`.
std::vector<nn::Bug> catalog_for(const std::string& model);

// Refuses (gs::Error) a bug the model's recipe cannot reproduce (the table's recipes column;
// e.g. the CNN has no BatchNorm for B23, and the data-parallel bugs need mpirun): what run()
// checks first, for a caller that wants to refuse before it prints or prepares anything.
void check_recipe(const std::vector<nn::Bug>& bugs, const std::string& model);

// Trains the clean reference(s) and each bug. A bug the model's recipe cannot
// reproduce is refused before anything trains.
Result run(const std::vector<nn::Bug>& bugs, const Options& o,
           const std::function<void(const Progress&)>& progress = nullptr);

// The autograd graph of the recipe's forward pass and loss on the first `examples` examples of
// its first batch (ops tagged with their modules, saved tensors listed, parameters named), as
// debug::to_dot draws it with `opts`: what `gradsleuth graph` and doctor's report show.
std::string graph_dot(const nn::BugSet& bugs, const Options& o, int64_t examples, DotOptions opts);

// The detection matrix, for a person.
std::string matrix(const Result& r);
// {"clean":{...},"bugs":[{"id":"B01","intended":[...],"fired":[...],"caught":true,...}], ...}
std::string json(const Result& r);

}  // namespace gradsleuth::debug::zoo
