// The autograd explorer: one self-contained HTML page (data, styles, scripts and the dagre
// layout library inside; no server, no network) that draws the graph of a real forward and
// loss, steps through the forward and through the backward in the order the engine ran it,
// shows how gradient contributions sum where a tensor is used twice, draws the partial graph
// of a forward that failed, and replays a recorded training run. docs/explore.md shows it.
//
//   debug::explore(*model, x, y, loss_fn, "page.html");   // your model, one batch, your loss
//
// Raw ops (a lab, a hand-written backward): record, then write.
//
//   debug::ExploreCapture cap;                              // records from here
//   Tensor loss = ((a * b) + a).sum();
//   loss.backward();
//   cap.stop();
//   debug::write_explore("page.html", debug::explore_json(cap, loss, {}));
//
// The JSON (explore_json; `gradsleuth explore --json`) names every node: an op by its name and
// its rank among the forward's ops of that name ("matmul#3"), a parameter by its path ("0.weight")
// or its tensor name, so a message can point at one ("your gradient for w1 differs first at node
// matmul#3"). Its format is documented in docs/explore.md.
#pragma once
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/graph_trace.h"
#include "core/saved_capture.h"
#include "core/tensor.h"
#include "debug/checks/hooks.h"
#include "debug/evidence/finding.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace gradsleuth::debug {

class GraphModuleTags;

// Records a forward and its backward on this thread while it lives (or until stop()): the
// nodes in order with their layouts (core/graph_trace.h), what each saved (SavedCapture), and,
// with a model, the module each op ran in and the modules open when a forward failed.
class ExploreCapture {
 public:
  ExploreCapture();
  explicit ExploreCapture(nn::Module& model);
  ~ExploreCapture();
  ExploreCapture(const ExploreCapture&) = delete;
  ExploreCapture& operator=(const ExploreCapture&) = delete;

  // The forward (or the loss, or the backward) raised: keep the error, to draw the graph up to
  // the op that failed and mark it. `phase`: "forward", "loss" or "backward".
  void failed(const std::exception& e, const std::string& phase = "forward");
  void stop();

  const autograd::GraphTrace& trace() const { return trace_; }
  const SavedCapture& saved() const { return saved_; }
  nn::Module* model() const { return model_; }

  struct Failure {
    std::string op, message, phase;
    std::string module;                  // the innermost module open when it failed ("2 (Linear)"; "" none)
    const Node* module_input = nullptr;  // that module's input's grad_fn (null: a leaf or constant)
    bool module_input_leaf = false;
  };
  const std::optional<Failure>& failure() const { return failure_; }

 private:
  SavedCapture saved_;
  autograd::GraphTrace trace_;
  nn::Module* model_ = nullptr;
  std::unique_ptr<GraphModuleTags> tags_;
  HookSet hooks_;
  struct Open {
    std::string label;
    const Node* input = nullptr;
  };
  std::vector<Open> open_;  // modules whose forward began and has not returned
  std::optional<Failure> failure_;
};

// What a training run records for the replay at the monitor's sampled steps, on top of the
// monitor's own history (gradient norms, update ratios, dead fractions, losses): each
// parameter's norm, and each layer's output mean, standard deviation and saturation (the
// fraction of a Tanh or Sigmoid's outputs within 1% of its bounds).
struct ReplaySeries {
  std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>> weight_norm;  // per parameter
  std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>> out_mean, out_std,
      saturation;  // per layer
};

// Attach before training; it samples every `every` optimizer steps (the monitor's default, 10):
// a forward hook per layer that returns at once on other steps, one norm per parameter after
// the sampled step. The model and optimizer must outlive it.
class ReplayRecorder {
 public:
  ReplayRecorder(nn::Module& model, optim::Optimizer& optimizer, int64_t every = 10);
  ~ReplayRecorder();
  ReplayRecorder(const ReplayRecorder&) = delete;
  ReplayRecorder& operator=(const ReplayRecorder&) = delete;
  const ReplaySeries& series() const { return s_; }

 private:
  void add(std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>>& v, const std::string& name,
           double value);
  nn::Module& model_;
  optim::Optimizer& opt_;
  int64_t every_, steps_ = 0;
  HookSet hooks_;
  std::vector<size_t> opt_hooks_;
  ReplaySeries s_;
};

// A training run as the replay draws it: the step losses and, per name, (step, value) series.
// replay_from() fills it from the monitor's TrainingHistory (debug/checks/run_check.h).
using NamedSeries = std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>>;
struct ReplayData {
  std::vector<double> loss, epoch_train_loss, epoch_val_loss;
  NamedSeries grad_norm, update_ratio, dead;  // the monitor's: per parameter, per parameter, per ReLU layer
  ReplaySeries extra;                         // the ReplayRecorder's
};
// From a TrainingHistory (any type with its members) and, when given, a ReplayRecorder's series.
template <class History>
ReplayData replay_from(const History& h, const ReplaySeries* extra = nullptr) {
  ReplayData r;
  r.loss = h.step_losses;
  r.epoch_train_loss = h.epoch_train_loss;
  r.epoch_val_loss = h.epoch_val_loss;
  r.grad_norm = h.grad_norms;
  r.update_ratio = h.update_ratio;
  r.dead = h.dead_fraction;
  if (extra) r.extra = *extra;
  return r;
}

struct ExploreOptions {
  std::string title = "gradsleuth explore";
  // Leaves are named by these (Module::named_parameters()); else by their tensor name.
  std::vector<std::pair<std::string, Tensor>> params;
  std::optional<ReplayData> replay;  // the training run to replay (replay_from(history, &recorder.series()))
  const Report* findings = nullptr;  // linked to the nodes they name; the lead marked
  size_t max_values = 64;            // a gradient of up to this many elements is written out in full
  size_t max_nodes = 4000;           // larger graphs are cut (the JSON says how many nodes were left out)
};

// The page's data as one JSON object (docs/explore.md): nodes, edges, modules, the forward and
// backward orders, each backward step's contributions and sum, the leaves' .grad, the failure,
// the replay and the findings. `root` is the loss (undefined when the forward failed).
std::string explore_json(const ExploreCapture& cap, const Tensor& root, const ExploreOptions& o);

// The whole page with `json` inside it.
std::string render_explore_html(const std::string& json, const std::string& title);
// The dagre layout library's browser bundle that the page embeds: built in where Debian's
// node-dagre-layout was installed when the build was configured (scripts/setup.sh installs it;
// ./run.sh's set-up leaves it out), else read now from kDagreSystemPath.
inline constexpr const char* kDagreSystemPath = "/usr/share/nodejs/dagre/dist/dagre.min.js";
std::string dagre_source();
// The bundle read from `path`: an error naming the package and the fix when it cannot be read.
std::string read_dagre(const std::string& path);
// Writes the page atomically; returns its size in bytes.
size_t write_explore(const std::string& path, const std::string& json, const std::string& title = "gradsleuth explore");

using ExploreLoss = std::function<Tensor(const Tensor& output, const Tensor& target)>;

// One forward of `model` on x, the loss against y, and its backward, recorded and written to
// `path` (skipped when empty; the JSON is also stored in *json when given). The model's
// gradients are as they were afterwards. A forward, loss or backward that raises is drawn up to
// where it failed (the page still written); the function then returns the error's message, else "".
std::string explore(nn::Module& model, const Tensor& x, const Tensor& y, const ExploreLoss& loss_fn,
                    const std::string& path, ExploreOptions o = {}, std::string* json = nullptr);

// The node names of the JSON for the nodes a recorded backward ran, keyed by node: what a grader
// uses to say "your gradient differs first at node matmul#3".
std::vector<std::pair<const Node*, std::string>> explore_node_names(const ExploreCapture& cap, const Tensor& root,
                                                                    const ExploreOptions& o = {});

}  // namespace gradsleuth::debug
