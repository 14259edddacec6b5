// The homes of L2 (double softmax, NLL on scores), L3 (the BCE input) and L4 (the initial loss);
// see loss_checks.h. L1 and L7 live in history.cpp, L5 in masking.cpp, L6 in reduction.cpp.
#include "debug/checks/loss/loss_checks.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/model/behaviour.h"
#include "debug/checks/run_check.h"
#include "debug/evidence/tensor_stats.h"

namespace gradsleuth::debug {

namespace {

using detail::kNaN;
using detail::make;
using detail::num;

std::vector<double> contiguous_doubles(const Tensor& t) {
  NoGradGuard ng;
  return t.detach().contiguous().to_vector<double>();
}

}  // namespace

// ---- L2 double softmax ---------------------------------------------------------------

std::vector<Finding> check_cross_entropy_input(const Tensor& input, const LossCheckOptions& opts) {
  GS_CHECK(input.defined(), "check_cross_entropy_input", "needs a defined input (B, C) of logits");
  if (!input.is_floating_point() || input.numel() == 0 || input.dim() == 0) return {};
  // Rows over dim 1 (dim 0 for a single example (C)): index (b * C + c) * R + r.
  const int64_t B = input.dim() == 1 ? 1 : input.size(0);
  const int64_t C = input.dim() == 1 ? input.size(0) : input.size(1);
  if (C < 2) return {};
  const int64_t R = input.numel() / (B * C);
  const std::vector<double> v = contiguous_doubles(input);
  double lo = std::numeric_limits<double>::infinity(), worst = 0.0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = 0; r < R; ++r) {
      double sum = 0.0;
      for (int64_t c = 0; c < C; ++c) {
        const double x = v[static_cast<size_t>((b * C + c) * R + r)];
        lo = std::min(lo, x);
        sum += x;
      }
      worst = std::max(worst, std::fabs(sum - 1.0));
      if (std::isnan(sum)) worst = kNaN;
    }
  if (!(lo >= 0.0) || !(worst <= opts.prob_sum_tolerance)) return {};
  Finding f = make("L2", Severity::Error,
                   "cross-entropy is fed probabilities: every row of the " + shape_of(input) +
                       " input is >= 0 and sums to 1, so a second softmax runs inside the loss");
  f.shape = shape_of(input);
  f.evidence = {{"smallest value", lo, ">= 0 (probabilities)"},
                {"largest |row sum - 1|", worst, "<= " + fmt_num(opts.prob_sum_tolerance) + ": rows sum to 1"},
                {"rows", static_cast<double>(B * R), ""},
                {"classes", static_cast<double>(C), ""}};
  f.cause =
      "a softmax before cross-entropy: cross_entropy(x) computes log_softmax(x) itself, so the model "
      "is trained through softmax(softmax(logits)); the inputs lie in [0, 1], so even a perfect prediction "
      "(1 for the true class, 0 elsewhere) leaves a loss of log(1 + (C - 1) / e) (1.46 for 10 classes), and "
      "the gradients shrink: training crawls";
  f.fix =
      "remove the final Softmax and give cross_entropy the raw logits; keep softmax only for reporting "
      "probabilities (or use LogSoftmax + NLLLoss)";
  return {f};
}

std::vector<Finding> check_nll_input(const Tensor& input, const LossCheckOptions& opts) {
  GS_CHECK(input.defined(), "check_nll_input", "needs a defined input (B, C) of log-probabilities");
  if (!input.is_floating_point() || input.numel() == 0 || input.dim() == 0) return {};
  const int64_t B = input.dim() == 1 ? 1 : input.size(0);
  const int64_t C = input.dim() == 1 ? input.size(0) : input.size(1);
  if (C < 2) return {};
  const int64_t R = input.numel() / (B * C);
  // A 16-bit log-softmax rounds each value to 8 (11) bits: its largest values miss 0 by that much.
  const double tol = is_reduced_float(input.dtype()) ? 0.05 : opts.log_prob_tolerance;
  const std::vector<double> v = contiguous_doubles(input);
  double hi = -std::numeric_limits<double>::infinity(), worst_lse = -std::numeric_limits<double>::infinity();
  int64_t rows_above = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = 0; r < R; ++r) {
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t c = 0; c < C; ++c) m = std::max(m, v[static_cast<size_t>((b * C + c) * R + r)]);
      if (!std::isfinite(m)) continue;  // NaN/Inf: M12's
      double sum = 0.0;
      for (int64_t c = 0; c < C; ++c) sum += std::exp(v[static_cast<size_t>((b * C + c) * R + r)] - m);
      hi = std::max(hi, m);
      worst_lse = std::max(worst_lse, m + std::log(sum));
      rows_above += m > tol;
    }
  if (!(hi > tol)) return {};
  Finding f = make("L2", Severity::Error,
                   "NLLLoss is fed scores, not log-probabilities: " + std::to_string(rows_above) + " of " +
                       std::to_string(B * R) + " rows of the " + shape_of(input) +
                       " input hold values above 0 (largest " + fmt_num(hi) + "), and a log-probability never is");
  f.kind = Kind::NllOnScores;
  f.shape = shape_of(input);
  f.evidence = {{"largest value", hi, "> " + fmt_num(tol) + " is no log-probability"},
                {"rows with a value above it", static_cast<double>(rows_above), ""},
                {"rows", static_cast<double>(B * R), ""},
                {"largest row logsumexp over dim 1", worst_lse, "0 for a log-softmax over the classes"}};
  f.cause =
      "the model's raw scores go to NLLLoss, which only picks -input[y]: without a LogSoftmax it rewards raising "
      "the true class's score without bound and never lowers the others, so the loss falls below 0 while the "
      "classes are not told apart";
  f.fix = "end the model with LogSoftmax(1) before NLLLoss, or give the raw scores to CrossEntropyLoss instead";
  return {f};
}

// ---- L3 BCE on logits -------------------------------------------------------------------

namespace {
// Probabilities that were rounded to 16 bits before the loss: a float16/bfloat16 input, or one whose
// values strictly inside (0, 1) (at least kMinRoundedValues of them, 0.5 aside) are all float16 (or
// all bfloat16) values. A float32 sigmoid output has 13 (16) more mantissa bits; that every one of
// 32 values has them all zero does not happen by chance.
constexpr int64_t kMinRoundedValues = 32;
std::optional<Finding> bce_rounded_16bit(const Tensor& input, const std::vector<double>& v) {
  std::optional<DType> grid;
  if (is_reduced_float(input.dtype())) {
    grid = input.dtype();
  } else {
    NoGradGuard ng;
    const Tensor d = input.detach();
    const std::vector<double> as_half = contiguous_doubles(d.to(kFloat16)),
                              as_bf16 = contiguous_doubles(d.to(kBFloat16));
    int64_t inside = 0;
    bool half = true, bf16 = true;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!(v[i] > 0.0 && v[i] < 1.0) || v[i] == 0.5) continue;
      ++inside;
      half = half && as_half[i] == v[i];
      bf16 = bf16 && as_bf16[i] == v[i];
    }
    if (inside < kMinRoundedValues || !(half || bf16)) return std::nullopt;
    grid = half ? kFloat16 : kBFloat16;
  }
  int64_t ones = 0, zeros = 0, finite = 0;
  for (double x : v) {
    finite += std::isfinite(x) ? 1 : 0;
    ones += x == 1.0 ? 1 : 0;
    zeros += x == 0.0 ? 1 : 0;
  }
  const bool half = *grid == kFloat16;
  Finding f = make("L3", Severity::Warning,
                   std::string("binary cross-entropy gets probabilities rounded to ") + dtype_name(*grid) +
                       ": a sigmoid output is exactly 1 above " + (half ? "8.3" : "6.2") +
                       (half ? " and exactly 0 below -17.3" : "") + ", where the loss loses its gradient");
  f.kind = Kind::BceRounded16;
  f.shape = shape_of(input);
  const double n = static_cast<double>(std::max<int64_t>(finite, 1));
  f.evidence = {{std::string("input is ") + dtype_name(*grid) + " (1), or float32 with every value on its grid (0)",
                 input.dtype() == *grid ? 1.0 : 0.0,
                 "either warns (float32: at least " + std::to_string(kMinRoundedValues) + " values inside (0, 1))"},
                {"share exactly 1", static_cast<double>(ones) / n, ""},
                {"share exactly 0", static_cast<double>(zeros) / n, ""}};
  f.cause = std::string("the probabilities were computed in ") + dtype_name(*grid) +
            " (a sigmoid under autocast) and only then given to BCELoss (autocast refuses it, so it was run "
            "outside autocast on a cast copy): 1 - p keeps " +
            (half ? "11" : "8") +
            " bits, a confident prediction rounds to exactly 1 (or 0), its loss is clamped and its gradient "
            "is 0, or, for a wrong one, inf/NaN";
  f.fix =
      "drop the final Sigmoid and give the logits to BCEWithLogitsLoss, which autocast runs in float32 "
      "(sigmoid and log in one stable step)";
  return f;
}

// The finite values of v against [0, 1]: how many, how many outside, their extremes (L3's input and target rules).
struct UnitRange {
  int64_t outside = 0, finite = 0;
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
};
UnitRange unit_range(const std::vector<double>& v) {
  UnitRange r;
  for (double x : v) {
    if (!std::isfinite(x)) continue;
    ++r.finite;
    r.lo = std::min(r.lo, x);
    r.hi = std::max(r.hi, x);
    r.outside += x < 0.0 || x > 1.0;
  }
  return r;
}
}  // namespace

std::vector<Finding> check_bce_targets(const Tensor& target) {
  if (!target.defined() || !target.is_floating_point() || target.numel() == 0) return {};
  const auto [outside, finite, lo, hi] = unit_range(contiguous_doubles(target));
  if (outside == 0) return {};
  Finding f = make("L3", Severity::Warning,
                   "binary cross-entropy gets targets outside [0, 1] (" + fmt_num(lo) + " .. " + fmt_num(hi) +
                       "): they are read as probabilities");
  f.kind = Kind::BceTargetRange;
  f.shape = shape_of(target);
  f.evidence = {{"targets outside [0, 1]", static_cast<double>(outside), "any warns"},
                {"finite targets", static_cast<double>(finite), ""},
                {"smallest target", lo, ""},
                {"largest target", hi, ""}};
  f.cause =
      "the labels were not turned into probabilities: 0/255 masks, -1/+1 labels, or class indices given to a "
      "binary loss. (1 - y) x + log(1 + exp(-x)) is then no likelihood: with y above 1 it falls without bound as "
      "the logit grows, so the loss turns negative and the model is pushed to extreme outputs";
  f.fix =
      "map the targets to {0, 1} (y / 255, (y + 1) / 2) or to probabilities; for C classes use "
      "CrossEntropyLoss on class indices";
  return {f};
}

std::vector<Finding> check_bce_input(const Tensor& input) {
  GS_CHECK(input.defined(), "check_bce_input", "needs a defined input of probabilities");
  if (!input.is_floating_point() || input.numel() == 0) return {};
  const std::vector<double> v = contiguous_doubles(input);
  const auto [outside, finite, lo, hi] = unit_range(v);
  if (outside == 0) {
    if (std::optional<Finding> r = bce_rounded_16bit(input, v)) return {*r};
    return {};
  }
  Finding f = make("L3", Severity::Error,
                   "binary cross-entropy is fed values outside [0, 1] (" + fmt_num(lo) + " .. " + fmt_num(hi) +
                       "): logits, not probabilities");
  f.kind = Kind::BceLogits;
  f.shape = shape_of(input);
  f.evidence = {
      {"min", lo, ">= 0 for probabilities"},
      {"max", hi, "<= 1 for probabilities"},
      {"fraction outside [0, 1]", static_cast<double>(outside) / static_cast<double>(finite), "any is an error"}};
  f.cause =
      "the model's raw scores go to BCELoss, which expects sigmoid outputs; with the values "
      "clamped into [0, 1] the loss runs silently but half of the logits give no gradient";
  f.fix = "give the logits to BCEWithLogitsLoss (sigmoid and log in one stable step), or apply sigmoid before BCELoss";
  return {f};
}

// ---- L4 initial loss --------------------------------------------------------------------

// ---- L4: the initial outputs against the targets ----------------------------------------
namespace {

// The mean over the rows of a float64 (N, C) output's softmax: the predicted class distribution.
std::vector<double> mean_probabilities(const Tensor& out) {
  const int64_t N = out.size(0), C = out.size(1);
  const Tensor prob = softmax(out, 1).contiguous();
  const double* pr = prob.data_ptr<double>();
  std::vector<double> p(static_cast<size_t>(C), 0.0);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c) p[static_cast<size_t>(c)] += pr[i * C + c] / static_cast<double>(N);
  return p;
}

// The batch's class frequencies f and mean predicted probabilities p (float64), judged by KL.
std::vector<Finding> judge_class_start(const std::vector<double>& f, const std::vector<double>& p,
                                       const std::string& what, const LossCheckOptions& opts) {
  const size_t C = f.size();
  double kl = 0.0, kl_uniform = 0.0;
  for (size_t c = 0; c < C; ++c)
    if (f[c] > 0) {
      kl += f[c] * std::log(f[c] / std::max(p[c], 1e-300));
      kl_uniform += f[c] * std::log(f[c] * static_cast<double>(C));
    }
  const double excess = kl - kl_uniform;
  size_t top = 0, rare = 0;
  for (size_t c = 1; c < C; ++c) {
    if (p[c] / std::max(f[c], 1e-12) > p[top] / std::max(f[top], 1e-12)) top = c;
    if (f[c] > 0 && (f[rare] == 0 || f[c] < f[rare])) rare = c;
  }
  std::string bias = "[";
  for (size_t c = 0; c < C && c < 10; ++c) bias += (c ? ", " : "") + fmt_num(std::log(std::max(f[c], 1e-12)));
  bias += C > 10 ? ", ...]" : "]";
  if (excess > opts.initial_output_excess) {
    Finding g =
        make("L4", Severity::Warning,
             "the untrained model's mean prediction is far from the targets: it gives " + what + " " + num(top) +
                 " a probability of " + fmt_num(p[top]) + " on average, where the batch has " + fmt_num(f[top]) +
                 " of them (KL " + fmt_num(kl) + " nats, " + fmt_num(excess) + " more than uniform guessing)");
    g.kind = Kind::InitialOutputBiased;
    g.evidence = {{"KL(class frequencies || mean prediction)", kl, ""},
                  {"KL against uniform predictions", kl_uniform, ""},
                  {"excess over uniform", excess, "> " + fmt_num(opts.initial_output_excess) + " nats warns"},
                  {"mean predicted probability of " + what + " " + num(top), p[top], ""},
                  {"its frequency in the batch", f[top], ""}};
    g.cause =
        "the final layer starts biased towards some outputs (a bias set by hand, copied from another "
        "dataset's priors, or a log taken twice), so training first spends its steps undoing it, and the "
        "first loss is far above log(C)";
    g.fix = "initialise the final bias to 0 (uniform start), or to the log of the class frequencies, " + bias +
            " here (Karpathy: \"initialise well\")";
    return {g};
  }
  if (kl > opts.initial_output_kl) {
    Finding g = make("L4", Severity::Info,
                     "the classes are imbalanced and the model starts from uniform predictions: a final bias of log "
                     "frequency would start at the label distribution (KL " +
                         fmt_num(kl) + " nats)");
    g.evidence = {{"KL(class frequencies || mean prediction)", kl, "> " + fmt_num(opts.initial_output_kl) + " is said"},
                  {"frequency of the rarest " + what + " (" + num(rare) + ")", f[rare], ""}};
    g.fix = "initialise the final layer's bias to log(class frequency), " + bias +
            ", so the first steps do not go to learning the imbalance (the hockey-stick loss)";
    return {g};
  }
  return {};
}

}  // namespace

std::vector<Finding> check_initial_outputs(const Tensor& output, const Tensor& target, const LossCheckOptions& opts,
                                           const std::string& loss_type) {
  if (!output.defined() || !target.defined() || !output.is_floating_point() || output.dim() < 1 || output.size(0) < 2)
    return {};
  NoGradGuard ng;
  const Tensor out = output.detach().to(kCPU).to(kFloat64).contiguous();
  const int64_t N = out.size(0);
  // Class indices against (N, C) scores.
  if (target.dtype() == kInt64 && target.dim() == 1 && target.size(0) == N && out.dim() == 2 && out.size(1) >= 2) {
    const int64_t C = out.size(1);
    const Tensor t = target.to(kCPU).contiguous();
    const int64_t* y = t.data_ptr<int64_t>();
    for (int64_t i = 0; i < N; ++i)
      if (y[i] < 0 || y[i] >= C) return {};  // ignore_index or labels out of range: D9 and L5 say so
    std::vector<double> f(static_cast<size_t>(C), 0.0);
    for (int64_t i = 0; i < N; ++i) f[static_cast<size_t>(y[i])] += 1.0 / static_cast<double>(N);
    return judge_class_start(f, mean_probabilities(out), "class", opts);
  }
  if (!target.is_floating_point() || target.numel() != out.numel()) return {};
  const Tensor tt = target.detach().to(kCPU).to(kFloat64).contiguous();
  const double* y = tt.data_ptr<double>();
  const double* o = out.data_ptr<double>();
  const int64_t n = out.numel(), k = n / N;
  // Cross-entropy against rows of class probabilities (soft labels, a label distribution): the outputs
  // are logits, judged as classes are, the targets' mean row for the class frequencies.
  if (loss_type == "CrossEntropyLoss" && out.dim() == 2 && k >= 2 && target.dim() == 2) {
    bool rows = true;
    for (int64_t i = 0; i < N && rows; ++i) {
      double sum = 0.0;
      for (int64_t c = 0; c < k; ++c) {
        rows = rows && y[i * k + c] >= 0.0;
        sum += y[i * k + c];
      }
      rows = rows && std::fabs(sum - 1.0) <= 1e-3;
    }
    if (rows) {
      std::vector<double> f(static_cast<size_t>(k), 0.0);
      for (int64_t i = 0; i < N; ++i)
        for (int64_t c = 0; c < k; ++c) f[static_cast<size_t>(c)] += y[i * k + c] / static_cast<double>(N);
      return judge_class_start(f, mean_probabilities(out), "class", opts);
    }
  }
  bool binary = true, finite = true, probs = true;
  for (int64_t i = 0; i < n; ++i) {
    binary = binary && (y[i] == 0.0 || y[i] == 1.0);
    finite = finite && std::isfinite(y[i]) && std::isfinite(o[i]);
    probs = probs && o[i] >= 0.0 && o[i] <= 1.0;
  }
  if (!finite) return {};  // D2, M12
  // The loss says what the outputs are: logits under BCEWithLogitsLoss (untrained logits can all lie in
  // [0, 1]: small weights over ReLU features), probabilities under BCELoss.
  if (loss_type == "BCEWithLogitsLoss") probs = false;
  if (loss_type == "BCELoss") probs = true;
  if (binary) {
    // Targets of 0 and 1: the mean predicted probability of a 1 against the frequency of 1s.
    double f1 = 0.0, p1 = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      f1 += y[i] / static_cast<double>(n);
      p1 += (probs ? o[i] : 1.0 / (1.0 + std::exp(-o[i]))) / static_cast<double>(n);
    }
    return judge_class_start({1.0 - f1, f1}, {1.0 - p1, p1}, "target value", opts);
  }
  // Regression: per column, the mean output against the target's mean, in target stds. A column is
  // judged by the larger of its own std and the root mean square of every column's std: a column that
  // is nearly constant (an image's corner pixel, 0 in almost every example) says nothing about the
  // start's scale, while a column in other units than the rest has a std that dominates the mean.
  std::vector<double> col_mean_out(static_cast<size_t>(k)), col_mean(static_cast<size_t>(k)),
      col_sd(static_cast<size_t>(k));
  double var_sum = 0.0;
  for (int64_t j = 0; j < k; ++j) {
    double so = 0.0, s1 = 0.0, s2 = 0.0;
    for (int64_t i = 0; i < N; ++i) {
      so += o[i * k + j];
      s1 += y[i * k + j];
    }
    so /= static_cast<double>(N);
    s1 /= static_cast<double>(N);
    for (int64_t i = 0; i < N; ++i) s2 += (y[i * k + j] - s1) * (y[i * k + j] - s1);
    col_mean_out[static_cast<size_t>(j)] = so;
    col_mean[static_cast<size_t>(j)] = s1;
    col_sd[static_cast<size_t>(j)] = std::sqrt(s2 / static_cast<double>(N));
    var_sum += s2 / static_cast<double>(N);
  }
  const double typical_sd = std::sqrt(var_sum / static_cast<double>(std::max<int64_t>(k, 1)));
  double worst_z = 0.0, mo = 0.0, my = 0.0, sy = 0.0;
  int64_t worst = -1;
  for (int64_t j = 0; j < k; ++j) {
    const size_t c = static_cast<size_t>(j);
    const double s1 = col_mean[c], sd = std::max(col_sd[c], typical_sd);
    if (!(col_sd[c] > 1e-12 * std::max(1.0, std::fabs(s1)))) continue;  // a constant target: no scale to judge by
    const double z = std::fabs(col_mean_out[c] - s1) / sd;
    if (z > worst_z) worst_z = z, worst = j, mo = col_mean_out[c], my = s1, sy = sd;
  }
  if (worst < 0 || !(worst_z > opts.initial_output_z)) return {};
  Finding g = make("L4", Severity::Warning,
                   "the untrained model's mean output " + fmt_num(mo) + " is " + fmt_num(worst_z) +
                       " target stds from the targets' mean " + fmt_num(my) +
                       (k > 1 ? " (output column " + num(worst) + ")" : std::string()));
  g.kind = Kind::InitialOutputBiased;
  g.evidence = {
      {"mean output", mo, ""},
      {"mean target", my, ""},
      {"target std", sy, k > 1 ? "the column's, or the RMS of every column's std where larger" : ""},
      {"|mean output - mean target| / target std", worst_z, "> " + fmt_num(opts.initial_output_z) + " warns"}};
  g.cause =
      "the targets are far from 0 and the final layer starts near 0 (its bias at 0): the first steps go to "
      "learning the targets' mean, with a loss and gradients dominated by that offset";
  g.fix = "initialise the final layer's bias to the targets' mean (" + fmt_num(my) +
          ") (Karpathy: \"initialise well\"), or standardise the targets (subtract the mean, divide by the std) "
          "and undo it on the predictions";
  return {g};
}

std::vector<Finding> check_initial_loss(double loss, int64_t num_classes, const std::string& kind_in,
                                        const LossCheckOptions& opts, const std::string& expected_why) {
  std::string kind = kind_in;
  std::transform(kind.begin(), kind.end(), kind.begin(), [](unsigned char c) { return std::tolower(c); });
  double expected = opts.expected_initial_loss;
  std::string why = expected_why.empty() ? "opts.expected_initial_loss" : expected_why;
  if (!std::isfinite(expected)) {
    if (kind == "cross_entropy" || kind == "crossentropy" || kind == "ce" || kind == "nll") {
      GS_CHECK(num_classes >= 2, "check_initial_loss", "kind '", kind_in, "' needs num_classes >= 2, got ",
               num_classes);
      expected = std::log(static_cast<double>(num_classes));
      why = "log(C) = log(" + num(num_classes) + "): uniform predictions over C classes";
    } else if (kind == "bce" || kind == "binary_cross_entropy" || kind == "bce_with_logits") {
      expected = std::log(2.0);
      why = "log(2): a prediction of 0.5 for every target";
    } else {
      GS_FAIL("check_initial_loss", "no default expectation for kind '", kind_in,
              "': use cross_entropy, nll or bce, or set LossCheckOptions::expected_initial_loss (for MSE with "
              "predictions near 0 at initialisation: mean(target^2))");
    }
  }
  if (!std::isfinite(loss)) {
    Finding f = make("L4", Severity::Error, "the initial " + kind_in + " loss is " + fmt_num(loss));
    f.kind = Kind::InitialLoss;
    f.nonfinite = true;
    f.evidence = {{"initial loss", loss, "must be finite"}, {"expected", expected, why}};
    f.cause =
        "the untrained model already produces non-finite outputs or the loss takes a log of 0: weights far "
        "too large, unscaled inputs (D5), log(softmax(x))";
    f.fix = "turn on anomaly mode (W4) to find the op; check the inputs (D2, D5) and the initialisation (M9)";
    return {f};
  }
  const double ratio = loss / expected;
  const bool high = ratio > opts.initial_loss_high, low = ratio < opts.initial_loss_low;
  Finding f = make(
      "L4", high || low ? Severity::Warning : Severity::Info,
      high  ? "the initial loss " + fmt_num(loss) + " is " + fmt_num(ratio) + "x the expected " + fmt_num(expected)
      : low ? "the initial loss " + fmt_num(loss) + " is only " + fmt_num(ratio) + "x the expected " + fmt_num(expected)
            : "the initial loss " + fmt_num(loss) + " is close to the expected " + fmt_num(expected));
  f.kind = Kind::InitialLoss;
  f.evidence = {{"initial loss", loss, ""},
                {"expected", expected, why},
                {"loss / expected", ratio,
                 "outside [" + fmt_num(opts.initial_loss_low) + ", " + fmt_num(opts.initial_loss_high) + "] warns"}};
  if (high) {
    f.cause =
        "the untrained model is confidently wrong: logits far from 0 (weights initialised too large; a "
        "large final-layer scale or bias; unscaled inputs, D5) — or the loss is summed over the batch instead "
        "of averaged (the ratio is then about the batch size)";
    f.fix =
        "initialise the last layer small (default or 1/sqrt(fan_in) init, bias 0), scale the inputs, use "
        "reduction mean (L6); then the first loss is ~" +
        fmt_num(expected);
  } else if (low) {
    f.cause =
        "the untrained model already does much better than guessing: the label leaks into the inputs, the "
        "model was not freshly initialised, num_classes is wrong, or the loss is divided by more than the "
        "batch";
    f.fix = "check what the inputs contain (D4, D7), that the model is new, and the number of classes";
  } else {
    f.fix = "none needed: an untrained model that guesses gives about this loss";
  }
  return {f};
}

namespace {
// Float targets of 0 and 1 only (binary or multi-label).
bool binary_targets(const Tensor& y) {
  NoGradGuard ng;
  const Tensor t = y.detach().to(kCPU).to(kFloat64).contiguous();
  const double* v = t.data_ptr<double>();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (v[i] != 0.0 && v[i] != 1.0) return false;
  return true;
}

// L4's probe of a skewed start: the same forward with the final layer's bias at 0 (the last bias
// with one value per output). A start that leans towards some classes because of that bias (set
// by hand, copied from another dataset's priors) straightens out; one that leans because of the
// features through random final weights (ReLU activations all >= 0, a residual stream that adds
// up) does not, and is info: no bias to fix, and the initial loss L4 judges says what it costs.
void confirm_one_final_bias(nn::Module& model, const Tensor& x, const Tensor& y, const Tensor& out, Finding& f,
                            const LossCheckOptions& o, const std::string& loss_type) {
  const int64_t outputs = out.dim() >= 1 ? out.size(-1) : 1;
  Tensor bias;
  for (auto& [name, p] : model.named_parameters())
    if (p.dim() == 1 && p.size(0) == outputs && name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0)
      bias = p;
  bool from_bias = false;
  if (bias.defined()) {
    NoGradGuard ng;
    const Tensor saved = bias.detach().clone();
    bias.detach().zero_();
    try {
      const std::vector<Finding> again = check_initial_outputs(model(x), y, o, loss_type);
      from_bias = std::none_of(again.begin(), again.end(), [](const Finding& g) {
        return g.fires() && g.is("L4", Kind::InitialOutputBiased);
      });
    } catch (const std::exception&) {
      from_bias = true;  // the probe could not run: the finding stands
    }
    bias.detach().copy_(saved);
  }
  f.evidence.push_back({"skew gone with the final bias at 0", from_bias ? 1.0 : 0.0, "1 confirms the bias"});
  if (from_bias) return;
  f.severity = Severity::Info;
  f.title += "; with the final bias at 0 it stays: the lean comes from the features through the random final "
             "weights, not from a bias";
  f.cause = "an untrained network whose last hidden activations share a non-zero mean (ReLU outputs are >= 0, "
            "a residual stream adds its blocks) leans towards some classes until the first steps centre it";
  f.fix = "none needed; the initial loss (L4) says whether the start costs anything";
}

}  // namespace

void confirm_final_bias(nn::Module& model, const Tensor& x, const Tensor& y, const Tensor& out,
                        std::vector<Finding>& start, const LossCheckOptions& o, const std::string& loss_type) {
  for (Finding& f : start)
    if (f.is("L4", Kind::InitialOutputBiased) && !(y.is_floating_point() && !binary_targets(y)))
      confirm_one_final_bias(model, x, y, out, f, o, loss_type);
}

void revise_output_init(Report& found, bool fit_judged, bool learned_slowly, const std::vector<double>& step_losses) {
  if (step_losses.size() < 10 || !fit_judged || learned_slowly) return;
  const size_t tail = step_losses.size() / 10;
  double last = 0.0;
  for (size_t i = step_losses.size() - tail; i < step_losses.size(); ++i)
    last += step_losses[i] / static_cast<double>(tail);
  const double first = step_losses.front();
  for (size_t i = 0; i < found.findings().size(); ++i) {
    Finding f = found.findings()[i];
    if (!f.fires() || !f.is("L4", Kind::InitialOutputBiased) || !std::isfinite(f.value_of("target std"))) continue;
    const double z = f.value_of("|mean output - mean target| / target std");
    const double past = first / (1.0 + z * z);
    if (!(std::isfinite(last) && first > 0 && last < past)) continue;
    f.severity = Severity::Info;
    f.title += "; the run went past it (its last steps' loss " + fmt_num(last) + ", below " + fmt_num(past) +
               ") and L9 finds it trained";
    f.evidence.push_back({"first loss / (1 + z^2)", past, ""});
    f.evidence.push_back({"mean loss over the last tenth of steps", last, "below the line above: info"});
    f.cause = "the first steps went to learning the targets' mean, and the run recovered them";
    f.fix = "none needed; a final bias started at the targets' mean (or standardised targets) saves those steps";
    found.replace(i, f);
  }
}

void confirm_initial_loss(std::vector<Finding>& findings, bool cause_confirmed, const LossCheckOptions& opts) {
  for (Finding& f : findings) {
    if (!f.fires() || !f.is("L4", Kind::InitialLoss) || f.nonfinite || cause_confirmed) continue;
    const double ratio = f.value_of("loss / expected");
    if (!(ratio > opts.initial_loss_high && ratio <= opts.initial_loss_confirm)) continue;
    f.severity = Severity::Info;
    f.title += ": confident logits from the initialisation, no probe found a cause";
    f.evidence.push_back({"loss / expected, confirmed without a probe above", opts.initial_loss_confirm,
                          "a ratio in (" + fmt_num(opts.initial_loss_high) + ", " +
                              fmt_num(opts.initial_loss_confirm) + "] warns only with a cause found"});
    f.cause = "ReLU-family networks at their default initialisation often start with logits of a few units "
              "(activations >= 0 that add up through the layers); the first steps bring the loss down";
    f.fix = "none needed; to start at the expected loss, scale the final layer's weights down (or zero them)";
  }
}

void soften_trained_start(std::vector<Finding>& findings, const Tensor& output, const Tensor& target,
                          bool probabilities, const LossCheckOptions& opts) {
  const auto low = [&](const Finding& f) {
    return f.fires() && f.is("L4", Kind::InitialLoss) && !f.nonfinite &&
           f.value_of("loss / expected") < opts.initial_loss_low;
  };
  if (std::none_of(findings.begin(), findings.end(), low) || !output.defined() || !target.defined() ||
      output.dim() < 1 || output.size(0) != target.size(0) || output.size(0) < 8)
    return;
  NoGradGuard ng;
  const int64_t B = output.size(0);
  std::vector<double> predicted, truth;
  if (output.dim() == 2 && output.size(1) > 1 && target.dim() == 1 && is_integral(target.dtype())) {
    predicted = contiguous_doubles(argmax(output.detach(), 1).to(kFloat64));
    truth = contiguous_doubles(target.to(kFloat64));
  } else if (output.numel() == B && target.numel() == B) {
    const Tensor p = output.detach().reshape({B});
    predicted = contiguous_doubles((probabilities ? gt(p, 0.5) : gt(p, 0.0)).to(kFloat64));
    truth = contiguous_doubles(target.detach().reshape({B}).to(kFloat64));
    for (double& t : truth) t = t >= 0.5 ? 1.0 : 0.0;  // soft targets: their side of 0.5
  } else {
    return;
  }
  std::map<double, int64_t> counts;
  int64_t right = 0;
  for (int64_t i = 0; i < B; ++i) {
    ++counts[truth[i]];
    right += predicted[i] == truth[i];
  }
  int64_t most = 0;
  for (const auto& [label, n] : counts) most = std::max(most, n);
  const double share = static_cast<double>(right) / static_cast<double>(B);
  const double chance = static_cast<double>(most) / static_cast<double>(B);
  const double needed = chance + opts.trained_start_share * (1.0 - chance);
  if (!(share > needed)) return;
  for (Finding& f : findings) {
    if (!low(f)) continue;
    f.severity = Severity::Info;
    f.title += ": the model starts trained";
    f.evidence.push_back({"share of the batch the first predictions get right", share,
                          "> " + fmt_num(needed) + " (chance + " + fmt_num(opts.trained_start_share) +
                              " x the rest): a trained start, info"});
    f.evidence.push_back({"the most frequent class's share (chance)", chance, ""});
    f.cause =
        "the model has learned already (resumed from a checkpoint, or fine-tuned whole from a model trained on "
        "this task): its first loss is what that training left, not an untrained model's";
    f.fix = "none needed; log C is the rule for an untrained model";
  }
}

bool started_trained(const Report& r) {
  return std::any_of(r.findings().begin(), r.findings().end(), [](const Finding& f) {
    return f.is("L4", Kind::InitialLoss) && f.severity == Severity::Info &&
           f.value_of("share of the batch the first predictions get right") >= 0.0;
  });
}

// ---- L2, L3, L4 during training (the monitor's run checks) --------------------------------
namespace {
bool class_scores(const nn::Loss& l, const Tensor& input, const Tensor& target) {
  return loss_type::cross_entropy(l) || loss_type::takes_class_indices(l, input, target);
}

// L2 on the sampled steps' logits.
class SoftmaxInputRunCheck final : public RunCheck {
 public:
  std::string ids() const override { return "L2"; }
  uint32_t events() const override { return RunEvent::LossInput; }
  void loss_input(RunContext& c, nn::Loss& l, const Tensor& input, const Tensor& target) override {
    if (!c.sampled()) return;
    if (loss_type::nll(l))
      c.add_all(check_nll_input(input));
    else if (class_scores(l, input, target))
      c.add_all(check_cross_entropy_input(input));
    else
      return;
    c.note_ran("L2");
  }
};

// L3 on the sampled steps' BCELoss inputs, and over the run the range of those inputs: probabilities
// that never leave [sigmoid(0), sigmoid(1)] = [0.5, 0.731] on targets of both values went through a
// sigmoid twice (sigmoid(sigmoid(z)) cannot go lower or higher).
class BceInputRunCheck final : public RunCheck {
 public:
  explicit BceInputRunCheck(const LossCheckOptions& o) : o_(o) {}
  std::string ids() const override { return "L3"; }
  uint32_t events() const override { return RunEvent::LossInput | RunEvent::Finish; }
  void loss_input(RunContext& c, nn::Loss& l, const Tensor& input, const Tensor& target) override {
    if (!c.sampled() || l.type_name().rfind("BCE", 0) != 0) return;
    if (l.type_name() == "BCELoss") {
      c.add_all(check_bce_input(input));
      if (input.is_floating_point() && input.numel() > 0 && target.defined() && target.numel() > 0) {
        NoGradGuard ng;
        lo_ = std::min(lo_, amin(input.detach()).item<double>());
        hi_ = std::max(hi_, amax(input.detach()).item<double>());
        zeros_ = zeros_ || amin(target.detach()).item<double>() == 0.0;
        ones_ = ones_ || amax(target.detach()).item<double>() == 1.0;
        ++steps_;
      }
    }
    c.add_all(check_bce_targets(target));
    c.note_ran("L3");
  }
  void finish(RunContext& c) override {
    constexpr double kSigmoidOfOne = 0.7310585786300049;
    if (steps_ < o_.squashed_min_steps || !zeros_ || !ones_ || !(lo_ >= 0.5 - 1e-6) || !(hi_ <= kSigmoidOfOne + 1e-6))
      return;
    Finding f = make("L3", Severity::Error,
                     "binary cross-entropy was fed values between " + fmt_num(lo_) + " and " + fmt_num(hi_) +
                         " in every sampled step: probabilities that went through a sigmoid twice");
    f.kind = Kind::BceSquashedTwice;
    f.evidence = {{"least input over the sampled steps", lo_, ">= 0.5 = sigmoid(0)"},
                  {"largest input over the sampled steps", hi_, "<= 0.731 = sigmoid(1)"},
                  {"sampled steps", static_cast<double>(steps_), ">= " + num(o_.squashed_min_steps) + " judged"}};
    f.cause =
        "sigmoid(p) of a probability p in [0, 1] lies in [0.5, 0.731]: the model's output is a probability "
        "already (a sigmoid in the last layer, or in a backbone the head wraps) and a second sigmoid maps "
        "it again, so no prediction can go below 0.5 and the class 0 rows are never predicted";
    f.fix =
        "apply the sigmoid once: drop the second one, or give the logits (before any sigmoid) to "
        "BCEWithLogitsLoss";
    c.add_all({f});
  }

 private:
  LossCheckOptions o_;
  double lo_ = std::numeric_limits<double>::infinity(), hi_ = -std::numeric_limits<double>::infinity();
  bool zeros_ = false, ones_ = false;
  int64_t steps_ = 0;
};

// L4 once, on the first step's loss: computed here on a detached copy.
class InitialLossRunCheck final : public RunCheck {
 public:
  explicit InitialLossRunCheck(const MonitorOptions& o) : o_(o.loss), num_classes_(o.num_classes) {}
  std::string ids() const override { return "L4"; }
  uint32_t events() const override { return RunEvent::LossInput; }
  void loss_input(RunContext& c, nn::Loss& l, const Tensor& input, const Tensor& target) override {
    if (done_ || !c.sampled()) return;
    done_ = true;
    NoGradGuard ng;
    // The classes lie on dimension 1, as the loss reads them: (N, C) or (N, C, d1, ...) (a per-token
    // or per-pixel prediction).
    const int64_t C = num_classes_ > 0 ? num_classes_ : (input.dim() >= 2 ? input.size(1) : 2);
    const Tensor v = l.forward(input.detach(), target);
    // The expected first loss is the loss's own value for a prediction that knows nothing (0.5 for
    // every target, uniform over the classes), on this batch: a BCE pos_weight or class weights
    // raise it above log 2 by design.
    LossCheckOptions o = o_;
    auto neutral = [&](const Tensor& pred) {
      if (std::isfinite(o.expected_initial_loss)) return;
      const Tensor n = l.forward(pred, target);
      if (n.numel() == 1 && std::isfinite(n.item<double>())) o.expected_initial_loss = n.item<double>();
    };
    if ((loss_type::cross_entropy(l) || loss_type::nll(l)) && v.numel() == 1) {
      // Summed over the batch: the loss's own value for logits that prefer no class (B x log C).
      const bool summed = l.reduction() == nn::Reduction::Sum;
      if (summed)
        neutral(loss_type::nll(l) ? full_like(input.detach(), -std::log(static_cast<double>(C)))
                                  : zeros_like(input.detach()));
      std::vector<Finding> fs =
          check_initial_loss(v.item<double>(), C, "cross_entropy", summed ? o : o_,
                             summed ? "the loss's own value for logits that prefer no class" : "");
      confirm_initial_loss(fs, false, o_);  // the gate's probe of the final bias confirms it there
      soften_trained_start(fs, input, target, false, o_);
      c.add_all(fs);
    } else if (l.type_name().rfind("BCE", 0) == 0 && v.numel() == 1) {
      const Tensor in = input.detach();
      neutral(l.type_name() == "BCEWithLogitsLoss" ? zeros_like(in) : full_like(in, 0.5));
      std::vector<Finding> fs = check_initial_loss(
          v.item<double>(), 2, "bce", o, "the loss of a prediction of 0.5 for every target, with the loss's own weights");
      confirm_initial_loss(fs, false, o_);
      soften_trained_start(fs, in, target, l.type_name() == "BCELoss", o_);
      c.add_all(fs);
    } else {
      return;
    }
    c.note_ran("L4");
  }

 private:
  LossCheckOptions o_;
  int64_t num_classes_;
  bool done_ = false;
};

}  // namespace

std::unique_ptr<RunCheck> make_softmax_input_run_check(const MonitorOptions&) {
  return std::make_unique<SoftmaxInputRunCheck>();
}
std::unique_ptr<RunCheck> make_bce_input_run_check(const MonitorOptions& o) {
  return std::make_unique<BceInputRunCheck>(o.loss);
}
std::unique_ptr<RunCheck> make_initial_loss_run_check(const MonitorOptions& o) {
  return std::make_unique<InitialLossRunCheck>(o);
}

}  // namespace gradsleuth::debug
