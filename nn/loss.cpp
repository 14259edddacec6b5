// Losses: target checks with teaching errors, then the loss from core ops.
// Only binary_cross_entropy has a hand-written backward (see there why).
#include "nn/loss.h"

#include <cmath>
#include <sstream>

#include "core/autocast.h"
#include "nn/layer_checks.h"

namespace gradsleuth::nn {

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::None: return "none";
    case Reduction::Mean: return "mean";
    case Reduction::Sum: return "sum";
  }
  return "?";
}

namespace {
// A Reduction cast from an out-of-range integer would otherwise fall through to one of the three.
void check_reduction(Reduction r, const char* who) {
  GS_CHECK(r == Reduction::None || r == Reduction::Mean || r == Reduction::Sum, who, "reduction value ",
           static_cast<int>(r), " is not a Reduction; pass Reduction::None, Reduction::Mean or Reduction::Sum");
}
}  // namespace

namespace functional {

Tensor reduce_loss(const Tensor& loss, Reduction reduction) {
  check_reduction(reduction, "loss reduction");
  switch (reduction) {
    case Reduction::None: return loss;
    case Reduction::Sum: return loss.sum();
    case Reduction::Mean:
      return loss.numel() == 0 ? full({}, NAN, TensorOptions(loss.dtype()).device(loss.device())) : loss.mean();
  }
  return loss;
}

namespace {

void check_pair(const Tensor& input, const Tensor& target, const char* who) {
  GS_CHECK(input.defined() && target.defined(), who, "input and target must both be defined tensors");
  GS_CHECK(input.is_floating_point(), who, "expects a floating-point input, got ", input.str(),
           "; convert it with .to(gs::kFloat32)");
}

// ---- class-index targets (NLL, CrossEntropy) ----------------------------------------------
// Checks input (B, C, d1..) against target (B, d1..) and explains the usual mix-ups.
void check_class_target(const Tensor& input, const Tensor& target, const char* who, int64_t ignore_index) {
  if (target.is_floating_point() || target.dtype() == kBool) {
    if (target.shape() == input.shape() && input.dim() >= 2)
      GS_FAIL(who, "target ", target.str(),
              " has the input's shape, so it looks like one-hot vectors or "
              "probabilities. This loss takes class indices: pass target.argmax(1), an int64 tensor of shape ",
              shape_str([&] {
                Shape s = input.shape();
                s.erase(s.begin() + 1);
                return s;
              }()),
              ".");
    // Float labels of shape (B, 1) (read as a column) need the extra dim squeezed too: converting
    // the dtype alone only trades this error for the shape error below.
    Shape expected = input.shape();
    if (input.dim() >= 2) expected.erase(expected.begin() + 1);
    Shape squeezed = target.shape();
    const bool column = input.dim() >= 2 && target.dim() == input.dim() && target.size(1) == 1 &&
                        (squeezed.erase(squeezed.begin() + 1), squeezed == expected);
    if (column)
      GS_FAIL(who, "target must hold int64 class indices of shape ", shape_str(expected), ", got ", target.str(),
              ": float labels with an extra dim of size 1. Squeeze it and convert: target.squeeze(1).to(gs::kInt64) "
              "(for float regression targets use nn::MSELoss).");
    GS_FAIL(who, "target must hold int64 class indices, got ", target.str(),
            ". Convert with target.to(gs::kInt64) (for float regression targets use nn::MSELoss).");
  }
  GS_CHECK(input.dim() >= 2, who, "expects input (B, C) of scores per class, got ", shape_str(input.shape()),
           input.dim() == 1 ? ". For a binary problem with one score per example use nn::BCEWithLogitsLoss; for a "
                              "single example (C) pass a 0-dim target."
                            : "");
  Shape expected = input.shape();
  expected.erase(expected.begin() + 1);  // (B, d1..)
  if (target.shape() == expected) {
    // Range: every non-ignored index must name a class.
    if (target.numel() == 0) return;
    NoGradGuard ng;
    Tensor valid = target != static_cast<double>(ignore_index);
    Tensor safe_lo = where(valid, target, full({}, 0.0, TensorOptions(kInt64).device(target.device())));
    const int64_t lo = amin(safe_lo).item<int64_t>(), hi = amax(safe_lo).item<int64_t>();
    const int64_t C = input.size(1);
    if (lo < 0 || hi >= C) {
      const int64_t bad = lo < 0 ? lo : hi;
      GS_FAIL(who, "target holds class ", bad, " but the input has ", C, " classes (valid 0..", C - 1, ", or ",
              ignore_index, " = ignore_index to skip an example).",
              (hi == C && lo >= 1 ? " The labels look 1-indexed: subtract 1."
                                  : " Check the label encoding, or the "
                                    "number of outputs of the last layer."));
    }
    return;
  }
  if (target.dim() == input.dim() && target.size(1) == 1) {
    Shape t = target.shape();
    t.erase(t.begin() + 1);
    if (t == expected)
      GS_FAIL(who, "target has shape ", shape_str(target.shape()), " but must be ", shape_str(expected),
              " (one class index per example). Squeeze the extra dim: target.squeeze(1) (or target.view(-1)).");
  }
  if (target.dim() >= 1 && target.size(0) != input.size(0))
    GS_FAIL(who, "input ", shape_str(input.shape()), " has ", input.size(0), " examples but target ",
            shape_str(target.shape()), " has ", target.size(0), ". Input and target must come from the same batch.");
  GS_FAIL(who, "for input ", shape_str(input.shape()), " (B, C, ...) the target must be int64 of shape ",
          shape_str(expected), " (the input without its class dim 1), got ", shape_str(target.shape()), ".");
}

void check_class_weight(const Tensor& w, const Tensor& input, const char* who) {
  if (!w.defined()) return;
  GS_CHECK(w.is_floating_point() && w.dim() == 1 && w.size(0) == input.size(1), who,
           "class weight must be a floating 1-D tensor with one value per class (", input.size(1), "), got ", w.str());
}

// log_probs (B, C, d1..), target (B, d1..) already checked. Returns the reduced
// (1 - eps) * nll + eps / C * smooth loss.
Tensor nll_core(const Tensor& log_probs, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                Reduction reduction, double smoothing) {
  check_reduction(reduction, "nll_loss / cross_entropy");
  const int64_t C = log_probs.size(1);
  Tensor valid = target != static_cast<double>(ignore_index);  // (B, d1..) bool
  Tensor safe =
      where(valid, target,
            full({}, 0.0, TensorOptions(kInt64).device(target.device())));  // ignored -> class 0 (masked below)
  Tensor picked = log_probs.gather(1, safe.unsqueeze(1)).squeeze(1);        // (B, d1..) log p[target]
  const Tensor zero = zeros({}, TensorOptions(log_probs.dtype()).device(log_probs.device()));
  // Per-target weight w_t: the class weight, or 1; 0 where ignored.
  Tensor w_t = weight.defined()
                   ? weight.to(log_probs.dtype()).index_select(0, safe.reshape({-1})).reshape(target.shape())
                   : ones(target.shape(), TensorOptions(log_probs.dtype()).device(log_probs.device()));
  w_t = where(valid, w_t.detach(), zero);
  // where, not a multiply: an ignored position must not leak inf/NaN (0 * inf = NaN).
  Tensor nll = where(valid, -picked * w_t, zero);
  Tensor denom = w_t.sum();  // Mean divides by the total weight of the counted targets (0 -> NaN)

  auto reduce = [&](const Tensor& l) {
    switch (reduction) {
      case Reduction::None: return l;
      case Reduction::Sum: return l.sum();
      case Reduction::Mean: break;
    }
    return l.sum() / denom;
  };
  Tensor loss = reduce(nll);
  if (smoothing > 0.0) {
    Shape wshape(static_cast<size_t>(log_probs.dim()), 1);
    wshape[1] = C;
    Tensor lp = weight.defined() ? log_probs * weight.to(log_probs.dtype()).view(wshape) : log_probs;
    Tensor smooth = where(valid, -lp.sum({1}), zero);  // (B, d1..): -sum_c w_c log p_c
    loss = loss * (1.0 - smoothing) + reduce(smooth) * (smoothing / static_cast<double>(C));
  }
  return loss;
}

// (C) input with a 0-dim target: one unbatched example.
bool unbatched(const Tensor& input, const Tensor& target) { return input.dim() == 1 && target.dim() == 0; }

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossOptions& o) {
  if (autocast_enabled()) [[unlikely]] {
    gradsleuth::detail::AutocastScope ac("mse_loss");
    return mse_loss(ac.cast(input), ac.cast(target), o);
  }
  const char* who = "MSELoss";
  check_pair(input, target, who);
  GS_CHECK(target.is_floating_point(), who, "expects a floating-point target, got ", target.str(),
           ". Convert it with target.to(", dtype_name(input.dtype()), ") (for class labels use nn::CrossEntropyLoss).");
  if (input.shape() != target.shape() && !o.allow_broadcast_) {
    std::string to;
    try {
      to = " They would broadcast to " + shape_str(broadcast_shapes(input.shape(), target.shape(), "MSELoss")) +
           ", comparing every prediction with every target, and the loss would be silently wrong.";
    } catch (const Error&) {
      to = " They do not even broadcast.";
    }
    std::string fix;
    if (input.dim() == target.dim() + 1 && input.size(-1) == 1)
      fix = " Make them match: target.unsqueeze(" + std::to_string(input.dim() - 1) + ") or input.squeeze(" +
            std::to_string(input.dim() - 1) + ").";
    else if (target.dim() == input.dim() + 1 && target.size(-1) == 1)
      fix = " Make them match: target.squeeze(" + std::to_string(target.dim() - 1) + ") or input.unsqueeze(" +
            std::to_string(target.dim() - 1) + ").";
    else
      fix = " Reshape one of them so that both have the same shape.";
    GS_FAIL(who, "input (prediction) ", shape_str(input.shape()), " and target ", shape_str(target.shape()),
            " have different shapes.", to, fix,
            " (nn::MSELossOptions().allow_broadcast(true) restores PyTorch's broadcasting, which only warns.)");
  }
  Tensor d = input - target;
  return reduce_loss(d * d, o.reduction_);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NLLLossOptions& o) {
  if (autocast_enabled()) [[unlikely]] {
    gradsleuth::detail::AutocastScope ac("nll_loss");
    NLLLossOptions o32 = o;
    o32.weight_ = ac.cast(o.weight_);
    return nll_loss(ac.cast(log_probs), target, o32);
  }
  const char* who = "NLLLoss";
  check_pair(log_probs, target, who);
  if (unbatched(log_probs, target)) return nll_loss(log_probs.unsqueeze(0), target.unsqueeze(0), o).reshape({});
  check_class_target(log_probs, target, who, o.ignore_index_);
  check_class_weight(o.weight_, log_probs, who);
  return nll_core(log_probs, target, o.weight_, o.ignore_index_, o.reduction_, 0.0);
}

namespace {

// Class-probability targets (soft labels, mixup): target has the input's shape and
// holds a distribution over dim 1 per position. As in PyTorch:
//   loss_b = -sum_c w_c t_bc log_softmax(x)_bc,   t <- (1 - eps) t + eps / C with smoothing,
// and Mean divides by the number of positions (B * d1 * ...), not by the weights.
// Unlike PyTorch, targets that are not distributions (negative, or rows not summing
// to 1: all-zero rows, unnormalised scores) are an error rather than a silently
// meaningless loss.
Tensor cross_entropy_probs(const Tensor& input, const Tensor& target, const CrossEntropyLossOptions& o,
                           const char* who) {
  GS_CHECK(input.dim() >= 1, who, "expects input (B, C) of scores per class, got ", input.str());
  const int64_t cdim = input.dim() == 1 ? 0 : 1;
  const int64_t C = input.size(cdim);
  GS_CHECK(o.ignore_index_ == -100, who, "ignore_index (", o.ignore_index_,
           ") applies only to class-index "
           "targets; with class-probability targets ",
           target.str(),
           " give an ignored position a zero row instead "
           "(and reduction Sum, or divide by the number of kept positions yourself).");
  check_class_weight(o.weight_, input.dim() == 1 ? input.unsqueeze(0) : input, who);
  Tensor t = target.to(input.dtype());
  if (t.numel() > 0) {
    NoGradGuard ng;
    const double lo = amin(t).item<double>();
    Tensor row_sums = t.sum({cdim});
    const double worst = amax(abs(row_sums - 1.0)).item<double>();
    // Rows of 0s and 1s with several 1s: multi-hot labels (several per example), whose fix is another loss.
    const bool multi_hot = lo >= 0.0 && worst > 1e-3 && amax(row_sums).item<double>() >= 2.0 &&
                           amax(abs(t * (1.0 - t))).item<double>() == 0.0;
    GS_CHECK(!multi_hot, who, "target ", target.str(), " holds rows of 0s and 1s with several 1s (up to ",
             amax(row_sums).item<double>(),
             "): several labels per example, a multi-label task. Softmax cross-entropy makes the labels compete "
             "(two labels of one example can each reach only 0.5), so normalising the rows does not fix it: use "
             "BCEWithLogitsLoss on the logits and the 0/1 rows (one sigmoid per label), and predict each label "
             "where its sigmoid passes 0.5. For one label per example pass int64 class indices.");
    GS_CHECK(lo >= 0.0 && worst <= 1e-3, who, "target ", target.str(),
             " has the input's shape, so it is read as "
             "class probabilities (soft labels) over dim ",
             cdim, ", but ",
             (lo < 0.0 ? "it holds a negative value (" + std::to_string(lo) + ")"
                       : "its rows sum to values up to " + std::to_string(worst) + " away from 1"),
             ". Normalise each row (e.g. softmax of scores, or target / target.sum(", cdim,
             ", true)); for one label "
             "per example pass int64 class indices of shape ",
             shape_str([&] {
               Shape sh = input.shape();
               sh.erase(sh.begin() + cdim);
               return sh;
             }()),
             " (target.argmax(", cdim, ") of one-hot rows).");
  }
  if (o.label_smoothing_ > 0.0) t = t * (1.0 - o.label_smoothing_) + o.label_smoothing_ / static_cast<double>(C);
  Tensor prod = log_softmax(input, cdim) * t;
  if (o.weight_.defined()) {
    Shape wshape(static_cast<size_t>(input.dim()), 1);
    wshape[cdim] = C;
    prod = prod * o.weight_.to(input.dtype()).view(wshape);
  }
  return reduce_loss(-prod.sum({cdim}), o.reduction_);
}

}  // namespace

Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyLossOptions& o) {
  if (autocast_enabled()) [[unlikely]] {
    gradsleuth::detail::AutocastScope ac("cross_entropy");
    CrossEntropyLossOptions o32 = o;
    o32.weight_ = ac.cast(o.weight_);
    return cross_entropy(ac.cast(input), ac.cast(target), o32);
  }
  const char* who = "CrossEntropyLoss";
  check_pair(input, target, who);
  GS_CHECK(o.label_smoothing_ >= 0.0 && o.label_smoothing_ <= 1.0, who, "label_smoothing must be in [0, 1], got ",
           o.label_smoothing_);
  if (target.is_floating_point() && target.shape() == input.shape()) return cross_entropy_probs(input, target, o, who);
  if (unbatched(input, target)) return cross_entropy(input.unsqueeze(0), target.unsqueeze(0), o).reshape({});
  check_class_target(input, target, who, o.ignore_index_);
  check_class_weight(o.weight_, input, who);
  Tensor log_probs = log_softmax(input, 1);  // (B, C, d1..), stable: x - logsumexp(x)
  return nll_core(log_probs, target, o.weight_, o.ignore_index_, o.reduction_, o.label_smoothing_);
}

// Binary losses: a floating target of exactly the input's shape. `what` names the
// input in the hint ("prediction's", "logits'").
static void check_binary_pair(const Tensor& input, const Tensor& target, const char* who, const char* what) {
  check_pair(input, target, who);
  GS_CHECK(target.is_floating_point(), who, "expects a floating-point target (0./1. or soft labels), got ",
           target.str(), ". Convert it with target.to(", dtype_name(input.dtype()), ").");
  GS_CHECK(input.shape() == target.shape(), who, "input ", shape_str(input.shape()), " and target ",
           shape_str(target.shape()), " must have the same shape",
           (input.dim() == target.dim() + 1 && input.size(-1) == 1
                ? std::string(". Squeeze the ") + what + " last dim (input.squeeze(-1)) or unsqueeze the target."
                : std::string(".")));
}

// The value is built from ops, but the backward is written out:
//   dL/dp = (p - y) / max(p (1 - p), 1e-12)        dL/dy = log(1 - p) - log(p)   (clamped logs)
// Differentiating the clamped logs would give 0 * inf = NaN at p = 0 or 1.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const BCELossOptions& o) {
  if (autocast_enabled()) [[unlikely]] {
    gradsleuth::detail::AutocastScope ac("binary_cross_entropy");  // refused: throws, with the fix
  }
  const char* who = "BCELoss";
  check_binary_pair(input, target, who, "prediction's");
  Tensor value;  // per element, no graph yet
  {
    NoGradGuard ng;
    if (input.numel() > 0) {
      const double lo = amin(input).item<double>(), hi = amax(input).item<double>();
      GS_CHECK(lo >= 0.0 && hi <= 1.0, who, "expects probabilities in [0, 1] but the input ", input.str(), " spans [",
               lo, ", ", hi,
               "]: these look like raw logits. Use nn::BCEWithLogitsLoss on them (numerically "
               "stable), or apply a sigmoid first.");
    }
    Tensor logp = clamp(log(input), -100.0, std::nullopt);
    Tensor log1mp = clamp(log(1.0 - input), -100.0, std::nullopt);
    value = -(target * logp + (1.0 - target) * log1mp);
    if (o.weight_.defined()) value = value * o.weight_;
  }
  if (needs_grad(input, target)) {
    record("binary_cross_entropy", value, {&input, &target},
           [sp = SavedTensor(input, "binary_cross_entropy"), sy = SavedTensor(target, "binary_cross_entropy"),
            w = o.weight_, want_y = target.requires_grad()](const Tensor& g, Node& n) {
             Tensor p = sp.unpack(n), y = sy.unpack(n);
             Tensor gw = w.defined() ? g * w : g;
             Tensor gp = gw * (p - y) / clamp(p * (1.0 - p), 1e-12, std::nullopt);
             Tensor gy;
             if (want_y) gy = gw * (clamp(log(1.0 - p), -100.0, std::nullopt) - clamp(log(p), -100.0, std::nullopt));
             return tensor_list{sum_to(gp, p.shape()), gy.defined() ? sum_to(gy, y.shape()) : Tensor()};
           });
  }
  return reduce_loss(value, o.reduction_);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const BCEWithLogitsLossOptions& o) {
  if (autocast_enabled()) [[unlikely]] {
    gradsleuth::detail::AutocastScope ac("binary_cross_entropy_with_logits");
    BCEWithLogitsLossOptions o32 = o;
    o32.weight_ = ac.cast(o.weight_);
    o32.pos_weight_ = ac.cast(o.pos_weight_);
    return binary_cross_entropy_with_logits(ac.cast(input), ac.cast(target), o32);
  }
  const char* who = "BCEWithLogitsLoss";
  check_binary_pair(input, target, who, "logits'");
  if (o.pos_weight_.defined())
    GS_CHECK(o.pos_weight_.is_floating_point() && input.dim() >= 1 &&
                 (o.pos_weight_.numel() == 1 || (o.pos_weight_.dim() == 1 && o.pos_weight_.size(0) == input.size(-1))),
             who, "pos_weight must hold one value per class (the input's last dim, ", input.dim() ? input.size(-1) : 0,
             "), got ", o.pos_weight_.str());
  // softplus(-x) = log(1 + exp(-x)) = -log(sigmoid(x)), computed without overflow.
  Tensor neg_log_sig = softplus(-input);
  Tensor loss;
  if (o.pos_weight_.defined()) {
    Tensor lw = (o.pos_weight_ - 1.0) * target + 1.0;  // 1 + (pos_weight - 1) y
    loss = (1.0 - target) * input + lw * neg_log_sig;
  } else {
    loss = (1.0 - target) * input + neg_log_sig;
  }
  if (o.weight_.defined()) loss = loss * o.weight_;
  return reduce_loss(loss, o.reduction_);
}

}  // namespace functional

// ---- modules --------------------------------------------------------------------------
Tensor Loss::operator()(const Tensor& input, const Tensor& target) {
  if (!loss_pre_hooks_.empty()) {
    auto hooks = loss_pre_hooks_;
    for (auto& [id, h] : hooks) h(*this, input, target);
  }
  Tensor loss = call_with_hooks(input, [&] { return forward(input, target); });
  if (!loss_hooks_.empty()) {
    auto hooks = loss_hooks_;  // a hook may remove itself
    for (auto& [id, h] : hooks) h(*this, input, target, loss);
  }
  return loss;
}

size_t Loss::register_loss_hook(LossHook h) {
  loss_hooks_.emplace_back(next_loss_hook_, std::move(h));
  return next_loss_hook_++;
}

size_t Loss::register_loss_pre_hook(LossPreHook h) {
  loss_pre_hooks_.emplace_back(next_loss_hook_, std::move(h));
  return next_loss_hook_++;
}

void Loss::remove_loss_hook(size_t handle) {
  std::erase_if(loss_hooks_, [&](const auto& p) { return p.first == handle; });
  std::erase_if(loss_pre_hooks_, [&](const auto& p) { return p.first == handle; });
}

namespace F = functional;

// BUG B03 (every loss): Sum where Mean was meant. The gradient then grows with the
// batch size, so the effective learning rate does too. Correct: the reduction asked for.
template <class O>
static O with_bugs(const Loss& loss, O o) {
  if (loss.has_bug(Bug::B03) && o.reduction_ == Reduction::Mean) o.reduction_ = Reduction::Sum;
  return o;
}

std::vector<Bug> Loss::injectable_bugs() const { return {Bug::B03}; }

Tensor MSELoss::forward(const Tensor& input, const Tensor& target) {
  MSELossOptions o = with_bugs(*this, options_);
  // BUG B01: broadcasting allowed "because it runs": prediction (B, 1) against a
  // target (B) becomes (B, B), every prediction compared with every target.
  // Correct: equal shapes (target.unsqueeze(1)); the default raises on a mismatch.
  if (has_bug(Bug::B01)) o.allow_broadcast_ = true;
  return F::mse_loss(input, target, o);
}
std::vector<Bug> MSELoss::injectable_bugs() const { return {Bug::B01, Bug::B03}; }
std::string MSELoss::extra_repr() const {
  return std::string("reduction=") + reduction_name(options_.reduction_) +
         (options_.allow_broadcast_ ? ", allow_broadcast=true" : "");
}

Tensor NLLLoss::forward(const Tensor& input, const Tensor& target) {
  return F::nll_loss(input, target, with_bugs(*this, options_));
}
std::string NLLLoss::extra_repr() const {
  return detail::str_cat("ignore_index=", options_.ignore_index_, ", reduction=", reduction_name(options_.reduction_),
                         options_.weight_.defined() ? ", weight=" + shape_str(options_.weight_.shape()) : "");
}

Tensor CrossEntropyLoss::forward(const Tensor& input, const Tensor& target) {
  return F::cross_entropy(input, target, with_bugs(*this, options_));
}
std::string CrossEntropyLoss::extra_repr() const {
  return detail::str_cat("ignore_index=", options_.ignore_index_, ", reduction=", reduction_name(options_.reduction_),
                         ", label_smoothing=", options_.label_smoothing_,
                         options_.weight_.defined() ? ", weight=" + shape_str(options_.weight_.shape()) : "");
}

Tensor BCELoss::forward(const Tensor& input, const Tensor& target) {
  // BUG B09: raw logits fed to BCE, and the "input must be in [0, 1]" error
  // silenced by clamping: logits above 1 or below 0 get no gradient at all.
  // Correct: nn::BCEWithLogitsLoss on the logits (or a sigmoid before BCELoss).
  if (has_bug(Bug::B09))
    return F::binary_cross_entropy(clamp(input, 1e-7, 1.0 - 1e-7), target, with_bugs(*this, options_));
  return F::binary_cross_entropy(input, target, with_bugs(*this, options_));
}
std::vector<Bug> BCELoss::injectable_bugs() const { return {Bug::B03, Bug::B09}; }
std::string BCELoss::extra_repr() const { return std::string("reduction=") + reduction_name(options_.reduction_); }

Tensor BCEWithLogitsLoss::forward(const Tensor& input, const Tensor& target) {
  return F::binary_cross_entropy_with_logits(input, target, with_bugs(*this, options_));
}
std::string BCEWithLogitsLoss::extra_repr() const {
  return std::string("reduction=") + reduction_name(options_.reduction_) +
         (options_.pos_weight_.defined() ? ", pos_weight=" + shape_str(options_.pos_weight_.shape()) : "");
}

}  // namespace gradsleuth::nn
