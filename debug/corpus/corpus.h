// The healthy-practice corpus: correct training programs in the styles people copy (PyTorch's
// examples, torchvision's and timm's recipes, the fine-tuning tutorials, Karpathy's "A Recipe for
// Training Neural Networks"), each run through debug::Session or debug::diagnose(). Every one trains
// to a sensible accuracy and no check may warn on any of them (docs/corpus.md).
//
//   for (const corpus::Program& p : corpus::healthy_programs()) { ... corpus::run_program(p, 1) ... }
#pragma once
#include <string>
#include <vector>

#include "debug/corpus/program.h"

namespace gradsleuth::debug::corpus {

// Every healthy program, grouped by family (schedules, fine-tuning, tasks, depth,
// regularisation, loop).
const std::vector<Program>& healthy_programs();

// The program called `name`; throws gs::Error listing the names when there is none.
const Program& program(const std::string& name);

// The families, in order.
std::vector<std::string> program_families();

}  // namespace gradsleuth::debug::corpus
