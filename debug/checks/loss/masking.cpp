// L5's home: what the loss leaves out. Every target masked by ignore_index (a mean over no label is
// 0 / 0), during training; and at the gate, padded positions of a batch of sequences that the loss
// still reads (a mask built and never applied, a mean over every position).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/loss/loss_checks.h"
#include "debug/checks/run_check.h"
#include "debug/evidence/tensor_stats.h"

namespace gradsleuth::debug {

// ---- L5 masked targets ---------------------------------------------------------------------

std::vector<Finding> check_masked_targets(const Tensor& target, int64_t ignore_index,
                                          std::optional<double> loss_value) {
  GS_CHECK(target.defined(), "check_masked_targets", "needs a defined target tensor");
  if (target.numel() == 0 || !is_integral(target.dtype())) return {};
  const std::vector<int64_t> y = target.detach().contiguous().to_vector<int64_t>();
  const int64_t masked = std::count(y.begin(), y.end(), ignore_index);
  if (masked < static_cast<int64_t>(y.size())) return {};
  const bool nan = loss_value.has_value() && std::isnan(*loss_value);
  Finding f = detail::make("L5", nan ? Severity::Error : Severity::Warning,
                           "every one of the " + detail::num(masked) + " targets equals ignore_index " +
                               detail::num(ignore_index) +
                               (nan ? ": the loss is NaN (0 / 0)" : ": a mean over no labels is 0 / 0 = NaN"));
  f.nonfinite = true;  // a mean over no labels is 0 / 0: the loss is NaN
  f.shape = shape_of(target);
  f.evidence = {{"masked targets", static_cast<double>(masked), "all of them warns"},
                {"targets", static_cast<double>(y.size()), ""},
                {"ignore_index", static_cast<double>(ignore_index), ""}};
  if (loss_value.has_value()) f.evidence.push_back({"loss", *loss_value, "NaN is an error"});
  f.cause =
      "the whole batch is masked (a collate or padding step sets every label to ignore_index, a label "
      "mapping that misses every class): mean reduction divides a sum over zero labels by zero labels, as "
      "PyTorch does, and one NaN loss turns every weight into NaN at the next step";
  f.fix =
      "find the step that masks the labels (check a batch with D1/D9); skip batches with no valid label, or "
      "divide the summed loss by max(count, 1)";
  return {f};
}

// ---- L5 padding the loss reads ----------------------------------------------------------------

namespace {

// One batch of sequences as rows of positions: B rows of T positions, each position a vector of
// `width` numbers (x (B, T, ...) or y (B, T, ...) flattened after the position axis).
struct PositionGrid {
  int64_t B = 0, T = 0, width = 0;
  std::vector<double> v;
  PositionGrid(const Tensor& t, int64_t b, int64_t steps) : B(b), T(steps) {
    width = t.numel() / std::max<int64_t>(1, B * T);
    v = t.detach().contiguous().to(kFloat64).to_vector<double>();
  }
  const double* at(int64_t b, int64_t t) const { return v.data() + (b * T + t) * width; }
  bool equals(int64_t b, int64_t t, const std::vector<double>& p) const {
    return std::equal(p.begin(), p.end(), at(b, t));
  }
  std::vector<double> vec(int64_t b, int64_t t) const { return {at(b, t), at(b, t) + width}; }
};

// The padded positions of a batch, read from the inputs and the targets: a run of positions at
// the end (or the start) of rows that all hold one input vector and one target, with lengths that
// differ between rows, both values rare among the real positions. Empty when there is none.
struct Padding {
  bool found = false;
  bool left = false;                 // the runs sit at the start of the rows
  std::vector<int64_t> run;          // padded positions of each row
  std::vector<double> input, label;  // the pad input vector and the pad target
  int64_t padded = 0, rows_padded = 0;
  double label_share = 0;  // the share of the real positions that carry the pad target too
  bool padded_at(int64_t b, int64_t t, int64_t T) const { return left ? t < run[b] : t >= T - run[b]; }
};

// `token_ids`: x holds one integer id per position (an embedding's input). A rare id in runs at the rows'
// ends is a pad id whatever target those positions carry: a real class there (a tagger's "O") is
// padding labelled as that class, which the loss then counts.
Padding find_padding_side(const PositionGrid& x, const PositionGrid& y, bool left, bool token_ids,
                          const LossCheckOptions& o) {
  Padding p;
  p.left = left;
  const int64_t B = x.B, T = x.T;
  const int64_t edge = left ? 0 : T - 1;
  // The pad input: the vector most rows hold at their edge position.
  std::map<std::vector<double>, int64_t> at_edge;
  for (int64_t b = 0; b < B; ++b) ++at_edge[x.vec(b, edge)];
  const auto most = std::max_element(at_edge.begin(), at_edge.end(),
                                     [](const auto& a, const auto& c) { return a.second < c.second; });
  if (most->second < 2) return p;
  p.input = most->first;
  p.run.assign(B, 0);
  for (int64_t b = 0; b < B; ++b) {
    int64_t r = 0;
    while (r < T && x.equals(b, left ? r : T - 1 - r, p.input)) ++r;
    p.run[b] = r;
    p.padded += r;
    p.rows_padded += r > 0;
  }
  // Lengths must differ (a batch of sequences cut to one length has no padding), and padding
  // must fill a share of the batch's positions.
  const int64_t lengths = static_cast<int64_t>(std::set<int64_t>(p.run.begin(), p.run.end()).size());
  if (lengths < 2 || p.rows_padded < std::max<int64_t>(2, B / 4) ||
      static_cast<double>(p.padded) < o.padding_min_share * static_cast<double>(B * T))
    return p;
  // One target on every padded position.
  for (int64_t b = 0; b < B && p.label.empty(); ++b)
    if (p.run[b] > 0) p.label = y.vec(b, left ? 0 : T - 1);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      if (p.padded_at(b, t, T) && !y.equals(b, t, p.label)) return p;
  // Both rare among the real positions (a background class or a zero pixel row is no padding).
  // The real position next to a row's padding may carry the pad target (a next-token target).
  int64_t real = 0, input_seen = 0, label_seen = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      if (p.padded_at(b, t, T)) continue;
      ++real;
      input_seen += x.equals(b, t, p.input);
      const bool next_to_pad = p.run[b] > 0 && t == (left ? p.run[b] : T - 1 - p.run[b]);
      label_seen += !next_to_pad && y.equals(b, t, p.label);
    }
  const double rare = o.padding_value_rare * static_cast<double>(real);
  p.label_share = real > 0 ? static_cast<double>(label_seen) / static_cast<double>(real) : 0;
  p.found = real > 0 && static_cast<double>(input_seen) <= rare &&
            (static_cast<double>(label_seen) <= rare || (token_ids && x.width == 1));
  return p;
}

std::string position_value(const std::vector<double>& v) {
  if (v.size() == 1) return fmt_num(v[0]);
  const bool zero = std::all_of(v.begin(), v.end(), [](double d) { return d == 0.0; });
  return zero ? "a vector of zeros" : "one vector of " + detail::num(static_cast<int64_t>(v.size())) + " values";
}

}  // namespace

std::vector<Finding> check_padding_read(nn::Module& model, const Tensor& x, const LossCheckOptions& opts) {
  if (!x.defined() || x.dim() != 2 || !is_integral(x.dtype())) return {};
  const int64_t B = x.size(0), T = x.size(1);
  if (B < 8 || T < 4) return {};
  // The padding from the ids alone: the targets are one per row here, so every position's is 0.
  const PositionGrid xs(x, B, T), none(zeros({B, T}, TensorOptions(kFloat64)), B, T);
  Padding pad = find_padding_side(xs, none, false, true, opts);
  if (!pad.found) pad = find_padding_side(xs, none, true, true, opts);
  if (!pad.found) return {};
  const bool was = model.is_training();
  std::vector<double> change, spread;
  try {
    NoGradGuard ng;
    model.eval();
    const Tensor ids = x.detach();
    const Tensor more = full({B, T / 2}, pad.input.front(), TensorOptions(x.dtype()).device(x.device()));
    const Tensor a = model(ids), b = model(pad.left ? cat({more, ids}, 1) : cat({ids, more}, 1));
    model.train(was);
    if (!a.defined() || !b.defined() || a.shape() != b.shape() || a.dim() < 1 || a.size(0) != B ||
        !a.is_floating_point())
      return {};
    for (int64_t d = 1; d < a.dim(); ++d)
      if (a.size(d) == T) return {};  // an output per position (a tagger): its length follows T
    const Tensor a2 = a.to(kFloat64).reshape({B, -1}), b2 = b.to(kFloat64).reshape({B, -1});
    change = sqrt(sum((b2 - a2) * (b2 - a2), {1})).to(kCPU).to_vector<double>();
    const Tensor c = a2 - a2.mean({0}, true);
    spread = sqrt(sum(c * c, {1})).to(kCPU).to_vector<double>();
  } catch (const std::exception&) {
    model.train(was);
    return {};  // the model takes rows of its own length only (a positional table, a flatten)
  }
  std::vector<double> sorted = spread;
  std::nth_element(sorted.begin(), sorted.begin() + B / 2, sorted.end());
  const double typical = sorted[static_cast<size_t>(B / 2)];
  if (!(typical > 0.0) || !std::isfinite(typical)) return {};
  std::vector<double> ratio;
  for (double v : change) ratio.push_back(v / typical);
  std::sort(ratio.begin(), ratio.end());
  const double p90 = ratio[static_cast<size_t>(std::floor(0.9 * static_cast<double>(B - 1)))];
  if (!(p90 >= opts.padding_read_ratio)) return {};
  Finding f =
      detail::make("L5", Severity::Warning,
                   "the model reads the padding: with " + detail::num(T / 2) + " more pad ids " +
                       (pad.left ? "before" : "after") + " each sequence, a tenth of the rows' outputs move by " +
                       fmt_num(p90) + "x or more the typical distance between two rows' outputs");
  f.kind = Kind::PaddingRead;
  f.shape = shape_of(x);
  f.evidence = {{"padded positions", static_cast<double>(pad.padded) / static_cast<double>(B * T),
                 ">= " + fmt_num(opts.padding_min_share) + " judged"},
                {"pad id", pad.input.front(), ""},
                {"rows' output change at the 90th percentile / the median row's distance from the mean output", p90,
                 ">= " + fmt_num(opts.padding_read_ratio) + " warns"},
                {"largest change / that distance", ratio.back(), ""}};
  f.cause = "the output of a sequence depends on how much padding " + std::string(pad.left ? "precedes" : "follows") +
            " it: a recurrent classifier that reads its state after the last step of the padded batch (output[:, -1]) "
            "instead of at each sequence's own last token, so every pad step washes out what it read";
  f.fix =
      "read the state at each sequence's length (gather at length - 1, what pack_padded_sequence gives), or mask "
      "the padded positions out of the pooling and the attention";
  return {f};
}

std::vector<Finding> check_padding_in_loss(const Tensor& x, const Tensor& output, const Tensor& y,
                                           const std::function<Tensor(const Tensor&, const Tensor&)>& loss,
                                           const LossCheckOptions& opts) {
  GS_CHECK(x.defined() && output.defined() && y.defined(), "check_padding_in_loss",
           "needs the batch's inputs, the model's output on them and the targets");
  if (x.dim() < 2 || y.dim() < 2 || output.dim() < 2) return {};
  const int64_t B = x.size(0), T = x.size(1);
  if (B < 2 || T < 4 || y.size(0) != B || y.size(1) != T || output.size(0) != B || !output.is_floating_point())
    return {};
  // The output's position axis: dimension 1 (B, T, C), else the first later one of size T (B, C, T).
  int64_t axis = -1;
  for (int64_t d = 1; d < output.dim() && axis < 0; ++d)
    if (output.size(d) == T) axis = d;
  if (axis < 0) return {};

  const PositionGrid xs(x, B, T), ys(y, B, T);
  const bool token_ids = is_integral(x.dtype()) && x.dim() == 2;
  Padding pad = find_padding_side(xs, ys, false, token_ids, opts);
  if (!pad.found) pad = find_padding_side(xs, ys, true, token_ids, opts);
  if (!pad.found) return {};

  // The loss's gradient with respect to the output, by position, with the output at the padded
  // positions moved by about its own spread (a deterministic pattern; the user's random stream is
  // not touched): a loss that masks the padding gives those positions exactly zero whatever the
  // output is there, while one that reads them answers in proportion to how far the move took it
  // (an untrained model may predict the pad target by chance: a bias of zero on zero inputs).
  const Tensor positions = output.detach().transpose(1, axis).contiguous();  // (B, T, ...)
  const PositionGrid os(positions, B, T);
  double s1 = 0.0, s2 = 0.0, n = 0.0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      if (!pad.padded_at(b, t, T))
        for (int64_t i = 0; i < os.width; ++i) {
          const double v = os.at(b, t)[i];
          s1 += v;
          s2 += v * v;
          n += 1.0;
        }
  const double var = n > 1.0 ? (s2 - s1 * s1 / n) / (n - 1.0) : 0.0;
  const double spread = var > 0.0 && std::isfinite(var) ? std::sqrt(var) : 1.0;
  std::vector<double> moved = os.v;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      if (pad.padded_at(b, t, T))
        for (int64_t i = 0; i < os.width; ++i) {
          const double u = std::fmod(0.6180339887 * static_cast<double>((b * T + t) * os.width + i + 1), 1.0);
          moved[static_cast<size_t>((b * T + t) * os.width + i)] += spread * (2.0 * u - 1.0);
        }
  Tensor o = tensor(moved, positions.shape(), TensorOptions().dtype(kFloat64).device(output.device()))
                 .to(output.dtype())
                 .transpose(1, axis)
                 .contiguous();
  o.requires_grad_(true);
  Tensor g;
  {
    EnableGradGuard eg;
    const Tensor l = loss(o, y);
    if (l.numel() != 1 || !l.requires_grad() || !std::isfinite(l.item<double>())) return {};
    // The gradient with respect to the output alone, the graph kept: a loss that also reads a term the
    // model's forward stored (an auxiliary load-balancing loss) must not have that graph freed, nor the
    // model's gradients touched.
    g = autograd::grad({l}, {o}, {}, true, false, true)[0];
  }
  if (!g.defined()) return {};
  const PositionGrid gs(g.detach().transpose(1, axis).abs(), B, T);
  double on_pad = 0.0, on_real = 0.0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const double* p = gs.at(b, t);
      double m = 0.0;
      for (int64_t i = 0; i < gs.width; ++i) m += p[i];
      (pad.padded_at(b, t, T) ? on_pad : on_real) += m;
    }
  const double padded_share = static_cast<double>(pad.padded) / static_cast<double>(B * T);
  const double real_positions = static_cast<double>(B * T - pad.padded);
  if (!(on_real > 0.0) || !std::isfinite(on_real) || !std::isfinite(on_pad)) return {};
  // The gradient per padded position against the gradient per real position.
  const double ratio = (on_pad / static_cast<double>(pad.padded)) / (on_real / real_positions);
  if (ratio < opts.padding_gradient_ratio) return {};

  Finding f = detail::make("L5", Severity::Warning,
                           "the loss reads the padding: " + detail::pct(padded_share) +
                               " of the batch's positions are padding (" + detail::num(pad.rows_padded) + " of " +
                               detail::num(B) + " sequences padded at the " + (pad.left ? "start" : "end") +
                               "), and the loss's gradient reaches them: " + fmt_num(ratio) + "x a real position's");
  f.kind = Kind::PaddingInLoss;
  f.shape = shape_of(y);
  f.evidence = {{"padded positions", padded_share, ">= " + fmt_num(opts.padding_min_share) + " judged"},
                {"gradient per padded position / per real position", ratio,
                 ">= " + fmt_num(opts.padding_gradient_ratio) + " warns (0 when the loss masks them)"}};
  if (pad.input.size() == 1) f.evidence.push_back({"pad input", pad.input[0], ""});
  if (pad.label.size() == 1) f.evidence.push_back({"pad target", pad.label[0], ""});
  const bool real_class = pad.label_share > opts.padding_value_rare;
  if (real_class) {
    f.title += "; their target, " + position_value(pad.label) + ", is a real class here too (" +
               detail::pct(pad.label_share) + " of the real positions)";
    f.evidence.push_back({"real positions with the pad target", pad.label_share,
                          "> " + fmt_num(opts.padding_value_rare) + ": the padding is labelled as a real class"});
  }
  f.cause = "the loss is taken over every position of padded sequences (input " + position_value(pad.input) +
            ", target " + position_value(pad.label) + "): " +
            (real_class ? "the padding was labelled with a real class (the pad positions' tag set to the class "
                          "numbered like the pad id, a tagger's 'O') instead of ignore_index, so the loss and the "
                          "accuracy count every pad position as that class and the class counts swell with it"
                        : "a mask built and never applied, or a mean that divides by every position instead of the "
                          "real ones") +
            ". The model learns to predict the padding, the real tokens get a smaller share of each step, and "
            "the loss and any accuracy over all positions are diluted by positions that are trivial to get right";
  f.fix = real_class ? "label the pad positions with ignore_index (-100, CrossEntropyLoss's default) instead of a "
                       "class, and count accuracy over the real positions only; or average the loss over them: "
                       "sum(loss * mask) / sum(mask), with mask 1 on real positions"
                     : "average over the real positions only: sum(loss * mask) / sum(mask), with mask 1 on real "
                       "positions; or give CrossEntropyLoss the pad target as ignore_index";
  return {f};
}

// ---- L5 targets outside the classes that the loss leaves out ---------------------------------------

std::vector<Finding> check_targets_masked_by_loss(const Tensor& x, const Tensor& output, const Tensor& y,
                                                  const std::function<Tensor(const Tensor&, const Tensor&)>& loss,
                                                  int64_t ignore_index) {
  GS_CHECK(output.defined() && y.defined(), "check_targets_masked_by_loss", "needs the output and the targets");
  if (!is_integral(y.dtype()) || y.numel() == 0 || !output.is_floating_point() || output.dim() != y.dim() + 1)
    return {};
  // The class axis: the last ((B, C), (B, T, C)) or dimension 1 ((B, C, T), as PyTorch reads it).
  int64_t axis = -1;
  const Shape os = output.shape(), ys = y.shape();
  if (std::equal(ys.begin(), ys.end(), os.begin()))
    axis = output.dim() - 1;
  else if (os[0] == ys[0] && std::equal(ys.begin() + 1, ys.end(), os.begin() + 2))
    axis = 1;
  if (axis < 0) return {};
  const int64_t C = output.size(axis);
  const std::vector<int64_t> v = y.detach().contiguous().to_vector<int64_t>();
  std::vector<size_t> outside;
  int64_t least = std::numeric_limits<int64_t>::max(), most = std::numeric_limits<int64_t>::min();
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == ignore_index) continue;
    if (v[i] < 0 || v[i] >= C) {
      outside.push_back(i);
      continue;
    }
    least = std::min(least, v[i]);
    most = std::max(most, v[i]);
  }
  std::vector<Finding> out;
  // Token ids in, token ids out: ids of the output's vocabulary (at least kVocabulary of them, half of
  // them in the batch's inputs).
  constexpr int64_t kVocabulary = 10;
  bool vocabulary = false;
  if (x.defined() && is_integral(x.dtype()) && x.numel() > 0 && C >= kVocabulary) {
    const std::vector<int64_t> ids = x.detach().contiguous().to(kInt64).to_vector<int64_t>();
    const auto [lo, hi] = std::minmax_element(ids.begin(), ids.end());
    const std::set<int64_t> distinct(ids.begin(), ids.end());
    vocabulary = *lo >= 0 && *hi < C && 2 * static_cast<int64_t>(distinct.size()) >= C;
  }
  if (least >= 0 && most < C && vocabulary) {
    // A model over token ids whose head scores the whole vocabulary: ids that are never a target (the
    // inputs' pad id 0, tokens nothing precedes) are classes no label uses, not labels numbered from 1.
    Finding f = detail::make("L5", Severity::Info,
                             "every target of the batch has an output (labels " + detail::num(least) + ".." +
                                 detail::num(most) + " of " + detail::num(C) +
                                 " classes), a vocabulary the inputs' token ids share: ids that no target uses "
                                 "(the pad id, tokens nothing precedes) are harmless");
    f.kind = Kind::TargetsWithinOutputs;
    f.shape = shape_of(y);
    f.evidence = {{"least target", static_cast<double>(least), ""},
                  {"largest target", static_cast<double>(most), "< C: within the outputs"},
                  {"classes C (the output's)", static_cast<double>(C), ""}};
    out.push_back(f);
  }
  if (outside.empty() || outside.size() == v.size()) return out;
  // The gradient by target: a loss that leaves a target out gives its output row exactly zero.
  Tensor o = output.detach().clone();
  o.requires_grad_(true);
  Tensor g;
  try {
    EnableGradGuard eg;
    const Tensor l = loss(o, y);
    if (l.numel() != 1 || !l.requires_grad() || !std::isfinite(l.item<double>())) return out;
    g = autograd::grad({l}, {o}, {}, true, false, true)[0];  // the output's alone, the graph kept
  } catch (const std::exception&) {
    return out;  // the loss cannot take them: D9's error stands
  }
  if (!g.defined()) return out;
  const std::vector<double> per =
      sum(g.detach().abs().to(kFloat64), {axis}).contiguous().to_vector<double>();  // y's shape
  double on_real = 0.0;
  for (size_t i = 0, k = 0; i < per.size(); ++i) {
    if (k < outside.size() && outside[k] == i) {
      if (per[i] != 0.0) return out;
      ++k;
    } else {
      on_real += per[i];
    }
  }
  if (!(on_real > 0.0)) return out;
  Finding f = detail::make("L5", Severity::Info,
                           "the loss leaves out the " + detail::num(static_cast<int64_t>(outside.size())) +
                               " targets outside [0, " + detail::num(C) +
                               ") (a pad or unknown marker it masks itself): their outputs get no gradient");
  f.kind = Kind::TargetsMaskedByLoss;
  f.shape = shape_of(y);
  f.evidence = {{"targets outside the classes", static_cast<double>(outside.size()), ""},
                {"their share of the loss's gradient", 0.0, "exactly 0: masked"}};
  out.push_back(f);
  return out;
}

bool targets_within_outputs(const Report& gate) {
  return std::any_of(gate.findings().begin(), gate.findings().end(),
                     [](const Finding& f) { return f.is("L5", Kind::TargetsWithinOutputs); });
}

void revise_masked_labels(Report& data, const Report& gate) {
  const bool masked = std::any_of(gate.findings().begin(), gate.findings().end(),
                                  [](const Finding& f) { return f.is("L5", Kind::TargetsMaskedByLoss); });
  const bool within = targets_within_outputs(gate);
  if (!masked && !within) return;
  for (size_t i = 0; i < data.size(); ++i) {
    const Finding& d = data.findings()[i];
    if (!d.fires() || d.check != "D9") continue;
    const bool outside = std::any_of(d.evidence.begin(), d.evidence.end(),
                                     [](const Evidence& e) { return e.name.rfind("labels outside", 0) == 0; });
    const bool zero_unused = !outside && !std::isnan(d.value_of("labels equal to 0"));
    Finding f = d;
    f.severity = Severity::Info;
    if (outside && masked) {
      f.title += " (the loss masks them: their outputs get no gradient, L5)";
      f.fix = "none needed: the loss leaves these targets out";
    } else if (zero_unused && within) {
      f.title += " (the model's output has a class for every label: class 0 is one the targets do not use, L5)";
      f.fix = "none needed: no label falls outside the model's classes";
    } else {
      continue;
    }
    data.replace(i, f);
  }
}

// ---- L5 during training (the monitor's run check) ---------------------------------------------

namespace {

// L5 with the loss it produced (a NaN loss from all-masked targets is an error): the sampled
// steps, and any step whose loss is not finite.
class MaskedTargetsRunCheck final : public RunCheck {
 public:
  std::string ids() const override { return "L5"; }
  uint32_t events() const override { return RunEvent::LossValue; }
  void loss_value(RunContext& c, nn::Loss& l, const Tensor& target) override {
    if (!(c.sampled() || !std::isfinite(c.loss_value)) || !(loss_type::cross_entropy(l) || loss_type::nll(l)) ||
        target.dtype() != kInt64)
      return;
    c.add_all(check_masked_targets(target, loss_type::ignore_index(l), c.loss_value));
    c.note_ran("L5");
  }
};

}  // namespace

std::unique_ptr<RunCheck> make_masked_targets_run_check(const MonitorOptions&) {
  return std::make_unique<MaskedTargetsRunCheck>();
}

}  // namespace gradsleuth::debug
