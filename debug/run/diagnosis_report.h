// W5, the diagnosis report: a text report of a model and one batch for a person (the
// parameters, the batch, the forward's output, the initial loss, each gradient).
#pragma once
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "debug/checks/model/model_checks.h"
#include "debug/evidence/finding.h"
#include "nn/module.h"

namespace gradsleuth::debug {

// ---- W5 -----------------------------------------------------------------------------
struct Diagnosis {
  std::string text;  // the whole report for a person
  Report findings;   // info findings (and any problem found on the way)
};
// Parameters (shape, count, min/max/mean/std), the batch (D1), the forward's
// output statistics, the initial loss, and each parameter's gradient statistics.
Diagnosis diagnosis_report(nn::Module& model, const Tensor& x, const Tensor& y, const LossFunction& loss);

}  // namespace gradsleuth::debug
