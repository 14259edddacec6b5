// D4 input/label alignment: each loaded input hashed back to the dataset and its label compared (see data_checks.h).
#include "debug/checks/data/data_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
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

// ---- D4 input/label alignment ----------------------------------------------------------

namespace {
// Per-feature mean and std of a whole dataset's inputs (float64, read in chunks). The same
// examples in another order give the same statistics.
std::pair<Tensor, Tensor> feature_stats(const nn::Dataset& d, int64_t chunk) {
  Tensor s, sq;
  const int64_t n = d.size();
  for (int64_t lo = 0; lo < n; lo += chunk) {
    const Tensor x = d.get_batch(rows(lo, std::min(n, lo + chunk))).x;
    const Tensor xb = x.reshape({x.size(0), -1}).to(kFloat64);
    const Tensor a = sum(xb, {0}), b = sum(xb * xb, {0});
    s = s.defined() ? s + a : a;
    sq = sq.defined() ? sq + b : b;
  }
  const Tensor mean = s / static_cast<double>(n);
  return {mean, sqrt(clamp(sq / static_cast<double>(n) - mean * mean, 0.0, std::nullopt))};
}

// D4 through a per-feature affine transform: the loader may read the reference after a
// normalisation the reference did not go through ((x - mean) / std, x / 255). Both sides are
// standardised per feature with their own whole-dataset statistics, which undoes any such
// transform with a positive scale, and each loader row is looked up by nearest neighbour
// among the reference's rows. A row matches when the RMS distance of the standardised
// values is below 1e-2 (the same example: ~1e-6; two different images: ~1).
struct AffineMatch {
  int64_t tried = 0, matched = 0, mismatched = 0;
  std::string example;
};
AffineMatch match_after_affine(const nn::Dataset& reference, const nn::Dataset& loaded, const Tensor& rows_x,
                               const std::vector<Label>& rows_y, const std::vector<std::string>& where, int64_t chunk) {
  AffineMatch m;
  NoGradGuard ng;
  const int64_t K = rows_x.size(0);
  if (K == 0 || reference.size() == 0 || loaded.size() == 0) return m;
  const Tensor probe = reference.get_batch({0}).x;
  if (probe.numel() != rows_x.numel() / K || !probe.is_floating_point() || !rows_x.is_floating_point()) return m;
  const auto [mr, sr] = feature_stats(reference, chunk);
  const auto [ml, sl] = feature_stats(loaded, chunk);
  // Features constant on either side carry nothing to compare.
  const Tensor use = (gt(sr, 1e-12) * gt(sl, 1e-12)).to(kFloat64);
  const double F = sum(use).item<double>();
  if (F < 1) return m;
  auto standardise = [&](const Tensor& x, const Tensor& mu, const Tensor& sd) {
    return (x.reshape({x.size(0), -1}).to(kFloat64) - mu) / maximum(sd, 1e-12) * use;
  };
  const Tensor zl = standardise(rows_x, ml, sl);
  const Tensor nl = sum(zl * zl, {1}, true);  // (K, 1)
  // Per loader row, the labels of every reference row within the distance (duplicates of an
  // image may carry several labels, as in the byte-for-byte comparison).
  const double within = 1e-4 * F;  // RMS distance < 1e-2
  std::vector<std::vector<Label>> found(static_cast<size_t>(K));
  const int64_t n = reference.size();
  for (int64_t lo = 0; lo < n; lo += chunk) {
    const nn::Batch b = reference.get_batch(rows(lo, std::min(n, lo + chunk)));
    const Tensor zr = standardise(b.x, mr, sr);
    const Tensor d2 = nl + sum(zr * zr, {1}).reshape({1, -1}) - 2.0 * matmul(zl, zr.transpose(0, 1));
    const std::vector<double> dv = d2.contiguous().to_vector<double>();
    const std::vector<Label> yl = row_labels(b.y);
    const size_t cols = yl.size();
    for (size_t r = 0; r < static_cast<size_t>(K); ++r)
      for (size_t c = 0; c < cols; ++c)
        if (dv[r * cols + c] < within) found[r].push_back(yl[c]);
  }
  for (size_t r = 0; r < static_cast<size_t>(K); ++r) {
    ++m.tried;
    if (found[r].empty()) continue;
    ++m.matched;
    const std::vector<Label>& ls = found[r];
    if (std::any_of(ls.begin(), ls.end(), [&](const Label& l) { return l.hash == rows_y[r].hash; })) continue;
    if (++m.mismatched == 1)
      m.example = where[r] + " has label " + fmt_num(rows_y[r].value) +
                  ", but the reference has that image (after the transform) with label " + fmt_num(ls.front().value);
  }
  return m;
}
}  // namespace

std::vector<Finding> check_alignment(const nn::Dataset& reference, const nn::DataLoader& loader,
                                     const DataCheckOptions& opts) {
  // x hash -> the labels that image has in the reference (several for duplicates).
  std::unordered_map<uint64_t, std::vector<Label>> known;
  const int64_t n = reference.size(), chunk = std::max<int64_t>(1, opts.alignment_chunk);
  known.reserve(static_cast<size_t>(n));
  for (int64_t lo = 0; lo < n; lo += chunk) {
    const nn::Batch b = reference.get_batch(rows(lo, std::min(n, lo + chunk)));
    const std::vector<uint64_t> xh = row_hashes_x(b.x);
    const std::vector<Label> yl = row_labels(b.y);
    for (size_t r = 0; r < xh.size(); ++r) {
      std::vector<Label>& ls = known[xh[r]];
      if (std::none_of(ls.begin(), ls.end(), [&](const Label& l) { return l.hash == yl[r].hash; })) ls.push_back(yl[r]);
    }
  }

  const int64_t epoch = loader.epoch(), nb = std::min(opts.alignment_batches, loader.num_batches());
  int64_t checked = 0, unknown = 0, mismatched = 0;
  std::string example, shape;
  // Up to 128 rows not found by hash, for the look-up through an affine transform.
  std::vector<Tensor> unknown_x;
  std::vector<Label> unknown_y;
  std::vector<std::string> unknown_where;
  for (int64_t i = 0; i < nb; ++i) {
    const nn::Batch b = loader.batch(epoch, i);
    if (shape.empty()) shape = "x " + shape_str(b.x.shape()) + ", y " + shape_str(b.y.shape());
    const std::vector<uint64_t> xh = row_hashes_x(b.x);
    const std::vector<Label> yl = row_labels(b.y);
    for (size_t r = 0; r < xh.size(); ++r) {
      // A masked label (ignore_index) carries no class to compare: not counted (L5 judges masking).
      if (r < yl.size() && yl[r].value == static_cast<double>(opts.ignore_index)) continue;
      ++checked;
      auto it = known.find(xh[r]);
      if (it == known.end()) {
        ++unknown;
        if (unknown_x.size() < 128 && b.x.is_floating_point()) {
          unknown_x.push_back(b.x.narrow(0, static_cast<int64_t>(r), 1));
          unknown_y.push_back(yl[r]);
          unknown_where.push_back("batch " + num(i) + ", row " + num(static_cast<int64_t>(r)) + " (dataset row " +
                                  num(b.indices[r]) + ")");
        }
        continue;
      }
      const std::vector<Label>& ls = it->second;
      if (std::any_of(ls.begin(), ls.end(), [&](const Label& l) { return l.hash == yl[r].hash; })) continue;
      if (++mismatched == 1) {
        std::string have;
        for (size_t k = 0; k < ls.size(); ++k) have += (k ? " or " : "") + fmt_num(ls[k].value);
        example = "batch " + num(i) + ", row " + num(static_cast<int64_t>(r)) + " (dataset row " + num(b.indices[r]) +
                  ") has label " + fmt_num(yl[r].value) + ", but the reference has that image with label " + have;
      }
    }
  }
  std::vector<Finding> out;
  if (checked == 0) return out;
  const int64_t matched_x = checked - unknown;
  const double mis_frac = matched_x > 0 ? static_cast<double>(mismatched) / static_cast<double>(matched_x) : 0.0;
  const double unk_frac = static_cast<double>(unknown) / static_cast<double>(checked);
  if (mis_frac > opts.max_misaligned_fraction) {
    Finding f =
        make("D4", Severity::Error,
             num(mismatched) + " of " + num(matched_x) + " examples from " + loader.dataset().name() +
                 " carry a label their image never has in " + reference.name() + ": inputs and labels are misaligned");
    f.shape = shape;
    f.evidence = {{"examples checked", static_cast<double>(checked), ""},
                  {"mismatched (x, y) pairs", static_cast<double>(mismatched), ""},
                  {"mismatched fraction", mis_frac, "> " + fmt_num(opts.max_misaligned_fraction) + " is an error"},
                  {"inputs not in the reference", static_cast<double>(unknown), ""}};
    f.cause =
        "the inputs were shuffled, sorted or filtered without their labels (x[perm] with y "
        "unpermuted, or two separately shuffled lists); the model is trained on random labels, so the loss "
        "stays near log(C) while nothing errors. For example: " +
        example;
    f.fix =
        "permute x and y with the same indices (x.index_select(0, p) and y.index_select(0, p)), or keep them "
        "in one nn::TensorDataset and let the DataLoader shuffle";
    out.push_back(f);
  }
  if (unk_frac > opts.max_unknown_fraction && !unknown_x.empty()) {
    // A reference that went through different preprocessing: is the loader's data the
    // reference after a per-feature affine transform? Then compare the pairs through it.
    const AffineMatch am =
        match_after_affine(reference, loader.dataset(), cat(unknown_x, 0), unknown_y, unknown_where, chunk);
    if (am.tried > 0 && static_cast<double>(am.matched) >= 0.9 * static_cast<double>(am.tried)) {
      const double frac = static_cast<double>(am.mismatched) / static_cast<double>(am.matched);
      const bool bad = frac > opts.max_misaligned_fraction;
      Finding f =
          make("D4", bad ? Severity::Error : Severity::Info,
               bad ? num(am.mismatched) + " of " + num(am.matched) + " examples from " + loader.dataset().name() +
                         " carry a label their image never has in " + reference.name() +
                         " (compared through a per-feature affine transform): inputs and "
                         "labels are misaligned"
                   : "the loader's inputs are " + reference.name() +
                         "'s after a per-feature affine "
                         "transform (a normalisation the reference did not go through): " +
                         num(am.matched) + " of " + num(am.tried) + " pairs compared through it, every label matches");
      f.shape = shape;
      f.evidence = {{"examples checked", static_cast<double>(checked), ""},
                    {"inputs not in the reference byte for byte", static_cast<double>(unknown), ""},
                    {"looked up after standardising each feature", static_cast<double>(am.tried), ""},
                    {"found (RMS distance < 0.01)", static_cast<double>(am.matched), ">= 90% means the same data"},
                    {"mismatched (x, y) pairs", static_cast<double>(am.mismatched),
                     "> " + fmt_num(opts.max_misaligned_fraction) + " of those found is an error"}};
      f.cause = bad ? "the inputs were shuffled, sorted or filtered without their labels; the reference "
                      "went through different preprocessing, which the check undid. For example: " +
                          am.example
                    : "the reference was not transformed the way the loader's data is (raw against normalised): the "
                      "check standardised both per feature and found each loader example in the reference with its "
                      "label; nothing is wrong with the loader";
      f.fix = bad ? "permute x and y with the same indices, or keep them in one nn::TensorDataset and let the "
                    "DataLoader shuffle"
                  : "none needed; to compare byte for byte, pass the reference through the same transform "
                    "(norm.transform(raw) when the loader reads norm.transform(raw))";
      out.push_back(f);
      return out;
    }
  }
  // Not found is not misaligned: a loader that augments (a random flip, a crop) changes the inputs it
  // hands out, and the check then has nothing to compare. It says so, as info, and judges nothing.
  if (unk_frac > opts.max_unknown_fraction) {
    Finding f = make("D4", Severity::Info,
                     num(unknown) + " of " + num(checked) + " inputs from " + loader.dataset().name() +
                         " do not occur in " + reference.name() + ": their alignment cannot be checked");
    f.shape = shape;
    f.evidence = {{"examples checked", static_cast<double>(checked), ""},
                  {"inputs not in the reference", static_cast<double>(unknown), ""},
                  {"unknown fraction", unk_frac, "> " + fmt_num(opts.max_unknown_fraction) + ": not judged (info)"}};
    f.cause =
        "the loader transforms the inputs (augmentation, a non-affine transform) so they no longer equal the "
        "reference's bytes, even after undoing a per-feature affine transform (a normalisation), or the "
        "reference is a different dataset";
    f.fix =
        "pass as reference the same data the loader reads, before shuffling, with the same transform (e.g. "
        "norm.transform(raw) when the loader reads norm.transform(raw)), or check a loader without augmentation";
    out.push_back(f);
  }
  return out;
}

// ---- D4 over the run: the pairs the loop hands the model and the loss ----------------------
namespace {
// On the sampled steps, each row of the model's input batch is hashed back to the training loader's
// dataset and the class the loss gets for it is set beside the class the dataset gives it. A loop
// that pairs inputs with other examples' labels (the previous batch's, a second loader's, x and y
// shuffled apart) has labels that follow no relabelling of the dataset's; a loop that relabels
// consistently (y - 1, a class map) follows one, and is not judged.
class LoopAlignmentRunCheck final : public RunCheck {
 public:
  explicit LoopAlignmentRunCheck(const MonitorOptions& o) : data_(o.train_dataset), opts_(o.data) {}
  std::string ids() const override { return "D4"; }
  uint32_t events() const override { return data_ ? RunEvent::LossInput | RunEvent::Finish : 0u; }
  void loss_input(RunContext& c, nn::Loss&, const Tensor& input, const Tensor& target) override {
    if (c.sampled() && c.x.defined() && target.defined() && is_floating(target.dtype()) &&
        target.shape() == c.x.shape() && target.numel() >= 2) {
      // Float targets of the input's shape: are they the very values the model got?
      NoGradGuard ng;
      const Tensor t = target.detach().to(kFloat64), x = c.x.detach().to(t.device()).to(kFloat64);
      const double scale = amax(abs(t)).item<double>();
      ++float_steps_;
      input_targets_ += scale > 0 && amax(abs(t - x)).item<double>() <= 1e-6 * scale;
      c.note_ran("D4");
      return;
    }
    if (!c.sampled() || broken_ || !c.x.defined() || !target.defined() || target.dtype() != kInt64 ||
        target.dim() != 1 || c.x.dim() < 1 || c.x.size(0) != target.size(0))
      return;
    if (!built_ && !build()) return;
    NoGradGuard ng;
    const std::vector<uint64_t> xh = row_hashes_x(c.x.detach().cpu());
    const std::vector<int64_t> y = target.detach().cpu().to_vector<int64_t>();
    // The class the loss input scores highest in each row (class scores (B, C), C >= 3): a target that is
    // always that class is the model's own prediction.
    std::vector<int64_t> top;
    if (input.defined() && input.dim() == 2 && input.size(0) == target.size(0) && input.size(1) >= 3 &&
        is_floating(input.dtype()))
      top = argmax(input.detach(), 1).cpu().to_vector<int64_t>();
    for (size_t r = 0; r < xh.size() && r < y.size(); ++r) {
      ++seen_;
      if (!top.empty() && y[r] != opts_.ignore_index) {
        ++scored_;
        own_ += top[r] == y[r];
      }
      auto it = label_of_.find(xh[r]);
      if (it == label_of_.end() || it->second == kSeveral || y[r] == opts_.ignore_index) continue;
      ++pairs_[{it->second, y[r]}];
      ++found_;
      same_ += it->second == y[r];
    }
    c.note_ran("D4");
  }
  void finish(RunContext& c) override {
    if (std::optional<Finding> f = inputs_as_targets(c)) {
      c.add(*f);
      return;
    }
    if (found_ < opts_.loop_alignment_min_rows || 2 * found_ < seen_) return;  // too few rows found to judge
    // The relabelling that explains the most rows: each dataset class sent to its most frequent loss class.
    std::map<int64_t, std::pair<int64_t, int64_t>> best;  // dataset class -> (rows, its most frequent loss class)
    for (const auto& [p, n] : pairs_)
      if (n > best[p.first].first) best[p.first] = {n, p.second};
    int64_t kept = 0;
    std::set<int64_t> images;  // the loss classes the relabelling sends the dataset's classes to
    for (const auto& [cls, to] : best) {
      kept += to.first;
      images.insert(to.second);
    }
    const double agreement = static_cast<double>(kept) / static_cast<double>(found_);
    const bool one_to_one = images.size() == best.size();
    if (std::optional<Finding> f = self_labelled(c, agreement, one_to_one)) {
      c.add(*f);
      return;
    }
    if (agreement >= opts_.loop_alignment_agreement) return;
    Finding f = make("D4", Severity::Warning,
                     "the labels the loss gets do not belong to the inputs the model gets: of " + num(found_) +
                         " training rows found in the dataset, only " + pct(agreement) +
                         " keep their label (or any one relabelling of it)");
    f.step = c.steps;
    f.evidence = {{"rows of the sampled steps' input batches", static_cast<double>(seen_), ""},
                  {"rows found in the training dataset (one label there)", static_cast<double>(found_),
                   ">= " + num(opts_.loop_alignment_min_rows) + " and half the rows judge"},
                  {"share explained by one relabelling of the dataset's classes", agreement,
                   "< " + fmt_num(opts_.loop_alignment_agreement) + " warns"}};
    f.cause =
        "the training loop pairs inputs with other examples' labels: labels taken from another batch (the "
        "previous one, a second loader), x and y shuffled or indexed apart, or a batch's labels reordered. "
        "The dataset itself is aligned (D4 on the loader passes); the model then learns from labels that do "
        "not belong to its inputs and its loss stays near chance";
    f.fix =
        "take x and y from the same batch (for (const nn::Batch& b : loader): model(b.x), loss(.., b.y)) and "
        "shuffle or index them together";
    c.add(f);
  }

 private:
  // The loss's targets are the classes its own input scores highest, in nearly every sampled row, and not
  // the dataset's labels: the loop trains the model on its predictions (argmax(logits) passed where b.y
  // was meant). The model then confirms whatever it predicted first, and its loss falls to 0 while it
  // learns nothing. A consistent relabelling of the dataset's classes that the model has learned
  // perfectly is no such case: its targets follow the data one to one (the dataset classes' most frequent
  // targets all differ), where a model's own predictions merge classes and drift.
  std::optional<Finding> self_labelled(const RunContext& c, double agreement, bool one_to_one) const {
    if (scored_ < opts_.loop_alignment_min_rows) return std::nullopt;
    const double own = static_cast<double>(own_) / static_cast<double>(scored_);
    const double same = static_cast<double>(same_) / static_cast<double>(found_);
    if (own < opts_.loop_self_label_share || same > opts_.loop_self_label_data_share ||
        (one_to_one && agreement >= opts_.loop_alignment_agreement))
      return std::nullopt;
    Finding f = make("D4", Severity::Warning,
                     "the loss's targets are the model's own predictions: in " + pct(own) + " of " + num(scored_) +
                         " sampled rows the target is the class the loss input scores highest, and only " + pct(same) +
                         " of the rows found in the dataset get its label");
    f.kind = Kind::TargetsFromPredictions;
    f.step = c.steps;
    f.evidence = {
        {"sampled rows with class scores", static_cast<double>(scored_), ">= " + num(opts_.loop_alignment_min_rows)},
        {"share whose target is the top-scored class", own, ">= " + fmt_num(opts_.loop_self_label_share) + " and"},
        {"rows found in the training dataset", static_cast<double>(found_), ""},
        {"share of those whose target is the dataset's label", same,
         "<= " + fmt_num(opts_.loop_self_label_data_share) + " and"},
        {"share explained by one relabelling of the dataset's classes", agreement,
         "< " + fmt_num(opts_.loop_alignment_agreement) + ", or classes merged, warns"}};
    f.cause =
        "the loop passes the model's predictions as the loss's target (pred = argmax(logits, 1), computed for a "
        "running accuracy, passed where the batch's labels were meant): the model is trained to agree with "
        "itself, its loss falls to 0, and it never sees a label";
    f.fix = "pass the batch's labels to the loss (loss(logits, b.y)); compare pred with b.y only to count the accuracy";
    return f;
  }
  // The loss scored against the model's own inputs at every sampled step, while the training data holds
  // targets of that shape that differ from its inputs (a denoiser's clean images, a forecaster's next
  // frames): loss(model(b.x), b.x) where b.y was meant. The model learns to copy its input.
  std::optional<Finding> inputs_as_targets(const RunContext& c) const {
    if (float_steps_ < 3 || input_targets_ < float_steps_) return std::nullopt;
    double differ = 0, scale = 0;
    try {
      const int64_t n = std::min<int64_t>(data_->size(), 256);
      if (n < 2) return std::nullopt;
      const nn::Batch b = data_->get_batch(rows(0, n));
      if (!b.y.defined() || !is_floating(b.y.dtype()) || b.y.shape() != b.x.shape()) return std::nullopt;
      NoGradGuard ng;
      const Tensor y = b.y.to(kFloat64);
      differ = amax(abs(y - b.x.to(kFloat64))).item<double>();
      scale = amax(abs(y)).item<double>();
    } catch (const std::exception&) {
      return std::nullopt;
    }
    if (!(scale > 0) || !(differ > 1e-3 * scale)) return std::nullopt;  // an autoencoder's data: y is x
    Finding f = make("D4", Severity::Warning,
                     "the loss's targets are the model's own inputs at every sampled step (" + num(input_targets_) +
                         " of " + num(float_steps_) +
                         "), while the training data's targets of that shape differ from its inputs: the "
                         "data's targets are never read");
    f.kind = Kind::TargetsAreInputs;
    f.step = c.steps;
    f.evidence = {{"sampled steps with float targets of the input's shape", static_cast<double>(float_steps_), ">= 3"},
                  {"of them, targets equal to the model's input", static_cast<double>(input_targets_), "all and"},
                  {"largest |target - input| in the training data (first rows)", differ,
                   "> 1e-3 x its largest |target| (" + fmt_num(1e-3 * scale) + ") warns"}};
    f.cause =
        "the loop passes the model's input as the loss's target (loss(model(b.x), b.x)) where the data's targets "
        "were meant (b.y: a denoiser's clean image, the next frame, the restored signal): the model is trained to "
        "copy its input, and its training loss falls to nearly 0 while it learns nothing it was meant to";
    f.fix =
        "pass the batch's targets to the loss (loss(model(b.x), b.y)); for a plain autoencoder, give the loader "
        "targets that are its inputs";
    return f;
  }
  static constexpr int64_t kSeveral = std::numeric_limits<int64_t>::min();  // a duplicate input with several labels
  bool build() {
    built_ = true;
    const int64_t n = data_->size(), chunk = std::max<int64_t>(1, opts_.alignment_chunk);
    if (n == 0 || n > opts_.loop_alignment_max_rows) return !(broken_ = true);
    try {
      for (int64_t lo = 0; lo < n; lo += chunk) {
        const nn::Batch b = data_->get_batch(rows(lo, std::min(n, lo + chunk)));
        if (b.y.dtype() != kInt64 || b.y.dim() != 1) return !(broken_ = true);  // class labels only
        const std::vector<uint64_t> xh = row_hashes_x(b.x);
        const std::vector<int64_t> y = b.y.to_vector<int64_t>();
        for (size_t r = 0; r < xh.size(); ++r) {
          auto [it, fresh] = label_of_.emplace(xh[r], y[r]);
          if (!fresh && it->second != y[r]) it->second = kSeveral;
        }
      }
    } catch (const std::exception&) {
      return !(broken_ = true);
    }
    return true;
  }
  const nn::Dataset* data_;
  DataCheckOptions opts_;
  bool built_ = false, broken_ = false;
  std::unordered_map<uint64_t, int64_t> label_of_;
  std::map<std::pair<int64_t, int64_t>, int64_t> pairs_;  // (dataset class, loss class) -> rows
  int64_t seen_ = 0, found_ = 0;
  int64_t same_ = 0;              // rows found whose loss class is the dataset's
  int64_t scored_ = 0, own_ = 0;  // rows with class scores, and those whose target is the top-scored class
  int64_t float_steps_ = 0, input_targets_ = 0;  // sampled steps with float targets of the input's shape; equal to it
};
}  // namespace

std::unique_ptr<RunCheck> make_loop_alignment_run_check(const MonitorOptions& o) {
  return std::make_unique<LoopAlignmentRunCheck>(o);
}

}  // namespace gradsleuth::debug
