// D8 shuffling and batch diversity (see data_checks.h).
#include "debug/checks/data/data_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/data/data_util.h"
#include "debug/checks/run_check.h"

namespace gradsleuth::debug {

using namespace data_detail;

// ---- D8 shuffling / batch diversity ---------------------------------------------------------

std::vector<int64_t> spread_batches(const nn::DataLoader& loader, int64_t n) {
  const int64_t nb = loader.num_batches();
  n = std::min(n, nb);
  std::vector<int64_t> out;
  if (n <= 0) return out;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = n == 1 ? 0 : static_cast<int64_t>(std::llround(static_cast<double>(k) * (nb - 1) / (n - 1)));
    if (out.empty() || out.back() != i) out.push_back(i);
  }
  return out;
}

std::vector<Finding> check_batch_diversity(const nn::DataLoader& loader, const DataCheckOptions& opts) {
  std::vector<nn::Batch> batches;
  for (int64_t i : spread_batches(loader, opts.diversity_batches)) batches.push_back(loader.batch(loader.epoch(), i));
  return diversity(batches, loader, opts);
}

// ---- D8 over the whole run: the same batch fed again at every step ------------------------------
uint64_t batch_fingerprint(const Tensor& x) {
  // A 64-bit FNV-1a hash, over 32-bit words, of the shape and 64 values spread evenly over the
  // whole batch (two batches of images that start with the same blank rows still differ), read in
  // place for a contiguous float32 tensor on the host; any other tensor (token ids, 16-bit floats,
  // a strided view, one on a GPU) gives the same 64 values gathered by index, as float64. Eight
  // bytes a step, however long the run.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* p, size_t n) {  // n: a multiple of 4 bytes
    for (size_t i = 0; i < n; i += 4) {
      uint32_t w = 0;
      std::memcpy(&w, static_cast<const unsigned char*>(p) + i, 4);
      h = (h ^ w) * 1099511628211ull;
    }
  };
  for (int64_t d : x.shape()) mix(&d, sizeof d);
  const int64_t n = x.numel();
  if (n == 0) return h;
  if (x.device().is_cpu() && x.dtype() == kFloat32 && x.is_contiguous()) {
    const float* p = x.data_ptr<float>();
    const int64_t k = std::min<int64_t>(n, 64);
    for (int64_t i = 0; i < k; ++i) mix(&p[i * (n - 1) / std::max<int64_t>(k - 1, 1)], sizeof(float));
    return h;
  }
  NoGradGuard ng;
  const int64_t k = std::min<int64_t>(n, 64);
  std::vector<int64_t> at(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) at[static_cast<size_t>(i)] = i * (n - 1) / std::max<int64_t>(k - 1, 1);
  const Tensor picked =
      index_select(x.detach().reshape({n}), 0, tensor(at, {k}).to(x.device())).to(kFloat64).cpu().contiguous();
  const double* v = picked.data_ptr<double>();
  for (int64_t i = 0; i < k; ++i) mix(&v[i], sizeof(double));
  return h;
}

std::vector<Finding> check_repeated_batches(const std::vector<uint64_t>& fp, int64_t loader_batches) {
  // A training loader with several batches, yet every step (or nearly) trained on the same batch
  // as the step before: the loop reads one batch and reuses it.
  if (loader_batches < 2 || fp.size() < 10) return {};
  int64_t repeats = 0;
  for (size_t i = 1; i < fp.size(); ++i) repeats += fp[i] == fp[i - 1] ? 1 : 0;
  const double frac = static_cast<double>(repeats) / static_cast<double>(fp.size() - 1);
  if (frac < 0.9) return {};
  Finding f = detail::make("D8", Severity::Warning,
                           "the same batch was fed again at " + std::to_string(repeats) + " of " +
                               std::to_string(fp.size() - 1) + " steps, though the training loader has " +
                               std::to_string(loader_batches) + " batches: the loop trains on one batch");
  f.end_of_run = true;
  f.evidence = {{"steps whose input equals the step before's", frac, ">= 0.9 warns"},
                {"batches in the training loader", static_cast<double>(loader_batches), ""}};
  f.cause =
      "the batch is read once, before the loop (a first batch kept for a test, an iterator never advanced), "
      "and every step reuses it: the model memorises it instead of learning the data";
  f.fix = "read a new batch inside the loop: for (const nn::Batch& b : loader) { ... }";
  return {f};
}

namespace {
class RepeatedBatchRunCheck final : public RunCheck {
 public:
  explicit RepeatedBatchRunCheck(int64_t loader_batches) : loader_batches_(loader_batches) {}
  std::string ids() const override { return "D8"; }
  uint32_t events() const override { return RunEvent::Forward | RunEvent::Finish | RunEvent::Series; }
  void forward(RunContext& c, const Tensor& x) override {
    // The first training forward of each step (the monitor sets in_step after the Forward event).
    if (GradMode::is_enabled() && x.defined() && !c.in_step) inputs_.push_back(batch_fingerprint(x));
  }
  void finish(RunContext& c) override {
    if (loader_batches_ < 2 || inputs_.size() < 10) return;
    c.note_ran("D8");
    c.add_all(check_repeated_batches(inputs_, loader_batches_));
  }
  void series(TrainingHistory& h) const override { h.step_inputs = inputs_; }

 private:
  int64_t loader_batches_;
  std::vector<uint64_t> inputs_;
};
}  // namespace

std::unique_ptr<RunCheck> make_repeated_batch_run_check(const MonitorOptions& o) {
  return std::make_unique<RepeatedBatchRunCheck>(o.loader_batches);
}

}  // namespace gradsleuth::debug
