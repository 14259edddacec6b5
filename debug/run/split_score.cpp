// SplitScore (split_score.h): a trained model's loss, accuracy and label tail on a split.
#include "debug/run/split_score.h"

#include <algorithm>

#include "core/ops.h"
#include "debug/run/diagnose_util.h"

namespace gradsleuth::debug::run_detail {
namespace {

// Adds a batch's examples to `t`: softmax over (B, C) outputs with int64 (B) labels in [0, C); for
// float 0/1 targets of the output's shape, the sigmoid of logits (threshold 0) or the probability.
void count_label_tail(const Tensor& out, const Tensor& y, double threshold, double below, LabelTail& t) {
  const Tensor o = out.detach().to(kCPU).to(kFloat32).contiguous();
  if (o.dim() == 2 && y.dim() == 1 && y.dtype() == kInt64 && o.size(1) > 1) {
    const Tensor labels = y.to(kCPU).contiguous();
    const int64_t* lab = labels.data_ptr<int64_t>();
    const float* v = o.data_ptr<float>();
    const int64_t n = o.size(0), c = o.size(1);
    for (int64_t i = 0; i < n; ++i) {
      if (lab[i] < 0 || lab[i] >= c) continue;
      const float* row = v + i * c;
      const float top = *std::max_element(row, row + c);
      double z = 0;
      for (int64_t k = 0; k < c; ++k) z += std::exp(static_cast<double>(row[k] - top));
      const double p = std::exp(static_cast<double>(row[lab[i]] - top)) / z;
      ++t.scored;
      t.tail += p < below;
    }
  } else if (std::isfinite(threshold) && out.shape() == y.shape() && is_floating(y.dtype())) {
    const Tensor labels = y.to(kCPU).to(kFloat32).contiguous();
    const float* lab = labels.data_ptr<float>();
    const float* v = o.data_ptr<float>();
    for (int64_t i = 0; i < o.numel(); ++i) {
      if (lab[i] != 0.0f && lab[i] != 1.0f) continue;
      const double p1 = threshold == 0.0 ? 1 / (1 + std::exp(-static_cast<double>(v[i]))) : v[i];
      ++t.scored;
      t.tail += (lab[i] == 1.0f ? p1 : 1 - p1) < below;
    }
  }
}

}  // namespace

bool count_flips(const SplitScore& before, const SplitScore& after, int64_t& fixed, int64_t& broken) {
  if (before.right.empty() || before.right.size() != after.right.size()) return false;
  fixed = broken = 0;
  for (size_t i = 0; i < before.right.size(); ++i) {
    fixed += !before.right[i] && after.right[i];
    broken += before.right[i] && !after.right[i];
  }
  return true;
}

double accuracy_threshold(const nn::Loss* loss) {
  return dynamic_cast<const nn::BCEWithLogitsLoss*>(loss) ? 0.0 : dynamic_cast<const nn::BCELoss*>(loss) ? 0.5 : kNaN;
}

SplitScore score(nn::Module& model, const nn::DataLoader& loader, const LossFunction& loss, int64_t max_batches,
                 double threshold, RowLosses rows, double tail_below, const ModeProbe* train_mode) {
  SplitScore s;
  NoGradGuard ng;
  const bool was = model.is_training();
  if (train_mode)
    set_mode_without_randomness(model, true, *train_mode);
  else
    model.eval();
  const Device d = model_device(model);
  double loss_sum = 0, right = 0, counted = 0;
  double exact_right = 0, exact_rows = 0;
  const int64_t nb = std::min<int64_t>(loader.num_batches(), max_batches);
  for (int64_t i = 0; i < nb; ++i) {
    const nn::Batch b = loader.batch(0, i);
    const Tensor out = model(b.x.to(d)), y = b.y.to(d);
    const int64_t n = b.x.size(0);
    const Tensor l = loss(out, y);
    if (l.numel() == 1) loss_sum += l.item<double>() * static_cast<double>(n);
    s.examples += n;
    s.class_labels = s.class_labels || y.dtype() == kInt64;
    count_label_tail(out, y, threshold, tail_below, s.tail);
    // Class scores (B, C) against labels (B), or per position (B, C, d1, ...) against (B, d1, ...), the
    // layout cross-entropy takes for a tagger's tokens or a segmenter's pixels: each position is scored.
    const bool positions = out.dim() >= 3 && y.dim() == out.dim() - 1 && out.size(0) == y.size(0) && [&] {
      for (int64_t k = 1; k < y.dim(); ++k)
        if (y.size(k) != out.size(k + 1)) return false;
      return true;
    }();
    const bool class_targets =
        ((out.dim() == 2 && y.dim() == 1) || positions) && y.dtype() == kInt64 && out.size(1) > 1;
    Tensor ok;  // float targets: each element right or not
    if (class_targets) {
      // Each row's (position's) prediction against its label, and the confusion; rows whose target is no
      // class (ignore_index: unlabelled, a sequence's padding) are not scored, as the loss skips them.
      const int64_t C = out.size(1);
      if (s.confusion.empty())
        s.confusion.assign(static_cast<size_t>(C), std::vector<int64_t>(static_cast<size_t>(C), 0));
      const std::vector<int64_t> p = argmax(out, 1).to(kCPU).contiguous().reshape({-1}).to_vector<int64_t>(),
                                 t = y.to(kCPU).contiguous().reshape({-1}).to_vector<int64_t>();
      for (size_t k = 0; k < p.size() && k < t.size(); ++k) {
        if (t[k] < 0 || t[k] >= C) continue;
        s.right.push_back(p[k] == t[k]);
        right += p[k] == t[k] ? 1 : 0;
        ++counted;
        if (static_cast<size_t>(C) == s.confusion.size())
          ++s.confusion[static_cast<size_t>(t[k])][static_cast<size_t>(p[k])];
      }
    } else if (std::isfinite(threshold) && out.shape() == y.shape() && is_floating(y.dtype())) {
      ok = eq(gt(out, threshold).to(kFloat32), y.to(kFloat32)).to(kFloat32);
    }
    if (ok.defined()) {
      const Tensor flat = ok.to(kCPU).contiguous().reshape({-1});
      const float* v = flat.data_ptr<float>();
      double hits = 0;
      for (int64_t k = 0; k < flat.numel(); ++k) {
        s.right.push_back(v[k] > 0.5f);
        hits += v[k] > 0.5f;
      }
      if (flat.numel() > 0 && flat.numel() % n == 0 && flat.numel() > n) {
        // Per example, every element right.
        const int64_t per = flat.numel() / n;
        for (int64_t r = 0; r < n; ++r) {
          bool all = true;
          for (int64_t k = 0; k < per && all; ++k) all = v[r * per + k] > 0.5f;
          exact_right += all ? 1 : 0;
        }
        exact_rows += static_cast<double>(n);
      }
      if (flat.numel() > 0) {
        // Per example: the share right of its elements.
        right += hits / static_cast<double>(flat.numel()) * static_cast<double>(n);
        counted += static_cast<double>(n);
      }
    }
    if (rows == RowLosses::kEvery || (rows == RowLosses::kUnscored && !class_targets && !ok.defined()))
      if (out.dim() >= 1 && y.dim() >= 1 && out.size(0) == n && y.size(0) == n)
        for (int64_t k = 0; k < n; ++k) {
          const Tensor lk = loss(out.narrow(0, k, 1), y.narrow(0, k, 1));
          if (lk.numel() == 1) s.row_losses.push_back(lk.item<double>());
        }
  }
  model.train(was);
  if (s.examples > 0) s.loss = loss_sum / static_cast<double>(s.examples);
  if (counted > 0) s.accuracy = right / counted;
  if (exact_rows > 0) s.exact_match = exact_right / exact_rows;
  if (static_cast<int64_t>(s.row_losses.size()) != s.examples) s.row_losses.clear();
  return s;
}

}  // namespace gradsleuth::debug::run_detail
