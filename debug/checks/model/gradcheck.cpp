// Numeric gradient check: autograd's gradient against central differences,
// element by element (or along random directions in fast mode), in float64.
//
// Notation: f(x) = sum(v * fn(x)) for a fixed random v of fn's output shape.
//   analytic:  g = d f / d x          from gs::autograd::grad(out, x, grad_outputs = v)
//   numeric:   (f(x + eps e_k) - f(x - eps e_k)) / (2 eps)   for each element k
#include "debug/checks/model/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <set>
#include <sstream>

#include "core/autograd.h"
#include "core/coords.h"
#include "core/generator.h"
#include "core/op_registry.h"
#include "core/ops.h"

namespace gradsleuth::debug {

namespace {

// One differentiated input as the checker sees it: a private copy we may
// perturb, and where each element (row-major) lives relative to element 0.
struct Slot {
  size_t index = 0;              // position in the inputs
  Tensor x;                      // private copy, no history
  std::vector<int64_t> offsets;  // offsets[k] = sum_d coord_d(k) * stride_d
};

std::string fmt(double v) {
  std::ostringstream os;
  os << std::setprecision(6) << v;
  return os.str();
}

// Element offsets of a strided tensor in row-major order.
std::vector<int64_t> element_offsets(const Tensor& t) {
  const Shape& s = t.shape();
  const Strides& st = t.strides();
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  for (int64_t k = 0; k < t.numel(); ++k) {
    int64_t rem = k, off = 0;
    for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) {
      off += (rem % s[d]) * st[d];
      rem /= s[d];
    }
    out[k] = off;
  }
  return out;
}

// A copy of x with x's strides in a fresh buffer, so a non-contiguous input is
// checked as non-contiguous. An input whose elements share memory (stride 0 from
// expand) becomes contiguous: perturbing one of its elements must not move others.
Tensor private_copy(const Tensor& x) {
  NoGradGuard no_grad;
  bool overlaps = false;
  int64_t extent = 1;
  for (size_t d = 0; d < x.shape().size(); ++d) {
    if (x.shape()[d] > 1 && x.strides()[d] <= 0) overlaps = true;
    extent += (x.shape()[d] - 1) * x.strides()[d];
  }
  if (overlaps || x.numel() == 0) return x.detach().clone();
  Tensor buf = empty({extent}, x.dtype());
  Tensor copy = gradsleuth::detail::make_alias(buf, x.shape(), x.strides(), 0);
  copy.copy_(x.detach());
  return copy;
}

// Fixed weights for projections: random sign times U[0.5, 1.5), never near 0.
Tensor weights(const Shape& s, Generator& gen) {
  NoGradGuard no_grad;
  Tensor mag = rand(s, kFloat64, &gen) + 0.5;
  Tensor sgn = where(rand(s, kFloat64, &gen) < 0.5, full(s, -1.0, kFloat64), ones(s, kFloat64));
  return mag * sgn;
}

void validate_inputs(const tensor_list& inputs, const char* who) {
  bool any = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    GS_CHECK(t.defined(), who, "input ", i, " is undefined; pass a tensor for every argument of fn");
    GS_CHECK(t.device().is_cpu(), who, "input ", i, " (", t.str(), ") is on ", t.device().str(),
             "; gradcheck perturbs values on the host. Fix: pass x.cpu() (check the CUDA backend against the CPU "
             "separately).");
    if (!t.is_floating_point()) continue;
    GS_CHECK(t.dtype() == kFloat64, who, "input ", i, " is ", t.str(),
             ", but numeric differentiation needs "
             "float64: in float32 the central difference (f(x+eps) - f(x-eps)) / 2eps is dominated by rounding "
             "error. Fix: pass x.to(gs::kFloat64) (and make fn compute in float64).");
    any = true;
  }
  GS_CHECK(any, who, "none of the ", inputs.size(),
           " inputs is floating-point, so there is nothing to "
           "differentiate; pass float64 tensors for the arguments to check");
}

void validate_output(const Tensor& out, const char* who) {
  GS_CHECK(out.defined(), who, "fn returned an undefined tensor; it must return the function's result");
  GS_CHECK(out.is_floating_point(), who, "fn returned ", out.str(),
           ", which has no gradient (comparisons, "
           "argmax and indices are not differentiable); return a floating-point result");
  GS_CHECK(out.dtype() == kFloat64, who, "fn returned ", out.str(),
           " from float64 inputs; the check needs the "
           "whole computation in float64. Fix: remove the cast to float32 inside fn, or .to(gs::kFloat64) its "
           "result (at the cost of float32 precision).");
}

// f(x) = sum(v * out) in double.
double project(const DiffFn& fn, const tensor_list& args, const std::vector<double>& v, const char* who) {
  Tensor out = fn(args);
  validate_output(out, who);
  GS_CHECK(static_cast<size_t>(out.numel()) == v.size(), who, "fn returned ", out.str(),
           " on a perturbed input "
           "but ",
           v.size(), " elements the first time; its output shape must depend only on input shapes");
  std::vector<double> o = out.to_vector<double>();
  double s = 0.0;
  for (size_t k = 0; k < o.size(); ++k) s += v[k] * o[k];
  return s;
}

// Names of the backward nodes reachable from out (the suspects when a check fails).
std::string backward_nodes(const Tensor& out) {
  if (!out.defined() || !out.grad_fn()) return "";
  std::vector<std::string> names;
  std::set<const Node*> seen;
  std::vector<const Node*> stack{out.grad_fn().get()};
  while (!stack.empty() && seen.size() < 200) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    std::string nm = n->name();
    if (nm != "AccumulateGrad" && std::find(names.begin(), names.end(), nm) == names.end()) names.push_back(nm);
    for (const Edge& e : n->next_edges)
      if (e.fn) stack.push_back(e.fn.get());
  }
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s;
}

// A hint for the likely cause, from the pattern of disagreement in one input.
std::string diagnose(const std::vector<double>& a, const std::vector<double>& n, const std::vector<char>& bad,
                     const GradcheckOptions& o) {
  int64_t nbad = 0, nonfinite = 0;
  bool all_zero = true;
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k] != 0.0) all_zero = false;
    if (!std::isfinite(a[k]) || !std::isfinite(n[k])) ++nonfinite;
    nbad += bad[k];
  }
  if (nonfinite)
    return "non-finite values: fn or its backward produced NaN/Inf here (log/sqrt/div of 0 or a negative, "
           "overflowing exp); check the sample's domain and the backward formula.";
  if (all_zero)
    return "the analytic gradient of this input is all zero, but the function does depend on it: autograd "
           "never reaches it (a detach(), a NoGradGuard, or a backward that returns no gradient for it), or "
           "every element sits exactly on a kink (relu at 0), where central differences see half a slope.";
  // A constant ratio analytic/numeric on the failing elements: a wrong factor.
  double ratio = std::numeric_limits<double>::quiet_NaN();
  bool constant = true;
  for (size_t k = 0; k < a.size() && constant; ++k) {
    if (!bad[k] || std::abs(n[k]) < 10 * o.atol) continue;
    double r = a[k] / n[k];
    if (std::isnan(ratio))
      ratio = r;
    else if (std::abs(r - ratio) > 1e-3 * std::abs(ratio))
      constant = false;
  }
  const bool has_ratio = constant && !std::isnan(ratio);
  if (nbad * 4 < static_cast<int64_t>(a.size()))
    return "only " + std::to_string(nbad) + " of " + std::to_string(a.size()) + " elements disagree" +
           (has_ratio ? " (analytic = " + fmt(ratio) + " x numeric there)" : "") +
           ": a wrong index or broadcast "
           "reduction in a backward, or a kink (relu at 0, abs at 0, max ties, clamp edges) within eps of the "
           "sample point; if fn is not smooth there, move the sample away from the kink.";
  if (has_ratio) {
    if (std::abs(ratio + 1.0) < 1e-3) return "analytic = -numeric: a sign error in a backward formula.";
    return "analytic = " + fmt(ratio) +
           " x numeric on every failing element: a wrong constant factor in a "
           "backward formula (e.g. d(3x)/dx written as 2, a missing 1/N in a mean, or a gradient added twice).";
  }
  return "many elements disagree with no common factor: the backward formula itself is wrong (or reads a "
         "tensor that was modified after it was saved).";
}

struct Check {
  GradcheckResult r;
  double worst_ratio = -1.0;  // |a - n| / (atol + rtol |n|) at the worst element
};

GradcheckResult run_check(const DiffFn& fn, const tensor_list& inputs, const GradcheckOptions& o, const char* who) {
  validate_inputs(inputs, who);
  GS_CHECK(o.eps > 0 && o.atol >= 0 && o.rtol >= 0, who, "eps must be > 0 and atol, rtol >= 0 (got eps=", o.eps,
           ", atol=", o.atol, ", rtol=", o.rtol, ")");

  // Private copies of the floating inputs; the others (indices, masks) pass through.
  std::vector<Slot> slots;
  tensor_list args = inputs;  // what fn sees in numeric evaluation
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].is_floating_point()) continue;
    Slot s;
    s.index = i;
    s.x = private_copy(inputs[i]);
    s.offsets = element_offsets(s.x);
    args[i] = s.x;
    slots.push_back(std::move(s));
  }

  // ---- analytic: autograd with grad_outputs = v -------------------------------
  Generator gen(o.seed);
  tensor_list ag_args = args, leaves;
  for (const Slot& s : slots) {
    Tensor leaf = s.x.detach();
    leaf.requires_grad_(true);
    ag_args[s.index] = leaf;
    leaves.push_back(leaf);
  }
  Tensor out;
  tensor_list grads;
  std::vector<double> v;
  std::string nodes;
  {
    EnableGradGuard grad_on;
    out = fn(ag_args);
    validate_output(out, who);
    Tensor vt = weights(out.shape(), gen);
    v = vt.to_vector<double>();
    nodes = backward_nodes(out);
    if (out.requires_grad())
      grads = autograd::grad({out}, leaves, {vt}, false, false, /*allow_unused=*/true);
    else
      grads.resize(leaves.size());
  }
  out = Tensor();  // drop the graph: it aliases the buffers we perturb
  std::vector<std::vector<double>> analytic(slots.size());
  for (size_t j = 0; j < slots.size(); ++j) {
    const Tensor& g = grads[j];
    if (!g.defined()) {
      analytic[j].assign(slots[j].offsets.size(), 0.0);
      continue;
    }
    GS_CHECK(g.shape() == slots[j].x.shape(), who, "the analytic gradient of input ", slots[j].index, " has shape ",
             shape_str(g.shape()), " but the input is ", slots[j].x.str());
    analytic[j] = g.to_vector<double>();
  }

  // ---- numeric: central differences, fn run without recording ---------------
  NoGradGuard no_grad;
  const double eps = o.eps;
  Check c;
  GradcheckResult& r = c.r;
  auto consider = [&](double a, double n, size_t input, int64_t index) {
    const double abs_err = std::abs(a - n);
    const double rel_err = abs_err / std::max({std::abs(a), std::abs(n), o.atol, 1e-300});
    const double tol = o.atol + o.rtol * std::abs(n);
    const double ratio =
        std::isfinite(abs_err) ? abs_err / std::max(tol, 1e-300) : std::numeric_limits<double>::infinity();
    const bool ok = abs_err <= tol;  // false for NaN
    r.max_abs_error =
        std::max(r.max_abs_error, std::isnan(abs_err) ? std::numeric_limits<double>::infinity() : abs_err);
    r.max_rel_error =
        std::max(r.max_rel_error, std::isnan(rel_err) ? std::numeric_limits<double>::infinity() : rel_err);
    ++r.elements_checked;
    if (!ok) ++r.elements_failed;
    if (ratio > c.worst_ratio) {
      c.worst_ratio = ratio;
      r.worst_input = input;
      r.worst_index = index;
      r.analytic_at_worst = a;
      r.numeric_at_worst = n;
    }
    return ok;
  };

  std::ostringstream msg;
  msg << std::setprecision(4);
  const std::string tol_str = "atol=" + fmt(o.atol) + ", rtol=" + fmt(o.rtol) + ", eps=" + fmt(eps);

  if (!o.fast) {
    std::vector<std::vector<double>> numeric(slots.size());
    std::vector<std::vector<char>> bad(slots.size());
    for (size_t j = 0; j < slots.size(); ++j) {
      double* base = slots[j].x.data_ptr<double>();
      const auto& offs = slots[j].offsets;
      numeric[j].resize(offs.size());
      bad[j].resize(offs.size());
      for (size_t k = 0; k < offs.size(); ++k) {
        double* p = base + offs[k];
        const double orig = *p;
        *p = orig + eps;
        double fp, fm;
        try {
          fp = project(fn, args, v, who);
          *p = orig - eps;
          fm = project(fn, args, v, who);
        } catch (...) {
          *p = orig;
          throw;
        }
        *p = orig;
        numeric[j][k] = (fp - fm) / (2 * eps);
        bad[j][k] = !consider(analytic[j][k], numeric[j][k], slots[j].index, static_cast<int64_t>(k));
      }
    }
    r.passed = r.elements_failed == 0;
    if (r.worst_index >= 0) r.worst_coords = unravel(r.worst_index, inputs[r.worst_input].shape());
    size_t wj = 0;
    for (size_t j = 0; j < slots.size(); ++j)
      if (slots[j].index == r.worst_input) wj = j;
    const std::string where = "input " + std::to_string(r.worst_input) + " (" + inputs[r.worst_input].str() +
                              "), element " + coords_str(r.worst_coords) + " [flat " + std::to_string(r.worst_index) +
                              "]";
    if (r.passed) {
      msg << "gradcheck passed: " << r.elements_checked << " elements in " << slots.size()
          << " input(s), max abs error " << r.max_abs_error << ", max rel error " << r.max_rel_error << " (" << tol_str
          << ")";
    } else {
      int64_t bad_here = 0;
      for (char b : bad[wj]) bad_here += b;
      msg << "gradcheck FAILED: " << r.elements_failed << " of " << r.elements_checked
          << " gradient elements disagree (" << tol_str << ").\n"
          << "  worst: " << where << ": analytic " << r.analytic_at_worst << " vs numeric " << r.numeric_at_worst
          << " (abs error " << std::abs(r.analytic_at_worst - r.numeric_at_worst) << ", allowed "
          << o.atol + o.rtol * std::abs(r.numeric_at_worst) << "); " << bad_here << " of " << bad[wj].size()
          << " elements of this input fail.\n"
          << "  likely cause: " << diagnose(analytic[wj], numeric[wj], bad[wj], o);
      if (!nodes.empty()) msg << "\n  backward nodes between the inputs and the output: " << nodes;
    }
  } else {
    // Fast mode: random unit directions u (over all inputs together).
    GS_CHECK(o.fast_projections > 0, who, "fast_projections must be > 0 (got ", o.fast_projections, ")");
    std::vector<std::vector<double>> orig(slots.size());
    for (size_t j = 0; j < slots.size(); ++j) {
      const double* base = slots[j].x.data_ptr<double>();
      for (int64_t off : slots[j].offsets) orig[j].push_back(base[off]);
    }
    auto set_values = [&](const std::vector<std::vector<double>>& u, double t) {
      for (size_t j = 0; j < slots.size(); ++j) {
        double* base = slots[j].x.data_ptr<double>();
        for (size_t k = 0; k < slots[j].offsets.size(); ++k)
          base[slots[j].offsets[k]] = orig[j][k] + (u.empty() ? 0.0 : t * u[j][k]);
      }
    };
    for (int p = 0; p < o.fast_projections; ++p) {
      std::vector<std::vector<double>> u(slots.size());
      double norm2 = 0.0;
      for (size_t j = 0; j < slots.size(); ++j) {
        u[j] = randn(slots[j].x.shape(), kFloat64, &gen).to_vector<double>();
        for (double x : u[j]) norm2 += x * x;
      }
      const double scale = norm2 > 0 ? 1.0 / std::sqrt(norm2) : 0.0;
      double a = 0.0;
      for (size_t j = 0; j < slots.size(); ++j)
        for (size_t k = 0; k < u[j].size(); ++k) {
          u[j][k] *= scale;
          a += analytic[j][k] * u[j][k];
        }
      double fp, fm;
      try {
        set_values(u, eps);
        fp = project(fn, args, v, who);
        set_values(u, -eps);
        fm = project(fn, args, v, who);
      } catch (...) {
        set_values({}, 0.0);
        throw;
      }
      set_values({}, 0.0);
      consider(a, (fp - fm) / (2 * eps), 0, p);
    }
    r.passed = r.elements_failed == 0;
    if (r.passed) {
      msg << "gradcheck (fast, " << o.fast_projections << " random directions) passed: max abs error "
          << r.max_abs_error << ", max rel error " << r.max_rel_error << " (" << tol_str << ")";
    } else {
      msg << "gradcheck (fast) FAILED: " << r.elements_failed << " of " << o.fast_projections
          << " random directional derivatives disagree (" << tol_str << ").\n"
          << "  worst: direction " << r.worst_index << ": analytic " << r.analytic_at_worst << " vs numeric "
          << r.numeric_at_worst << ". Run without fast mode to locate the input and element.";
      if (!nodes.empty()) msg << "\n  backward nodes between the inputs and the output: " << nodes;
    }
  }
  r.message = msg.str();
  return r;
}

}  // namespace

GradcheckResult gradcheck(const DiffFn& fn, const tensor_list& inputs, GradcheckOptions opts) {
  GradcheckResult r = run_check(fn, inputs, opts, "gradcheck");
  if (!opts.check_double_backward) return r;
  GradcheckResult r2 = gradgradcheck(fn, inputs, opts);
  r.passed = r.passed && r2.passed;
  r.message += "\n" + r2.message;
  return r;
}

GradcheckResult gradgradcheck(const DiffFn& fn, const tensor_list& inputs, GradcheckOptions opts) {
  validate_inputs(inputs, "gradgradcheck");
  // Fixed weights: v for fn's output, w_i for each first-order gradient.
  Generator gen(opts.seed + 1);
  Tensor out0;
  {
    NoGradGuard no_grad;
    tensor_list plain;
    for (const Tensor& t : inputs) plain.push_back(t.detach());
    out0 = fn(plain);
  }
  validate_output(out0, "gradgradcheck");
  const Tensor v = weights(out0.shape(), gen);
  tensor_list w(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].is_floating_point()) w[i] = weights(inputs[i].shape(), gen);

  // (inputs, v) -> sum_i sum(w_i * d(sum(v * fn(inputs)))/d(input_i)), its graph kept (create_graph).
  // v is differentiated too (as PyTorch's gradgradcheck does with grad_outputs): a
  // backward is a function of the incoming gradient as well as of the inputs, and a
  // backward whose output has no graph back to that gradient (a raw kernel) would
  // otherwise pass here while Hessian-vector products through it silently lose its
  // term. For a piecewise-linear op (relu, max pooling) that dependence is all there is.
  // v enters as u = v / kVScale: the first derivative is linear in v, so the
  // central difference along v is exact at any step, and a step of eps in u is one of
  // eps * kVScale in v. That keeps a float32 cast of the gradient inside a backward
  // (to_dtype's) from turning a 1e-6 step into rounding noise.
  constexpr double kVScale = 1e3;
  const size_t n_in = inputs.size();
  DiffFn first_order = [&fn, w, n_in, kVScale](const tensor_list& in) -> Tensor {
    EnableGradGuard grad_on;
    tensor_list args(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n_in)), diff;
    std::vector<size_t> idx;
    for (size_t i = 0; i < n_in; ++i) {
      if (!in[i].is_floating_point()) continue;
      Tensor a = in[i];
      if (!a.requires_grad()) {  // numeric pass: a fresh leaf to differentiate
        a = in[i].detach();
        a.requires_grad_(true);
      }
      args[i] = a;
      diff.push_back(a);
      idx.push_back(i);
    }
    Tensor out = fn(args);
    Tensor total = zeros({}, kFloat64);
    if (!out.requires_grad()) return total;
    GS_CHECK(out.shape() == in[n_in].shape(), "gradgradcheck", "fn returned ", out.str(),
             " on a perturbed input "
             "but shape ",
             shape_str(in[n_in].shape()),
             " the first time; its output shape must depend only on "
             "input shapes");
    tensor_list g =
        autograd::grad({out}, diff, {in[n_in] * kVScale}, true, /*create_graph=*/true, /*allow_unused=*/true);
    for (size_t j = 0; j < g.size(); ++j)
      if (g[j].defined()) total = total + (g[j] * w[idx[j]]).sum();
    return total;
  };
  tensor_list with_v = inputs;
  {
    NoGradGuard no_grad;
    with_v.push_back(v / kVScale);
  }
  opts.check_double_backward = false;
  GradcheckResult r = run_check(first_order, with_v, opts, "gradgradcheck");
  r.message = "second order (gradgradcheck, the backward of the backward, create_graph=true): " + r.message;
  if (!r.passed && r.worst_input == n_in)
    r.message += "\n  (input " + std::to_string(n_in) +
                 " is the gradient fed into fn's output, grad_outputs: "
                 "most likely a backward computes its result with a raw kernel, so the result has no graph back to "
                 "that gradient; record that backward as an op of its own, or refuse create_graph with "
                 "detail::first_order_only)";
  return r;
}

std::vector<OpCheckRow> gradcheck_all_ops(const GradcheckOptions& opts, const std::string& filter) {
  if (!filter.empty())
    GS_CHECK(find_op(filter) != nullptr, "gradcheck_all_ops", "no op named '", filter,
             "' in the op registry; run 'gradsleuth ops' to list them");
  std::vector<OpCheckRow> rows;
  for (const OpInfo& op : op_registry()) {
    if (!filter.empty() && op.name != filter) continue;
    OpCheckRow base;
    base.name = op.name;
    base.category = op.category;
    if (!op.differentiable) {
      OpCheckRow row = base;
      row.skipped = true;
      row.message = "not differentiable (its output is bool or integer): no gradient to check";
      rows.push_back(row);
      continue;
    }
    Generator gen(opts.seed);
    std::vector<OpSample> samples;
    try {
      samples = op.samples(gen, kFloat64);
    } catch (const std::exception& e) {
      OpCheckRow row = base;
      row.sample = "(making samples)";
      row.passed = false;
      row.message = std::string("making the samples threw: ") + e.what();
      rows.push_back(row);
      continue;
    }
    for (const OpSample& s : samples) {
      OpCheckRow row = base;
      row.sample = s.label;
      GradcheckOptions first = opts;
      first.check_double_backward = false;
      try {
        GradcheckResult r = gradcheck(op.fn, s.inputs, first);
        row.passed = r.passed;
        row.max_abs_error = r.max_abs_error;
        row.max_rel_error = r.max_rel_error;
        if (!r.passed) row.message = r.message;
      } catch (const std::exception& e) {
        row.passed = false;
        row.max_abs_error = row.max_rel_error = std::numeric_limits<double>::infinity();
        row.message = std::string("gradcheck threw: ") + e.what();
      }
      if (op.double_backward && opts.check_double_backward) {
        row.double_backward_checked = true;
        try {
          GradcheckResult r2 = gradgradcheck(op.fn, s.inputs, first);
          row.double_backward_passed = r2.passed;
          if (!r2.passed) row.message += (row.message.empty() ? "" : "\n") + r2.message;
        } catch (const std::exception& e) {
          row.double_backward_passed = false;
          row.message += (row.message.empty() ? "" : "\n") + std::string("gradgradcheck threw: ") + e.what();
        }
        row.passed = row.passed && row.double_backward_passed;
      } else if (opts.check_double_backward) {
        // The registry says no second derivatives: create_graph must refuse with a
        // clear error, never return a gradient whose own graph is missing.
        row.double_backward_checked = true;
        try {
          gradgradcheck(op.fn, s.inputs, first);
          row.double_backward_passed = false;
          row.message += (row.message.empty() ? "" : "\n") +
                         std::string(
                             "registered without double backward, but "
                             "backward(create_graph=true) through it did not refuse: a second derivative would be "
                             "silently wrong. Wrap its backward in detail::first_order_only, or make it differentiable "
                             "and flag it double_backward.");
        } catch (const std::exception& e) {
          const std::string what = e.what();
          row.double_backward_refused = what.find("second derivatives are not supported") != std::string::npos;
          row.double_backward_passed = row.double_backward_refused;
          if (!row.double_backward_refused)
            row.message += (row.message.empty() ? "" : "\n") + std::string("gradgradcheck threw: ") + what;
        }
        row.passed = row.passed && row.double_backward_passed;
      }
      rows.push_back(row);
    }
  }
  return rows;
}

}  // namespace gradsleuth::debug
