// W5, the diagnosis report (see diagnosis_report.h).
#include "debug/run/diagnosis_report.h"

#include "debug/checks/optim/optim_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/data/data_checks.h"
#include "debug/checks/model/behaviour.h"
#include "debug/evidence/tensor_stats.h"
#include "nn/normalization.h"

namespace gradsleuth::debug {

// ---- W5 ---------------------------------------------------------------------------------
Diagnosis diagnosis_report(nn::Module& model, const Tensor& x, const Tensor& y, const LossFunction& loss) {
  Diagnosis d;
  std::ostringstream os;
  os << "== parameters ==\n";
  int64_t total = 0;
  for (auto& [n, p] : model.named_parameters()) {
    const TensorSummary s = summarize(p);
    total += p.numel();
    os << "  " << n << " " << shape_of(p) << (p.requires_grad() ? "" : " (frozen)") << ": min " << fmt_num(s.min)
       << ", max " << fmt_num(s.max) << ", mean " << fmt_num(s.mean) << ", std " << fmt_num(s.std) << "\n";
  }
  os << "  " << total << " parameters\n== data ==\n";
  auto batch = check_batch(x, y);
  d.findings.add(batch);
  for (const Finding& f : batch) os << "  " << f.title << "\n";
  os << "== forward ==\n";
  std::vector<std::pair<Tensor, Tensor>> grads;
  for (Tensor& p : model.parameters()) {
    grads.emplace_back(p, p.grad());
    p.zero_grad();
  }
  ParamSnapshot snap(model);
  Tensor out = model(x);
  const TensorSummary so = summarize(out);
  os << "  output " << so.str(out) << "\n";
  Tensor l = loss(out, y);
  const double lv = l.item<double>();
  os << "== initial loss ==\n  " << fmt_num(lv);
  if (out.dim() == 2 && y.dtype() == kInt64)
    os << " (log(C) = " << fmt_num(std::log(static_cast<double>(out.size(1)))) << " for " << out.size(1) << " classes)";
  os << "\n== gradients ==\n";
  if (l.requires_grad()) {
    l.backward();
    for (auto& [n, p] : model.named_parameters()) {
      Tensor g = p.grad();
      if (!g.defined()) {
        os << "  " << n << ": no gradient\n";
        continue;
      }
      const TensorSummary s = summarize(g);
      os << "  " << n << ": norm " << fmt_num(s.norm) << ", min " << fmt_num(s.min) << ", max " << fmt_num(s.max)
         << ", mean " << fmt_num(s.mean) << ", std " << fmt_num(s.std) << (s.all_finite() ? "" : " NON-FINITE") << "\n";
    }
    d.findings.add(check_gradient_health(model));
  }
  snap.restore();
  for (auto& [p, g] : grads) p.set_grad(g);
  d.text = os.str();
  Finding f;
  f.check = "W5";
  f.severity = Severity::Info;
  f.title = "diagnosis report: " + std::to_string(total) + " parameters, initial loss " + fmt_num(lv);
  f.cause = "\n" + d.text;
  d.findings.add(std::move(f));
  return d;
}

}  // namespace gradsleuth::debug
