// W2, the pre-training gate (see gate.h).
#include "debug/run/gate.h"

#include "debug/checks/model/anomaly.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/data/data_checks.h"
#include "debug/checks/model/behaviour.h"
#include "debug/checks/run_check.h"
#include "debug/evidence/tensor_stats.h"
#include "nn/normalization.h"

namespace gradsleuth::debug {

// ---- W2 ---------------------------------------------------------------------------------
namespace {

// Runs one phase of the gate. An exception the user's model or loss raises there (a loss that
// rejects its target, a layer that throws) becomes an error finding naming the phase and the
// checks that could not run, so the gate reports it with everything else instead of throwing
// it past the findings it already made. The engine's in-place error becomes M20, with the
// phase in its cause. Returns false when the phase failed.
bool gate_phase(Report& r, const std::string& phase, const std::string& lost, const std::function<void()>& run) {
  try {
    run();
    return true;
  } catch (const std::exception& e) {
    r.add(phase_failure(e, "the pre-training gate", phase, lost));
    return false;
  }
}

}  // namespace

void revise_gate_objective(Report& gate, const TrainingHistory& h) {
  if (h.loss_calls == 0 || 2 * h.loss_calls_on_output >= h.loss_calls) return;
  static const std::set<std::string> on_the_loss = {"L4", "L6", "M3", "M5", "M14", "M15", "M16", "O1"};
  for (size_t i = 0; i < gate.size(); ++i) {
    const Finding& g = gate.findings()[i];
    if (!g.fires() || g.severity == Severity::Error || !on_the_loss.count(g.check)) continue;
    Finding f = g;
    f.severity = Severity::Info;
    f.title += " (judged on loss(model(x), y), which the loop does not train)";
    f.evidence.push_back({"training calls of the loss that took the model's output",
                          static_cast<double>(h.loss_calls_on_output),
                          "under half of them: the checks before training judged another objective"});
    f.evidence.push_back({"training calls of the loss", static_cast<double>(h.loss_calls), ""});
    f.cause =
        "the loop's loss takes something other than the model's output (its input had another size than the "
        "output in most training steps): the probe before training measured an objective the loop does not "
        "optimise. " +
        f.cause;
    f.fix =
        "give the Session a loss function (output, target) -> loss that computes the loop's objective from the "
        "model's output, for these checks to judge it";
    gate.replace(i, f);
  }
}

void revise_gate_premise(Report& r, const Report& gate, const TrainingHistory& h, const Tensor& labels) {
  static const std::string prefix = "the pre-training gate could not run the loss: ";
  std::string message;
  for (const Finding& g : gate.findings())
    if (g.check == "W2" && g.severity == Severity::Error && g.title.rfind(prefix, 0) == 0)
      message = g.title.substr(prefix.size());
  if (message.empty() || !labels.defined() || !h.loss_target_dtype || h.loss_calls < 3) return;
  const Shape& t = h.loss_target_shape;
  const bool other_shape =
      t.size() != labels.shape().size() || !std::equal(t.begin() + std::min<size_t>(1, t.size()), t.end(),
                                                       labels.shape().begin() + std::min<size_t>(1, t.size()));
  if (*h.loss_target_dtype == labels.dtype() && !other_shape) return;  // the loop gives it targets like the labels
  const std::string loop_target = std::string(dtype_name(*h.loss_target_dtype)) + shape_str(t);
  const std::string given = std::string(dtype_name(labels.dtype())) + shape_str(labels.shape());
  // The message up to its first number or shape: the same error on another batch (the validation
  // pass's rows) names other sizes.
  const std::string stem = message.substr(0, message.find_first_of("0123456789["));
  if (stem.size() < 10) return;
  for (size_t i = 0; i < r.size(); ++i) {
    const Finding& g = r.findings()[i];
    if (g.check != "W2" || g.severity != Severity::Error || g.title.find(": " + stem) == std::string::npos) continue;
    Finding f = g;
    f.severity = Severity::Info;
    f.title += " (the checks gave the loss the loader's labels, " + given + "; the training loop gives it " +
               loop_target + " targets and trains without an error)";
    f.evidence.push_back({"training calls of the loss", static_cast<double>(h.loss_calls),
                          "its targets are not the labels: the checks' loss(model(x), y) is not the loop's objective"});
    f.cause =
        "the loop's loss takes something other than the loader's labels as its target (a second view's "
        "projection, a teacher's output): the checks that call loss(model(x), y) cannot run it";
    f.fix =
        "nothing in the loop; for these checks to judge the objective, give the Session a loss function "
        "(output, y) -> loss that computes it from the model's output and the batch's labels";
    r.replace(i, f);
  }
}

Finding phase_failure(const std::exception& e, const std::string& who, const std::string& phase,
                      const std::string& lost) {
  const std::string not_run = lost.empty() ? "" : " (" + lost + " could not run)";
  if (std::optional<Finding> f = inplace_finding(e)) {  // M20
    f->cause += std::string(!f->cause.empty() && f->cause.back() == '.' ? "" : ".") + " Raised in " + who + "'s " +
                phase + not_run + ".";
    return *f;
  }
  Finding f;
  f.check = "W2";
  f.severity = Severity::Error;
  f.title = who + " could not run " + (phase.rfind("the ", 0) == 0 ? "" : "the ") + phase + ": " + e.what();
  f.evidence = {};
  f.cause = "the model or the loss raised this error on the batch it was given" +
            (lost.empty() ? std::string() : "; " + lost + " could not run");
  f.fix = "fix the error in the model or the loss (the message above says where), then run the checks again";
  return f;
}

Report pretrain_gate(nn::Module& model, const Tensor& x, const Tensor& y, const LossFunction& loss,
                     const optim::Optimizer* optimizer, const GateOptions& o,
                     std::vector<std::string>* zero_by_construction, std::vector<std::string>* zero_until_first_step) {
  Report r;
  gate_phase(r, "device, parameter and input checks", "M11, M10, D1, D2", [&] {
    r.add(check_devices_dtypes(model, x, true));  // M11
    r.add(check_trainable(model, optimizer));  // M10
    r.add(check_batch(x, y));                  // D1
    r.add(check_finite_inputs(x, y));          // D2
    r.note_ran("M11, M10, D1, D2");
  });
  try {
    r.add(shape_trace(model, x).finding());  // M1
    r.note_ran("M1");
  } catch (const std::exception& e) {
    if (std::optional<Finding> f = inplace_finding(e)) r.add(*f);
    Finding f;
    f.check = "W2";
    f.severity = Severity::Error;
    f.title = std::string("the forward pass fails: ") + e.what();
    f.cause = "every later check of the gate needs a forward pass: none of them ran";
    f.fix = "fix the error above before anything else";
    r.add(std::move(f));
    return r;
  }
  gate_phase(r, "weight checks", "M4, M9", [&] {
    r.add(check_shared_weights(model));           // M4
    r.add(check_initialisation(model, o.model));  // M9
    r.note_ran("M4, M9");
  });
  gate_phase(r, "structure checks", "M23, M24, M27", [&] {
    r.add(check_missing_nonlinearity(model, x));          // M23
    r.add(check_embeddings_one_table(model, x));          // M23
    r.add(check_dropout_rate(model, o.model));            // M24
    r.add(check_activation_variance(model, x, o.model));  // M27
    r.note_ran("M23, M24, M27");
  });
  if (optimizer) {
    r.add(check_learning_rate_range(*optimizer, o.optim));  // O8
    r.note_ran("O8");
  }

  // M2 by behaviour: which layers are random or different in train mode (a
  // hand-written dropout as well as nn::Dropout), and whether a random layer's
  // mean training output matches its evaluation output.
  ModeProbe probe;  // empty when the probe itself failed: then nothing is switched off
  gate_phase(r, "train/eval probe", "M2", [&] {
    probe = probe_mode_dependence(model, x);
    r.add(probe.findings());
    r.add(check_repeat_calls(model, x, o.shuffled));  // M2: a draw at evaluation, a state kept between calls
    r.note_ran("M2");
  });

  // Forward and backward once, on a copy of the gradients' state, with the
  // randomness off: L4 judges the loss of the model itself, not of one dropout draw.
  std::vector<std::pair<Tensor, Tensor>> grads;
  for (Tensor& p : model.parameters()) {
    grads.emplace_back(p, p.grad());
    p.zero_grad();
  }
  ParamSnapshot snap(model);  // BatchNorm statistics move in a training forward
  // Randomness off (found by behaviour, not by type), restored with the modes below.
  std::optional<ModeSnapshot> modes;
  modes.emplace(model);
  set_mode_without_randomness(model, model.is_training(), probe);
  Tensor out, l;
  ZeroInitProbe zero_init;  // parameters initialised to zero that learn from their first step
  // The loss (L6, M14) and the backward (L6, M14 again) are not run a second time once they failed.
  bool loss_ok = gate_phase(r, "forward", "M12, M3, L4, O1, M5", [&] { out = model(x); });
  if (loss_ok && !all_finite(out)) {
    gate_phase(r, "search for the non-finite output", "M12", [&] {
      r.add(find_nonfinite_source(model, x));  // M12
      r.note_ran("M12");
    });
  } else if (loss_ok) {
    gate_phase(r, "final-activation check", "M3", [&] {
      r.add(check_final_activation(model, out, o.model, o.loss_type, y, x));  // M3
      r.note_ran("M3");
    });
    loss_ok = gate_phase(r, "loss", "L4, O1, M5, L6, M14", [&] { l = loss(out, y); });
    if (loss_ok) {
      const double lv = l.numel() == 1 ? l.item<double>() : std::nan("");
      const int64_t C = o.num_classes > 0 ? o.num_classes : (out.dim() == 2 ? out.size(1) : -1);
      // L4: the mean output against the targets, and its probe of a skewed start
      std::vector<Finding> start = check_initial_outputs(out, y, o.loss, o.loss_type);
      confirm_final_bias(model, x, y, out, start, o.loss, o.loss_type);
      // L4's expectation: log C for cross-entropy and NLL; for an nn::Loss of the user's own on class
      // indices (MSE on one-hot rows, a hinge) and for a loss function whose value there is another
      // number (a focal loss), its own value for an output of zeros (no preference among the
      // classes): log C is cross-entropy's number, not every loss's. A loss function with no value
      // there (one that takes log-probabilities or probabilities) is held to log C.
      LossCheckOptions lo = o.loss;
      std::string why;
      bool judge = C > 1 && y.dtype() == kInt64;
      const bool function = o.loss_type.empty();
      // A loss function, or an nn::Loss the library does not know on outputs over 4x as wide as the labels
      // reach, over an embedding (contrastive, triplet, a prototypical network's distances) reads its int64
      // labels as groups, not the output's columns as class scores: an output of zeros is no "no
      // preference" there.
      const bool ce_family = o.loss_type == "CrossEntropyLoss" || o.loss_type == "NLLLoss";
      const bool library = loss_type::library(o.loss_type);
      const bool wide = out.dim() == 2 && y.dim() == 1 && y.numel() > 0 && loss_type::wider_than_labels(out, y);
      if (judge && (function || (!library && wide)) && out.dim() == 2 && y.dim() == 1 && out.size(0) == y.size(0) &&
          !loss_scores_classes(out, y, loss))
        judge = false;
      if (judge && (!ce_family || o.loss_summed) && !std::isfinite(lo.expected_initial_loss)) {
        NoGradGuard ng;
        // Log-probabilities of 1 / C for NLL, logits of 0 for the others.
        const double log_c = std::log(static_cast<double>(C));
        const Tensor none = o.loss_type == "NLLLoss" ? full_like(out.detach(), -log_c) : zeros_like(out.detach());
        double e = std::nan("");
        try {
          const Tensor n = loss(none, y);
          e = n.numel() == 1 ? n.item<double>() : std::nan("");
        } catch (const std::exception&) {
          if (!function) throw;
        }
        const bool usable = std::isfinite(e) && e > 0;
        if (!function || (usable && std::fabs(e - log_c) > 1e-3 * log_c)) {
          judge = usable;
          lo.expected_initial_loss = e;
          why = "the loss's value for an output of zeros (no preference among the classes)";
        }
      }
      if (judge) {
        std::vector<Finding> initial = check_initial_loss(lv, C, "cross_entropy", lo, why);  // L4
        confirm_initial_loss(initial, std::any_of(start.begin(), start.end(), [](const Finding& f) { return f.fires(); }),
                             o.loss);
        soften_trained_start(initial, out, y, o.loss_type == "BCELoss", o.loss);  // a resumed or fine-tuned model
        r.add(initial);
        r.note_ran("L4");
      }
      r.add(start);
      r.note_ran("L4");
      gate_phase(r, "padding check", "L5", [&] {
        r.add(check_padding_in_loss(x, out, y, loss, o.loss));  // L5: padded positions the loss reads
        r.add(check_targets_masked_by_loss(x, out, y, loss));   // L5: targets outside the classes it masks
        r.add(check_padding_read(model, x, o.loss));            // L5: padding the model reads
        r.note_ran("L5");
      });
      if (l.requires_grad() && l.numel() == 1)
        loss_ok = gate_phase(r, "backward", "O1, M5, L6, M14", [&] {
          // The gradient that reaches the model's output: M5 asks which columns the loss does not read.
          auto output_grad = std::make_shared<Tensor>();
          if (out.requires_grad() && !out.is_leaf())
            Tensor(out).register_hook([output_grad](const Tensor& g) {
              *output_grad = g.detach().clone();
              return Tensor();
            });
          l.backward();
          // A bias whose gradient is zero by construction (BatchNorm after it) is said once, as
          // info, and is not a vanishing gradient (O1) nor a cut graph (M5).
          OptimCheckOptions oo = o.optim;
          for (Finding& f : find_redundant_biases(model, x, y, loss, oo.vanishing_grad_norm)) {
            oo.zero_grad_by_construction.push_back(f.parameter);
            if (zero_by_construction) zero_by_construction->push_back(f.parameter);
            r.add(std::move(f));
          }
          std::vector<Finding> found = check_gradient_health(model, oo);  // O1 (non-finite, vanishing, exploding)
          for (Finding& f : check_loss_penalty(model, out, y, loss, oo)) found.push_back(std::move(f));  // O3
          for (Finding& f : check_gradient_flow(model, oo.zero_grad_by_construction))
            found.push_back(std::move(f));  // M5
          // Zero gradients behind a layer initialised to zero on purpose last until its first step.
          if (std::any_of(found.begin(), found.end(), [](const Finding& f) { return f.fires(); }))
            zero_init = probe_zero_initialised(model, x, y, loss, oo.vanishing_grad_norm);
          if (zero_until_first_step)
            for (const std::string& p : zero_init.held_back) zero_until_first_step->push_back(p);
          soften_zero_init_findings(found, zero_init);
          // A parameter the training forward skips may be one the model uses in eval mode only.
          std::vector<std::string> unreached;
          for (const Finding& f : found)
            if (f.fires() && f.check == "M5" && !f.parameter.empty()) unreached.push_back(f.parameter);
          for (Finding& f : find_eval_only_parameters(model, x, y, loss, optimizer, unreached))
            found.push_back(std::move(f));
          explain_replaced_parameters(model, l, optimizer, found);
          explain_unread_outputs(model, x, *output_grad, found);
          for (Finding& f : find_unread_units(model, x)) found.push_back(std::move(f));
          for (Finding& f : find_unread_input_columns(model, x)) found.push_back(std::move(f));
          soften_eval_only_findings(found);
          r.add(found);
          soften_eval_only_findings(r, r);  // M10's, found before the backward
          r.add(zero_init.redundant);
          if (!zero_init.held_back.empty()) r.add(zero_init.finding());
          r.note_ran("O1, M5, M20, W2");  // the forward, the loss and the backward ran without an error
        });
    }
  }
  out = Tensor();
  l = Tensor();
  modes.reset();
  snap.restore();
  for (auto& [p, g] : grads) p.set_grad(g);

  // M9's verdict on a weight initialised to zero on purpose.
  for (size_t i = 0; i < r.findings().size(); ++i)
    if (r.findings()[i].check == "M9" && zero_init.is_zero(r.findings()[i].parameter)) {
      std::vector<Finding> one{r.findings()[i]};
      soften_zero_init_findings(one, zero_init);
      r.replace(i, one.front());
    }
  if (o.batch_mixing && x.dim() >= 1 && x.size(0) >= 2)
    gate_phase(r, "batch-mixing test", "M6", [&] {
      // With a layer initialised to zero the output ignores the input until the first step: the
      // test runs on the model one small step later.
      struct Stepped {
        const ZeroInitProbe& z;
        explicit Stepped(const ZeroInitProbe& p) : z(p) { z.step(true); }
        ~Stepped() { z.step(false); }
      } stepped(zero_init);
      r.add(batch_mixing_test(model, x, o.model));  // M6
      r.add(future_leak_test(model, x, y, o.model));  // M6 across time, where y is x one step on
      r.note_ran("M6");
    });
  // A model over a fixed set of items (a graph convolution over its nodes) runs the whole batch only:
  // the checks that run part of the batch cannot run it.
  std::string whole_why;
  const bool whole_set =
      loss_ok && (o.gradcheck || o.reduction || o.overfit) && takes_whole_batch_only(model, x, &whole_why);
  if (whole_set) {
    Finding f;
    f.check = "W2";
    f.severity = Severity::Info;
    f.title = "the model takes only the whole batch of " + std::to_string(x.size(0)) +
              " rows (on the first half its forward raised: " + whole_why +
              "): the checks that run part of the batch (M13's gradient check, L6's reduction check, M14's overfit "
              "test) were left out";
    f.cause = "a model over one fixed set of items (a graph convolution over its nodes) takes the set whole";
    f.fix = "none needed";
    r.add(std::move(f));
  }
  if (o.gradcheck && !whole_set)
    gate_phase(r, "gradient check", "M13", [&] {
      std::vector<Finding> layers = gradcheck_layers(model, x);  // M13: layers with parameters, custom ops
      // The whole model's input gradient along random directions: a backstop for
      // a wrong backward that no single layer check could see. The per-layer
      // finding, which names the layer, is the more useful one when both fail.
      if (layers.empty())
        for (Finding& f : check_input_gradient(model, x))
          if (f.check != "M2") layers.push_back(std::move(f));  // M2's repeated calls ran with the probe above
      r.add(layers);
      r.note_ran("M13");
    });
  if (o.reduction && loss_ok && !whole_set)
    gate_phase(r, "reduction check", "L6", [&] {
      r.add(check_loss_reduction(model, loss, x, y, o.loss));  // L6
      r.note_ran("L6");
    });
  if (o.overfit && loss_ok && !whole_set) {
    gate_phase(r, "overfit-one-batch test", "M14", [&] {
      const int64_t n = std::min<int64_t>(x.size(0), 32);
      r.add(overfit_one_batch(model, x.narrow(0, 0, n), y.narrow(0, 0, n), loss, o.model));  // M14
      r.note_ran("M14");
    });
  }
  return r;
}

}  // namespace gradsleuth::debug
