// The data-parallel checks D11, L8, M21, M22, O7 and W9 (see dist_checks.h): each
// judges numbers gathered from every rank; none of them calls MPI.
#include "debug/checks/dist/dist_checks.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "core/autograd.h"
#include "core/generator.h"
#include "debug/checks/check_util.h"

namespace gradsleuth::debug {

namespace {

using detail::kNaN;
using detail::make;
using detail::median;
using detail::num;

// Up to `k` names joined by ", ", then "and N more".
std::string some(const std::vector<std::string>& v, size_t k = 4) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < k; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > k) s += " and " + num(static_cast<int64_t>(v.size() - k)) + " more";
  return s;
}

// The largest |a - b| / max(|b|, 1) over the 2 fingerprint values of parameter p, rank r against rank 0.
double fingerprint_gap(const PerRank& per_rank, size_t r, size_t p) {
  double gap = 0.0;
  for (size_t k = 2 * p; k < 2 * p + 2; ++k) {
    const double a = per_rank[r][k], b = per_rank[0][k];
    const double d = std::fabs(a - b) / std::max(std::fabs(b), 1.0);
    gap = std::max(gap, std::isnan(d) ? std::numeric_limits<double>::infinity() : d);
  }
  return gap;
}

void check_per_rank(const PerRank& per_rank, size_t width, const char* who) {
  GS_CHECK(!per_rank.empty(), who, "no rank's values were given (per_rank is empty)");
  for (size_t r = 0; r < per_rank.size(); ++r)
    GS_CHECK(per_rank[r].size() == width, who, "rank ", r, " gave ", per_rank[r].size(), " values, expected ", width,
             " (2 per trainable parameter, in registration order, on every rank): do the ranks build the same model?");
}

// The parameters whose fingerprints differ across ranks, with the largest gap and the rank showing it.
struct Divergence {
  std::vector<std::string> names;
  double worst = 0.0;
  size_t worst_rank = 0, worst_param = 0;
};
Divergence diverged(const std::vector<std::string>& names, const PerRank& per_rank, double tol) {
  Divergence d;
  for (size_t p = 0; p < names.size(); ++p) {
    bool off = false;
    for (size_t r = 1; r < per_rank.size(); ++r) {
      const double g = fingerprint_gap(per_rank, r, p);
      if (g > tol) off = true;
      if (g > d.worst) {
        d.worst = g;
        d.worst_rank = r;
        d.worst_param = p;
      }
    }
    if (off) d.names.push_back(names[p]);
  }
  return d;
}

}  // namespace

// ---- fingerprints -----------------------------------------------------------------------

std::vector<double> fingerprint(const std::vector<Tensor>& tensors) {
  NoGradGuard ng;
  std::vector<double> out;
  out.reserve(2 * tensors.size());
  for (const Tensor& t : tensors) {
    if (!t.defined()) {
      out.push_back(0.0);
      out.push_back(-1.0);
      continue;
    }
    // A fixed sequential order in float64: bitwise equal tensors give bitwise equal sums on every
    // rank, whatever the thread count.
    const Tensor c = t.detach().cpu().to(kFloat64).contiguous();
    const double* d = c.data_ptr<double>();
    double s = 0.0, sq = 0.0;
    for (int64_t i = 0; i < c.numel(); ++i) {
      s += d[i];
      sq += d[i] * d[i];
    }
    out.push_back(s);
    out.push_back(sq);
  }
  return out;
}

std::vector<std::string> trainable_names(const nn::Module& model) {
  std::vector<std::string> out;
  for (const auto& [name, p] : model.named_parameters())
    if (p.requires_grad()) out.push_back(name);
  return out;
}

std::vector<double> fingerprint_params(const nn::Module& model) {
  std::vector<Tensor> ts;
  for (const auto& [name, p] : model.named_parameters())
    if (p.requires_grad()) ts.push_back(p);
  return fingerprint(ts);
}

std::vector<double> fingerprint_grads(const nn::Module& model) {
  std::vector<Tensor> ts;
  for (const auto& [name, p] : model.named_parameters())
    if (p.requires_grad()) ts.push_back(p.grad());
  return fingerprint(ts);
}

std::vector<double> reduction_scales(const std::vector<Tensor>& reduced, const std::vector<Tensor>& averaged) {
  GS_CHECK(reduced.size() == averaged.size(), "reduction_scales", "got ", reduced.size(), " reduced and ",
           averaged.size(), " averaged tensors: one pair per parameter");
  NoGradGuard ng;
  std::vector<double> out;
  for (size_t i = 0; i < reduced.size(); ++i) {
    if (!reduced[i].defined() || !averaged[i].defined()) {
      out.push_back(kNaN);
      continue;
    }
    GS_CHECK(reduced[i].numel() == averaged[i].numel(), "reduction_scales", "tensor ", i, " has ", reduced[i].numel(),
             " reduced values and ", averaged[i].numel(), " averaged ones");
    const Tensor r = reduced[i].detach().cpu().to(kFloat64).contiguous();
    const Tensor a = averaged[i].detach().cpu().to(kFloat64).contiguous();
    const double* pr = r.data_ptr<double>();
    const double* pa = a.data_ptr<double>();
    double ra = 0.0, aa = 0.0;
    for (int64_t k = 0; k < r.numel(); ++k) {
      ra += pr[k] * pa[k];
      aa += pa[k] * pa[k];
    }
    out.push_back(aa > 0.0 ? ra / aa : kNaN);
  }
  return out;
}

std::vector<double> randomness_fingerprint() {
  Generator copy = default_generator();  // a copy: the real stream is not advanced
  std::vector<double> out;
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<double>(copy.next_u32()));
  return out;
}

// ---- D11 --------------------------------------------------------------------------------

std::vector<Finding> check_shards(const std::vector<std::vector<int64_t>>& indices, int64_t dataset_size, int64_t epoch,
                                  const DistCheckOptions&) {
  GS_CHECK(!indices.empty(), "check_shards", "no rank's indices were given");
  GS_CHECK(dataset_size >= 0, "check_shards", "dataset_size must be >= 0, got ", dataset_size);
  const int64_t world = static_cast<int64_t>(indices.size());
  std::vector<int32_t> readers(static_cast<size_t>(dataset_size), 0);
  int64_t out_of_range = 0, reads = 0;
  std::vector<double> counts;
  std::vector<std::set<int64_t>> sets;
  for (const auto& rank : indices) {
    // An index a rank reads twice in its own shard counts once for it: D11 is about the ranks.
    std::set<int64_t> mine(rank.begin(), rank.end());
    sets.push_back(mine);
    for (int64_t i : mine) {
      if (i < 0 || i >= dataset_size) {
        ++out_of_range;
        continue;
      }
      ++readers[static_cast<size_t>(i)];
    }
    reads += static_cast<int64_t>(rank.size());
    counts.push_back(static_cast<double>(rank.size()));
  }
  int64_t shared = 0, unread = 0, worst = 0;
  for (int32_t c : readers) {
    if (c == 0) ++unread;
    if (c > 1) shared += c - 1;
    worst = std::max<int64_t>(worst, c);
  }
  const int64_t allowed = world - 1;  // the sampler's padding (or drop_last's cut)
  std::vector<Finding> out;
  auto evidence = [&](Finding& f) {
    f.evidence = {{"ranks", static_cast<double>(world), ""},
                  {"dataset size", static_cast<double>(dataset_size), ""},
                  {"indices read by more than one rank", static_cast<double>(shared),
                   "> world size - 1 = " + num(allowed) + " warns (the sampler pads at most that many)"},
                  {"indices read by no rank", static_cast<double>(unread),
                   "> world size - 1 = " + num(allowed) + " warns (drop_last cuts at most that many)"},
                  {"most ranks reading one index", static_cast<double>(worst), ""},
                  {"reads per rank (median)", median(counts), ""}};
    if (out_of_range > 0)
      f.evidence.push_back({"indices outside [0, dataset size)", static_cast<double>(out_of_range), "any warns"});
    f.step = -1;
    if (epoch >= 0) f.evidence.push_back({"epoch", static_cast<double>(epoch), ""});
  };
  if (shared > allowed || unread > allowed || out_of_range > 0) {
    const bool same = world > 1 && std::all_of(sets.begin(), sets.end(), [&](const auto& x) { return x == sets[0]; });
    Finding f = make("D11", Severity::Warning,
                     same ? "every rank reads the same examples: the " + num(world) + " ranks read one set of " +
                                num(static_cast<int64_t>(sets[0].size())) + " examples" +
                                (unread > 0 ? " and " + num(unread) + " of the dataset's are never read" : "")
                          : "the ranks' shards overlap or leave examples out: " + num(shared) +
                                " indices read by several ranks, " + num(unread) + " by none");
    evidence(f);
    f.cause =
        "the distributed sampler does not split by rank: it was built with the same rank on every process "
        "(rank 0, a hard-coded value), ignores the rank, or each rank builds a plain shuffling loader with the "
        "same seed; the ranks then average N copies of one gradient, so N processes train like one on 1/N of "
        "the data";
    f.fix =
        "give each process its own shard: dist::DistributedSampler(n, pg.rank(), pg.world_size()) with the same "
        "seed on every rank and set_epoch(e) before each epoch, and pass it to the DataLoader";
    out.push_back(f);
  } else {
    Finding f = make("D11", Severity::Info,
                     (world == 1 ? std::string("the single rank's shard covers the dataset (")
                                 : "the " + num(world) + " ranks' shards are disjoint and cover the dataset (") +
                         num(reads) + " reads of " + num(dataset_size) + " examples)");
    evidence(f);
    out.push_back(f);
  }
  return out;
}

// ---- L8 ----------------------------------------------------------------------------------

void LoggedLossCheck::record(int64_t step, const std::vector<double>& rank_losses,
                             const std::vector<double>& rank_batch_sizes, double logged) {
  GS_CHECK(!rank_losses.empty() && rank_losses.size() == rank_batch_sizes.size(), "LoggedLossCheck::record",
           "one loss and one batch size per rank are needed, got ", rank_losses.size(), " losses and ",
           rank_batch_sizes.size(), " batch sizes");
  double s = 0.0, n = 0.0;
  for (size_t r = 0; r < rank_losses.size(); ++r) {
    s += rank_losses[r] * rank_batch_sizes[r];
    n += rank_batch_sizes[r];
  }
  rows_.push_back({step, rank_losses, n > 0 ? s / n : kNaN, logged});
}

std::vector<Finding> LoggedLossCheck::findings() const {
  std::vector<Finding> out;
  if (rows_.empty()) return out;
  const double world = static_cast<double>(rows_.front().losses.size());
  auto rel = [](double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-12); };
  int64_t off = 0, one_rank = 0, divided = 0, first_off = -1;
  int one_rank_id = -1;
  double worst = 0.0;
  std::vector<double> spread, ratio;
  for (const Row& row : rows_) {
    const double lo = *std::min_element(row.losses.begin(), row.losses.end());
    const double hi = *std::max_element(row.losses.begin(), row.losses.end());
    spread.push_back((hi - lo) / std::max(std::fabs(row.global), 1e-12));
    const double e = rel(row.logged, row.global);
    if (!(e <= o_.loss_tolerance)) {
      ++off;
      if (first_off < 0) first_off = row.step;
      worst = std::max(worst, std::isnan(e) ? std::numeric_limits<double>::infinity() : e);
      ratio.push_back(row.logged / row.global);
      for (size_t r = 0; r < row.losses.size(); ++r)
        if (rel(row.logged, row.losses[r]) <= o_.loss_tolerance) {
          ++one_rank;
          one_rank_id = static_cast<int>(r);
          break;
        }
      if (world > 1 && rel(row.logged, row.global / world) <= o_.loss_tolerance) ++divided;
    }
  }
  const int64_t n = static_cast<int64_t>(rows_.size());
  if (off == 0) {
    Finding f = make("L8", Severity::Info,
                     "the logged loss is the global mean of the " + num(static_cast<int64_t>(world)) +
                         " ranks' losses at every compared step");
    f.evidence = {{"steps compared", static_cast<double>(n), ""},
                  {"ranks' loss spread (max - min) / global, median", median(spread), "context"}};
    out.push_back(f);
    return out;
  }
  std::string title;
  std::string cause;
  if (one_rank == off) {
    title = "the logged loss is rank " + std::to_string(one_rank_id) + "'s local loss, not the global mean (" +
            num(off) + " of " + num(n) + " compared steps)";
    cause =
        "the loop logs the loss of the process that prints (rank 0) without reducing it: with each rank on "
        "its own shard the number is one shard's loss, noisier than the global one by ~sqrt(N) and biased "
        "wherever the shards differ; curves, early stopping and learning-rate schedules driven by it see "
        "1/N of the data";
  } else if (divided == off) {
    title = "the logged loss is the global mean divided by the world size (averaged twice) (" + num(off) + " of " +
            num(n) + " compared steps)";
    cause =
        "the loss is all-reduced with an average and then divided by the world size again (or summed after "
        "an average and divided twice): every logged value is 1/N of the true loss, so the curve looks "
        "better than it is and does not compare with a single-process run";
  } else {
    title = "the logged loss is not the global mean of the ranks' losses (" + num(off) + " of " + num(n) +
            " compared steps)";
    cause =
        "the logged value is not the all-reduced, batch-weighted mean of the ranks' losses: a rank's local "
        "loss, a double average, a sum, or a mean that ignores unequal batch sizes";
  }
  Finding f = make("L8", Severity::Warning, title);
  f.step = first_off;
  f.evidence = {{"steps compared", static_cast<double>(n), ""},
                {"steps where logged != global", static_cast<double>(off),
                 "> 0 warns (|logged - global| / |global| > " + fmt_num(o_.loss_tolerance) + ")"},
                {"largest relative difference", worst, ""},
                {"logged / global (median over those steps)", median(ratio), "1 when right; 1/N averaged twice"},
                {"world size", world, ""},
                {"ranks' loss spread (max - min) / global, median", median(spread), "context"}};
  f.cause = cause;
  f.fix =
      "log the global loss: all-reduce the batch-weighted sum of the local losses and the batch sizes (or "
      "all_reduce(loss, Avg) when every rank has the same batch size) once, and print that on rank 0";
  out.push_back(f);
  return out;
}

// ---- M21 ---------------------------------------------------------------------------------

std::vector<Finding> check_params_in_sync(const std::vector<std::string>& names, const PerRank& per_rank, int64_t step,
                                          const DistCheckOptions& opts) {
  check_per_rank(per_rank, 2 * names.size(), "check_params_in_sync");
  std::vector<Finding> out;
  if (per_rank.size() < 2) return out;
  const Divergence d = diverged(names, per_rank, opts.sync_tolerance);
  if (d.names.empty()) return out;
  Finding f = make("M21", Severity::Error,
                   num(static_cast<int64_t>(d.names.size())) + " of " + num(static_cast<int64_t>(names.size())) +
                       " parameters differ across ranks: the replicas are no longer one model (" + some(d.names) + ")");
  f.parameter = d.names.front();  // the first in registration order: one finding per run, not one per worst
  f.step = step;
  f.evidence = {{"parameters that differ", static_cast<double>(d.names.size()), "> 0 is an error"},
                {"parameters compared", static_cast<double>(names.size()), ""},
                {"ranks", static_cast<double>(per_rank.size()), ""},
                {"largest relative gap of a fingerprint (sum, sum of squares)", d.worst,
                 "> " + fmt_num(opts.sync_tolerance) + " differs (bitwise-synchronised replicas: 0)"},
                {"rank showing it (against rank 0)", static_cast<double>(d.worst_rank), ""}};
  // Before the first step (step 0) only the start can differ; after it, most parameters apart
  // points at the start too (a parameter initialised to a constant, like BatchNorm's, starts equal
  // by chance), a few at a reduction that skipped them.
  const bool start = step == 0 || 2 * d.names.size() >= names.size();
  const char* kStart =
      "the replicas did not start from the same weights: no broadcast from rank 0 when the wrapper "
      "was built (or a hand-written loop without one) while each rank initialised with its own "
      "seed; the same averaged update applied to different weights keeps them apart for ever "
      "(parameters initialised to a constant, like BatchNorm's, agree by chance)";
  const char* kReduce =
      "their gradients were not all-reduced (left out of the reduction, a parameter created or "
      "unfrozen after DDP was built, find_unused_parameters off with a branch one rank skips), so "
      "each rank applies its local gradient to them; or a parameter is changed on one rank only";
  if (step == 0) f.title += " before the first step";
  f.cause = start ? std::string(kStart) + (step == 0 ? "" : "; less likely: " + std::string(kReduce))
                  : std::string(kReduce) + "; less likely: " + kStart;
  f.fix = start ? "broadcast rank 0's parameters and buffers before training (DistributedDataParallel does it when it "
                  "is built; a hand-written loop must call pg.broadcast(p, 0) for each), or seed the model's "
                  "initialisation identically on every rank"
                : "make sure every trainable parameter's gradient goes through the all-reduce (check "
                  "DistributedDataParallel::reduced_parameters() against the model's parameters, O7); build DDP "
                  "after the model is final";
  out.push_back(f);
  return out;
}

// ---- M22 ---------------------------------------------------------------------------------

std::vector<Finding> check_rank_randomness(const PerRank& per_rank, bool random_layers, int64_t step,
                                           const DistCheckOptions&) {
  GS_CHECK(!per_rank.empty(), "check_rank_randomness", "no rank's fingerprint was given");
  std::vector<Finding> out;
  std::vector<std::string> pairs;
  int64_t same_pairs = 0, possible = 0;
  for (size_t a = 0; a < per_rank.size(); ++a)
    for (size_t b = a + 1; b < per_rank.size(); ++b) {
      ++possible;
      if (per_rank[a] == per_rank[b]) {
        ++same_pairs;
        pairs.push_back(std::to_string(a) + "=" + std::to_string(b));
      }
    }
  if (same_pairs > 0 && random_layers) {
    Finding f =
        make("M22", Severity::Warning,
             "ranks draw the same random numbers: their dropout masks are identical (ranks " + some(pairs) + ")");
    f.step = step;
    f.evidence = {{"rank pairs with identical generators", static_cast<double>(same_pairs), "> 0 warns"},
                  {"rank pairs", static_cast<double>(possible), ""}};
    f.cause =
        "every rank seeds its random generator with the same value (manual_seed(seed) copied from a "
        "single-process script): dropout drops the same units on every rank, and random augmentation applies "
        "the same transform; the N shards are then regularised as one, which wastes part of the noise "
        "data parallelism would average out";
    f.fix =
        "seed the model's initialisation with the shared seed (so the replicas start equal, or rely on DDP's "
        "broadcast), then seed the per-rank randomness with a seed of its own (dist::rank_seed(seed, pg): "
        "different for every rank) before training";
    out.push_back(f);
  } else {
    Finding f = make("M22", Severity::Info,
                     random_layers ? "each rank draws its own random numbers (" +
                                         num(static_cast<int64_t>(per_rank.size())) + " ranks, no two generators alike)"
                                   : "the model has no random layer in training mode: nothing for the ranks to draw "
                                     "differently");
    f.step = step;
    f.evidence = {{"rank pairs with identical generators", static_cast<double>(same_pairs), ""}};
    out.push_back(f);
  }
  return out;
}

// ---- O7 ----------------------------------------------------------------------------------

namespace {
// Parameters whose reduced gradients agree across ranks, with a measured scale.
std::vector<double> agreed_scales(const GradReduction& in, const std::vector<std::string>& not_reduced) {
  std::vector<double> out;
  for (size_t p = 0; p < in.names.size() && p < in.scale.size(); ++p)
    if (std::isfinite(in.scale[p]) &&
        std::find(not_reduced.begin(), not_reduced.end(), in.names[p]) == not_reduced.end())
      out.push_back(in.scale[p]);
  return out;
}
}  // namespace

double reduction_scale(const GradReduction& in, const DistCheckOptions& opts) {
  check_per_rank(in.reduced, 2 * in.names.size(), "reduction_scale");
  const Divergence d = diverged(in.names, in.reduced, opts.sync_tolerance);
  return median(agreed_scales(in, d.names));
}

std::vector<Finding> check_gradient_reduction(const GradReduction& in, const DistCheckOptions& opts) {
  check_per_rank(in.reduced, 2 * in.names.size(), "check_gradient_reduction");
  GS_CHECK(in.scale.empty() || in.scale.size() == in.names.size(), "check_gradient_reduction", "scale has ",
           in.scale.size(), " values for ", in.names.size(), " parameters (one per parameter, NaN if unmeasured)");
  std::vector<Finding> out;
  const double N = static_cast<double>(in.world_size);
  // 1. Gradients that differ across ranks after the reduction: they were never all-reduced.
  const Divergence d = diverged(in.names, in.reduced, opts.sync_tolerance);
  if (!d.names.empty()) {
    Finding f =
        make("O7", Severity::Error,
             num(static_cast<int64_t>(d.names.size())) + " of " + num(static_cast<int64_t>(in.names.size())) +
                 " gradients differ across ranks after the all-reduce: they were not reduced (" + some(d.names) + ")");
    f.parameter = d.names.front();
    f.step = in.step;
    f.evidence = {{"gradients that differ across ranks", static_cast<double>(d.names.size()), "> 0 is an error"},
                  {"largest relative gap of a fingerprint", d.worst, "> " + fmt_num(opts.sync_tolerance) + " differs"},
                  {"ranks", N, ""}};
    f.cause =
        "the all-reduce skipped these parameters: left out of DDP's buckets (registered after DDP was "
        "built, filtered by a name or requires_grad test, a bucket never flushed) or a hand-written loop "
        "that reduces a list missing them; each rank then steps them with its local gradient and the "
        "replicas drift apart (M21)";
    f.fix =
        "reduce every trainable parameter's gradient: compare DistributedDataParallel::reduced_parameters() "
        "with the model's trainable parameters, build DDP after the model is final";
    out.push_back(f);
  }
  // 2. DDP's own list against the trainable parameters.
  if (in.reduced_names_known) {
    std::vector<std::string> missing;
    for (const std::string& n : in.names)
      if (std::find(in.reduced_names.begin(), in.reduced_names.end(), n) == in.reduced_names.end())
        missing.push_back(n);
    if (!missing.empty()) {
      Finding f = make("O7", Severity::Warning,
                       num(static_cast<int64_t>(missing.size())) +
                           (missing.size() == 1 ? " trainable parameter is" : " trainable parameters are") +
                           " not in the data-parallel wrapper's reduced list (" + some(missing) + ")");
      f.parameter = missing.front();
      f.step = in.step;
      f.evidence = {{"trainable parameters not reduced", static_cast<double>(missing.size()), "> 0 warns"},
                    {"parameters reduced", static_cast<double>(in.reduced_names.size()), ""}};
      f.cause = "the wrapper did not put them in a bucket (see the error above when their gradients differ)";
      f.fix = "reduce every trainable parameter; build the wrapper after the model is final";
      out.push_back(f);
    }
  }
  // 3. Averaged or summed: the reduced gradient against the average of the local ones.
  const std::vector<double> s = agreed_scales(in, d.names);
  if (!s.empty() && in.world_size > 1) {
    const double m = median(s);
    const bool summed = std::fabs(m - N) <= opts.scale_tolerance * N;
    if (std::fabs(m - 1.0) > opts.scale_tolerance) {
      Finding f = make("O7", Severity::Warning,
                       summed ? "the gradients are summed across ranks, not averaged: the applied gradient is " +
                                    fmt_num(m) + " x the average of the ranks' gradients"
                              : "the reduced gradient is " + fmt_num(m) + " x the average of the ranks' gradients");
      f.step = in.step;
      f.evidence = {{"reduced / averaged gradient (median over parameters)", m,
                     "outside 1 +- " + fmt_num(opts.scale_tolerance) + " warns; = world size when summed"},
                    {"world size", N, ""},
                    {"parameters measured", static_cast<double>(s.size()), ""}};
      f.cause = summed ? "the all-reduce sums the gradients and nothing divides by the world size: every step is N "
                         "times larger, so the effective learning rate is lr x N (W9) and a learning rate tuned on "
                         "one process overshoots"
                       : "the reduction divides by the wrong count (a world size taken from another group, the "
                         "number of buckets), or the gradient is scaled again after the all-reduce";
      f.fix =
          "average: all_reduce(grad, Sum) then divide by world_size (or ReduceOp::Avg); if the sum is meant "
          "(a loss already divided by the global batch), scale the learning rate down by N instead";
      out.push_back(f);
    }
  }
  return out;
}

// ---- W9 ----------------------------------------------------------------------------------

std::vector<Finding> report_effective_batch(int world_size, int64_t per_rank_batch, double lr, double scale,
                                            const DistCheckOptions& opts) {
  std::vector<Finding> out;
  const double N = static_cast<double>(world_size);
  const double effective = N * static_cast<double>(per_rank_batch);
  const bool summed = world_size > 1 && std::isfinite(scale) && std::fabs(scale - N) <= opts.scale_tolerance * N;
  const double eff_lr = std::isfinite(scale) ? lr * scale : lr;
  Finding f = make("W9", summed ? Severity::Warning : Severity::Info,
                   summed ? "the effective learning rate is lr x " + num(world_size) + " = " + fmt_num(eff_lr) +
                                ": the gradient is summed over the ranks (effective batch " +
                                num(static_cast<int64_t>(effective)) + ")"
                          : "effective batch " + num(world_size) + " x " + num(per_rank_batch) + " = " +
                                num(static_cast<int64_t>(effective)) + ", learning rate " + fmt_num(lr));
  f.evidence = {{"world size", N, ""},
                {"per-rank batch", static_cast<double>(per_rank_batch), ""},
                {"effective batch", effective, ""},
                {"learning rate", lr, ""},
                {"measured gradient scale (O7)", scale, summed ? "= world size warns" : "1 when averaged"},
                {"effective learning rate", eff_lr, ""}};
  if (summed) {
    f.cause =
        "the gradients are summed, not averaged (O7): each step is world_size times larger than the "
        "learning rate says, as if lr had been multiplied by N without the warm-up the linear scaling rule "
        "asks for";
    f.fix =
        "average the gradients (divide the all-reduced sum by world_size); then scale lr with the effective "
        "batch deliberately (linear scaling with warm-up) if you want the larger batch's speed";
  }
  out.push_back(f);
  return out;
}

}  // namespace gradsleuth::debug
