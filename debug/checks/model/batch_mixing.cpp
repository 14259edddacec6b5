// M6 batch independence: the Jacobian of one output row with respect to every input row, and a next-step
// model's outputs against a later step's input (see model_checks.h).
#include "debug/checks/model/model_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/hooks.h"
#include "debug/checks/model/behaviour.h"
#include "debug/checks/model/model_util.h"
#include "debug/evidence/tensor_stats.h"
#include "nn/activation.h"
#include "nn/conv.h"
#include "nn/dropout.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/normalization.h"
#include "optim/adam.h"

namespace gradsleuth::debug {

using namespace model_detail;

// ---- M6 ------------------------------------------------------------------------------------
namespace {
// The output's first dim is neither the batch nor a multiple of it: its rows cannot be given to the input's
// examples.
struct RowsMismatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Which of the output's rows belong to one example. An output of k x B rows for a batch of B is a per-token
// output flattened ([B*T, C], a tagger's) or a batch run k times in one forward (R-Drop's [2B, C]): its rows are
// batch-major (example e owns rows e*k .. e*k+k-1, a view of [B, T, C]) or time-major (rows e, e+B, ..., a view of
// [T, B, C] or a concatenation of k passes). The test tries both and keeps the one that couples fewer examples: a
// model that mixes its batch couples them under both.
struct RowGrouping {
  int64_t per = 1;  // output rows per example
  bool time_major = false;
  std::vector<int64_t> rows(int64_t e, int64_t B) const {
    std::vector<int64_t> r;
    for (int64_t t = 0; t < per; ++t) r.push_back(time_major ? t * B + e : e * per + t);
    return r;
  }
  // Each example's norm out of each output row's: the root of the sum of its rows' squares.
  std::vector<double> per_example(const std::vector<double>& row_norm, int64_t B) const {
    std::vector<double> out(static_cast<size_t>(B), 0.0);
    for (int64_t e = 0; e < B; ++e) {
      double s = 0.0;
      for (int64_t r : rows(e, B)) s += row_norm[static_cast<size_t>(r)] * row_norm[static_cast<size_t>(r)];
      out[static_cast<size_t>(e)] = std::sqrt(s);
    }
    return out;
  }
};
std::vector<RowGrouping> row_groupings(const Tensor& out, const Tensor& x) {
  const int64_t B = x.size(0);
  if (!(out.dim() >= 1 && out.size(0) >= B && out.size(0) % B == 0))
    throw RowsMismatch("the model's output " + shape_str(out.shape()) + " has " +
                       (out.dim() >= 1 ? std::to_string(out.size(0)) : std::string("no")) + " rows for a batch of " +
                       std::to_string(B));
  const int64_t per = out.size(0) / B;
  if (per == 1) return {RowGrouping{}};
  return {RowGrouping{per, false}, RowGrouping{per, true}};
}

struct MixingResult {
  bool has_grad = false;
  double row_i = 0.0, other_max = 0.0;
  int64_t coupled = 0;
  RowGrouping grouping;
};

// Each example's share of the probe (`n`, one value per example) against example i's: another example above
// tol x i's, and above `floor`, is coupled.
void tally(MixingResult& r, const std::vector<double>& n, int64_t i, double tol, double floor = 0.0) {
  r.row_i = n[static_cast<size_t>(i)];
  for (size_t j = 0; j < n.size(); ++j) {
    if (static_cast<int64_t>(j) == i) continue;
    r.other_max = std::max(r.other_max, n[j]);
    if (n[j] > tol * std::max(r.row_i, 1e-30) && n[j] > floor) ++r.coupled;
  }
}

// Of the same probe under each grouping, the one that couples fewest examples (the first on a tie).
MixingResult least_coupled(const std::vector<MixingResult>& rs) {
  size_t best = 0;
  for (size_t k = 1; k < rs.size(); ++k)
    if (rs[k].coupled < rs[best].coupled) best = k;
  return rs[best];
}

MixingResult mixing_once(nn::Module& model, const Tensor& x, int64_t i, double tol) {
  Tensor xi = x.detach().clone().requires_grad_(true);
  Tensor out = model(xi);
  const std::vector<RowGrouping> groupings = row_groupings(out, x);
  std::vector<MixingResult> results;
  // One forward; one gradient of example i's rows per grouping, the graph kept for the next.
  for (size_t k = 0; k < groupings.size(); ++k) {
    MixingResult r;
    r.grouping = groupings[k];
    // A fixed random weighting of example i's outputs: with a plain sum, a softmax
    // head's row (which always sums to 1) would have a zero gradient everywhere.
    const std::vector<int64_t> rows = r.grouping.rows(i, x.size(0));
    Tensor row = rows.size() == 1
                     ? out.select(0, i)
                     : out.index_select(0, tensor(rows, {static_cast<int64_t>(rows.size())}).to(out.device()));
    Generator gen(12345);
    // Drawn on the host and moved: the same weights (and so the same verdict) on every device.
    Tensor w = randn(row.shape(), TensorOptions(row.dtype()), &gen).to(row.device());
    Tensor loss = (row * w).sum();
    if (!loss.requires_grad()) return r;
    const Tensor g = autograd::grad({loss}, {xi}, {}, k + 1 < groupings.size(), false, true).front();
    if (!g.defined()) return r;
    r.has_grad = true;
    tally(r, row_norms(g), i, tol);
    results.push_back(r);
  }
  return least_coupled(results);
}

// The same question for an input that cannot carry a gradient (token ids, any integer input): row
// i's input is replaced by another example's (the next row whose input differs), the batch runs
// again without gradients, and each output row's change is measured against the unchanged batch's.
// row_i is row i's change; another row that changes by more than tol x row_i, and by more than 10x
// what the unchanged batch run twice moves, is coupled.
MixingResult mixing_by_substitution(nn::Module& model, const Tensor& x, int64_t i, double tol) {
  MixingResult r;
  NoGradGuard ng;
  const int64_t B = x.size(0);
  const Tensor xi = x.select(0, i);
  int64_t donor = -1;
  for (int64_t k = 1; k < B && donor < 0; ++k) {
    const int64_t j = (i + k) % B;
    if (!equal(x.select(0, j), xi)) donor = j;
  }
  if (donor < 0) return r;  // every example's input is the same: nothing to substitute
  const Tensor first = model(x);
  const std::vector<RowGrouping> groupings = row_groupings(first, x);
  // The batch again, unchanged: a model that carries state from call to call (M2's state-between-calls)
  // moves every row by itself, and a row that moves no more than 10x that is not coupled to row i.
  const Tensor base = model(x);
  const std::vector<double> drift_rows = row_norms(base.to(kFloat64) - first.to(kFloat64));
  Tensor x2 = x.clone();
  x2.select(0, i).copy_(x.select(0, donor));
  const Tensor changed = model(x2);
  const std::vector<double> change_rows = row_norms(changed.to(kFloat64) - base.to(kFloat64));
  std::vector<MixingResult> results;
  for (const RowGrouping& g : groupings) {
    MixingResult r;
    r.grouping = g;
    r.has_grad = true;
    double drift = 0.0;
    for (double d : g.per_example(drift_rows, B)) drift = std::max(drift, d);
    tally(r, g.per_example(change_rows, B), i, tol, 10.0 * drift);
    results.push_back(r);
  }
  return least_coupled(results);
}

// The op of module `m` that makes the batch's rows out of a tensor whose dim 0 was not the
// batch: a view (every reshape is one) from [M, B] to [B, M] where a transpose was meant. Read off
// the autograd graph of `m` run alone on `in`; "" when there is no such op, or more than one.
std::string batch_reshape_op(nn::Module& m, const Tensor& in) {
  const int64_t B = in.size(0);
  Tensor xi = in.detach().clone().requires_grad_(true);
  Tensor out = m(xi);
  if (!out.defined() || !out.grad_fn()) return "";
  std::vector<const Node*> todo{out.grad_fn().get()};
  std::set<const Node*> seen;
  int found = 0;
  while (!todo.empty()) {
    const Node* n = todo.back();
    todo.pop_back();
    if (!n || !seen.insert(n).second) continue;
    const bool into_rows = std::strcmp(n->name(), "view") == 0 && !n->out_shape.empty() && n->out_shape[0] == B &&
                           !n->next_edges.empty() && !n->next_edges[0].shape.empty() && n->next_edges[0].shape[0] != B;
    found += into_rows ? 1 : 0;
    for (const Edge& e : n->next_edges) todo.push_back(e.fn.get());
  }
  return found == 1 ? "view" : "";
}

// Where the batch is mixed: the first leaf module, in the order the forward runs them, whose
// output mixes the rows of its own input (mixing_once on the module alone, with the input it got
// in the forward), as {module label, op} (the op when batch_reshape_op names one). Both "" when
// no module does by itself (the mixing happens between modules, in a model's own forward).
std::pair<std::string, std::string> mixing_module(nn::Module& model, const Tensor& x, int64_t row, double tol) {
  std::vector<std::pair<std::string, nn::ModulePtr>> ran;  // in call order, with their inputs
  std::vector<Tensor> inputs;
  {
    HookSet hooks;
    for (const auto& [path, m] : leaf_modules(model))
      hooks.pre(m, [&ran, &inputs, path = path, m = m](nn::Module&, const Tensor& in) {
        ran.emplace_back(path, m);
        inputs.push_back(in.defined() ? in.detach().clone() : in);
      });
    NoGradGuard ng;
    model(x);
  }
  for (size_t k = 0; k < ran.size(); ++k) {
    const Tensor& in = inputs[k];
    if (!in.defined() || in.dim() < 1 || in.size(0) != x.size(0) || !in.is_floating_point()) continue;
    try {
      if (mixing_once(*ran[k].second, in, row, tol).coupled > 0)
        return {module_label(ran[k].first, *ran[k].second), batch_reshape_op(*ran[k].second, in)};
    } catch (const std::exception&) {
      // An output without the input's batch dim: this module alone cannot be tested.
    }
  }
  return {};
}
// Whether the output holds one entry per example of the batch along a dim past 0 (the (B, B)
// similarity matrix of in-batch pairs that a contrastive loss scores): it follows the batch's size.
bool pairwise_output(nn::Module& model, const Tensor& x) {
  const int64_t B = x.size(0);
  if (B < 3) return false;
  try {
    NoGradGuard ng;
    const Tensor full = model(x), part = model(x.narrow(0, 0, B - 1));
    if (!full.defined() || !part.defined() || full.dim() < 2 || part.dim() != full.dim()) return false;
    for (int64_t d = 1; d < full.dim(); ++d)
      if (full.size(d) == B && part.size(d) == B - 1) return true;
  } catch (const std::exception&) {
  }
  return false;
}
}  // namespace

namespace {
std::vector<Finding> mixing_test(nn::Module& model, const Tensor& x, const ModelCheckOptions& o) {
  // An input without gradients (token ids) is tested by substituting one example's input instead.
  bool by_grad = x.is_floating_point();
  bool substituted = false;  // a float input no gradient reaches, tested by substitution
  const auto probe_row = [&](int64_t r) {
    return by_grad ? mixing_once(model, x, r, o.mixing_tolerance)
                   : mixing_by_substitution(model, x, r, o.mixing_tolerance);
  };
  const int64_t i = std::min<int64_t>(std::max<int64_t>(o.mixing_row, 0), x.size(0) - 1);
  std::vector<Finding> out;
  ModeSnapshot modes(model);
  // Layers whose output depends on the mode, found by their behaviour (a
  // hand-written BatchNorm-like layer counts as nn::BatchNorm1d does).
  const ModeProbe probe = probe_mode_dependence(model, x);
  const bool has_bn = probe.any_deterministic_mode_dependent();

  model.eval();
  // Probe a few rows (the option's, the middle one, the last): a mix such as
  // x[i] - x[0] leaves row 0 alone and shows only on the others.
  const int64_t B = x.size(0);
  std::vector<int64_t> rows{i};
  for (int64_t r : {B / 2, B - 1})
    if (std::find(rows.begin(), rows.end(), r) == rows.end()) rows.push_back(r);
  std::vector<MixingResult> probes;
  for (int64_t r : rows) probes.push_back(probe_row(r));
  // A float input that no gradient reaches, whose values the output still reads (token ids stored as
  // floats into an embedding, a rounding or an argmax first): the test runs by substitution instead.
  if (by_grad && std::none_of(probes.begin(), probes.end(), [](const MixingResult& p) { return p.has_grad; })) {
    std::vector<MixingResult> subs;
    for (int64_t r : rows) subs.push_back(mixing_by_substitution(model, x, r, o.mixing_tolerance));
    if (std::any_of(subs.begin(), subs.end(), [](const MixingResult& p) { return p.has_grad && p.row_i > 0.0; })) {
      by_grad = false;
      substituted = true;
      probes = subs;
    }
  }
  size_t worst = 0;
  bool any_grad = false, self_blind = false;
  int64_t blind_row = -1;
  for (size_t k = 0; k < probes.size(); ++k) {
    any_grad = any_grad || probes[k].has_grad;
    if (probes[k].coupled > probes[worst].coupled) worst = k;
    if (probes[k].has_grad && probes[k].row_i == 0.0 && !self_blind) {
      self_blind = true;
      blind_row = rows[k];
    }
  }
  const MixingResult& ev = probes[worst];
  const int64_t row = rows[worst];
  const std::string others = std::to_string(B - 1) + " other rows";
  if (!any_grad && !by_grad) {
    Finding f;
    f.check = "M6";
    f.severity = Severity::Info;
    f.title = "every example of the batch has the same input: the batch-mixing test cannot run";
    f.shape = shape_of(x);
    out.push_back(std::move(f));
  } else if (!any_grad) {
    Finding f;
    f.check = "M6";
    f.severity = Severity::Warning;
    f.kind = Kind::InputUnreached;
    f.title = "no gradient reaches the input: the batch-mixing test cannot run";
    f.shape = shape_of(x);
    f.cause = "the output does not depend on the input through differentiable ops (a detach() near the input?)";
    f.fix = "remove the detach(); the test needs d(output)/d(input)";
    out.push_back(std::move(f));
  } else if (ev.coupled > 0 && pairwise_output(model, x)) {
    Finding f;
    f.check = "M6";
    f.severity = Severity::Info;
    f.kind = Kind::BatchMixing;
    f.title =
        "the output holds an entry for every example of the batch along a dim past the first (a similarity "
        "of in-batch pairs): each row depends on the other examples by design";
    f.shape = shape_of(x);
    f.evidence = {{"coupled rows", static_cast<double>(ev.coupled), "of the " + others},
                  {"probed example i", static_cast<double>(row), ""}};
    f.cause =
        "the model scores pairs of the batch's examples (a contrastive or metric-learning objective over "
        "in-batch negatives): the output's width follows the batch's size, as a mixing bug's does not";
    f.fix = "none needed";
    out.push_back(std::move(f));
  } else if (ev.coupled > 0) {
    Finding f;
    f.check = "M6";
    f.severity = Severity::Error;
    f.title = "the output for example " + std::to_string(row) + " depends on " + std::to_string(ev.coupled) +
              (ev.coupled == 1 ? " other example" : " other examples") +
              " of the batch (in eval mode): the model mixes the batch";
    f.kind = Kind::BatchMixing;
    f.shape = shape_of(x);
    // Where: the module that mixes rows of its own input, when one does (graph --check and the
    // report's graph draw its ops in red).
    std::tie(f.module, f.op) = mixing_module(model, x, row, o.mixing_tolerance);
    f.evidence = {
        {by_grad ? "|d out[i] / d x[i]|" : "change of out[i] when x[i] is replaced by another example", ev.row_i, ""},
        {by_grad ? "largest |d out[i] / d x[j]|, j != i" : "largest change of another row out[j], j != i", ev.other_max,
         "> " + fmt_num(o.mixing_tolerance) + " x the first flags coupling"},
        {"coupled rows", static_cast<double>(ev.coupled), "of the " + others},
        {"probed example i", static_cast<double>(row), ""}};
    if (ev.grouping.per > 1)
      f.evidence.push_back(
          {"output rows per example", static_cast<double>(ev.grouping.per), "coupled both batch-major and time-major"});
    f.cause =
        "an op moved data across the batch dim: a reshape/view where a transpose/permute was meant (the "
        "shapes fit, the rows interleave), a softmax/mean/sum over dim 0 instead of the feature dim, or a "
        "flatten that includes the batch";
    f.fix = (f.module.empty() ? std::string("find the op whose batch dim is not dim 0 any more")
             : !f.op.empty()  ? "in " + f.module + " (its output rows mix its input rows when tested alone), its " +
                                   f.op + " (a reshape) makes rows out of a tensor whose dim 0 is not the batch"
                             : "in " + f.module +
                                   " (its output rows mix its input rows when tested alone), find "
                                   "the op whose batch dim is not dim 0 any more") +
            " (print shapes with gradsleuth's shape trace, M1): use transpose/permute to reorder dims, and reduce "
            "over the feature dims only";
    out.push_back(std::move(f));
  } else if (self_blind) {
    Finding f;
    f.check = "M6";
    f.severity = Severity::Warning;
    f.kind = Kind::OutputIgnoresInput;
    f.title = "the output for example " + std::to_string(blind_row) + " does not depend on its own input";
    f.shape = shape_of(x);
    f.evidence = {{by_grad ? "|d out[i] / d x[i]|" : "change of out[i] when x[i] is replaced by another example", 0.0,
                   "must be > 0"},
                  {"probed example i", static_cast<double>(blind_row), ""}};
    f.cause =
        "the input of this example is cut off (a detach, every unit dead, a multiplication by zero), or its "
        "output is built from another example (a subtraction of x[0], a shift along the batch)";
    f.fix = "check the gradient flow (M5) and dead units (M7), and any op that indexes the batch dim";
    out.push_back(std::move(f));
  }
  if (has_bn && ev.has_grad && ev.coupled == 0 && !substituted) {
    set_mode_without_randomness(model, true, probe);
    MixingResult tr;
    try {
      tr = probe_row(i);
    } catch (const RowsMismatch&) {
      // Train mode changes the output's rows (the batch run twice): nothing to compare there.
    }
    if (tr.coupled > 0) {
      Finding f;
      f.check = "M6";
      f.severity = Severity::Info;
      f.title = "in train mode the examples are coupled through BatchNorm's batch statistics (expected, not a bug)";
      f.evidence = {{"coupled rows (train mode)", static_cast<double>(tr.coupled), "of the " + others},
                    {"coupled rows (eval mode)", 0.0, ""}};
      f.cause =
          "BatchNorm normalises each example with the batch's mean and variance, so in training every "
          "output depends a little on the whole batch; in eval mode it uses running statistics";
      out.push_back(std::move(f));
    }
  }
  return out;
}
}  // namespace

std::vector<Finding> batch_mixing_test(nn::Module& model, const Tensor& x, const ModelCheckOptions& o) {
  GS_CHECK(x.dim() >= 1 && x.size(0) >= 2, "batch_mixing_test (M6)", "needs a batch of at least 2 examples, got ",
           x.str());
  // The gradients are put back last: restoring the parameters clears them. Train mode updates BatchNorm's
  // running statistics.
  GradSnapshot grads(model);
  ParamSnapshot params(model);
  try {
    std::vector<Finding> out = mixing_test(model, x, o);
    params.restore();
    // A model over a fixed set of items (a graph convolution over its nodes) takes the whole set at
    // once: the rows it mixes are its design.
    std::string why;
    const int64_t n = x.size(0);
    bool set_sized = false;  // a buffer or parameter of n x n (the set's adjacency)
    for (const auto& tensors : {model.named_buffers(), model.named_parameters()})
      for (const auto& [name, t] : tensors) set_sized = set_sized || (t.dim() == 2 && t.size(0) == n && t.size(1) == n);
    for (Finding& f : out)
      if (f.check == "M6" && f.severity == Severity::Error && set_sized && takes_whole_batch_only(model, x, &why)) {
        f.severity = Severity::Info;
        f.title += ", and it takes only the whole batch of " + std::to_string(n) +
                   " rows (on half of them its forward raised: " + why + ") and holds an " + std::to_string(n) + " x " +
                   std::to_string(n) + " tensor: a model over a fixed set of items";
        f.cause =
            "the model computes over one fixed set of items (a graph convolution mixes each node with its "
            "neighbours through an adjacency matrix of the set's size): its rows depend on each other by design";
        f.fix = "none needed";
      }
    return out;
  } catch (const RowsMismatch& e) {
    params.restore();
    Finding f;
    f.check = "M6";
    f.severity = Severity::Info;
    f.title =
        std::string("the batch-mixing test cannot run: ") + e.what() + ", so no output row belongs to one example";
    f.shape = shape_of(x);
    return {f};
  }
}

// ---- M6 across time: a next-step model that reads the step it predicts --------------------------------
std::vector<Finding> future_leak_test(nn::Module& model, const Tensor& x, const Tensor& y, const ModelCheckOptions& o) {
  if (!x.defined() || !y.defined() || x.dim() != 2 || y.dim() != 2 || x.sizes() != y.sizes() || x.size(0) < 2 ||
      x.size(1) < 4 || x.is_floating_point() != y.is_floating_point() || x.dtype() == kBool)
    return {};
  int64_t judged = 0;
  std::vector<int64_t> valid;
  const double share = detail::next_step_share(x, y, judged, &valid);
  if (judged < o.next_step_min_positions || share < o.next_step_share) return {};
  // The step changed: half the median number of target positions a row has, so that most rows have real
  // inputs there and earlier positions to compare.
  std::sort(valid.begin(), valid.end());
  const int64_t T = x.size(1), k = std::clamp<int64_t>(valid[valid.size() / 2] / 2, 1, T - 2);
  Tensor changed = x.detach().clone();
  {
    NoGradGuard ng;
    Tensor col = changed.select(1, k);
    if (x.is_floating_point()) {
      col.add_(x.detach().to(kFloat64).std().item<double>() + 1.0);
    } else {
      const Tensor next = col + 1;  // another id of the same vocabulary: the next one, the largest to 0
      col.copy_(where(gt(next, amax(x.detach()).item<double>()), next * 0, next));
    }
  }
  GradSnapshot grads(model);
  ParamSnapshot params(model);
  Tensor before, after;
  try {
    NoGradGuard ng;
    ModeSnapshot modes(model);
    model.eval();
    before = model(x).detach().to(kFloat64);
    after = model(changed).detach().to(kFloat64);
  } catch (const std::exception&) {
    params.restore();
    return {};  // the model cannot run the changed batch: nothing to say
  }
  params.restore();
  // The output's time axis: the one other than the batch's with T entries.
  int64_t axis = -1;
  for (int64_t d = 1; d < before.dim(); ++d)
    if (before.size(d) == T) axis = axis < 0 ? d : -2;
  if (axis < 0 || before.sizes() != after.sizes() || before.size(0) != x.size(0)) return {};
  const Tensor past_before = before.narrow(axis, 0, k), past_after = after.narrow(axis, 0, k);
  const double scale = std::max(amax(abs(past_before)).item<double>(), 1e-30);
  const double moved = amax(abs(past_after - past_before)).item<double>() / scale;
  const double at_k = amax(abs(after.narrow(axis, k, 1) - before.narrow(axis, k, 1))).item<double>() / scale;
  if (!std::isfinite(moved) || !(moved > o.future_leak_tolerance)) return {};
  Finding f;
  f.check = "M6";
  f.severity = Severity::Error;
  f.kind = Kind::SeesFuture;
  f.shape = shape_of(x);
  f.title = "the model's outputs before step " + std::to_string(k) + " change when only the input at step " +
            std::to_string(k) + " changes: a next-step model that sees the steps it predicts";
  f.evidence = {{"targets that copy the next step's input (y[:, t] == x[:, t + 1])", share,
                 ">= " + fmt_num(o.next_step_share) + ": next-step prediction"},
                {"positions judged", static_cast<double>(judged), ""},
                {"largest change of an output before the changed step / their largest value", moved,
                 "> " + fmt_num(o.future_leak_tolerance) + " is a leak from the future"},
                {"the same at the changed step", at_k, ""}};
  f.cause =
      "position t reads inputs after t, and the input at t + 1 is its own target: a causal attention mask missing "
      "or inverted (masked_fill fills where the mask is true: a mask of the allowed positions blocks the past), a "
      "bidirectional layer, or a pooling or normalisation over the whole sequence. Teacher-forced losses fall "
      "towards 0, and generation, where the future is not there, fails";
  f.fix =
      "mask the scores where j > i (masked_fill(scores, j > i, -inf)), or use a causal (unidirectional) layer; "
      "check that the outputs before a step do not move when the step's input does";
  return {f};
}

bool takes_whole_batch_only(nn::Module& model, const Tensor& x, std::string* why) {
  if (x.dim() < 1 || x.size(0) < 8) return false;
  NoGradGuard ng;
  ModeSnapshot modes(model);
  model.eval();
  try {
    (void)model(x.narrow(0, 0, x.size(0) / 2));
    return false;
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return true;
  }
}

}  // namespace gradsleuth::debug
