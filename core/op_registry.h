// The op registry: every op of the engine, by name, in one table that code can
// walk — the gradient checker checks each one, the CUDA tests compare each one
// against the CPU, and debug reports name ops by these names.
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/op_kinds.h"
#include "core/tensor.h"

namespace gradsleuth {

class Generator;

// One set of inputs for an op, made in float64 for gradient checking.
struct OpSample {
  std::string label;   // "broadcast (3,1)+(1,4)", "non-contiguous", ...
  tensor_list inputs;  // the op's tensor arguments; non-floating ones are not differentiated
};

struct OpInfo {
  std::string name;      // "add", "conv2d", "transpose"
  std::string category;  // "elementwise", "reduction", "linalg", "view", "indexing", "nn", "inplace"
  bool differentiable = true;
  // create_graph gives correct second derivatives (checked by gradgradcheck). A
  // differentiable op without it must refuse: its backward raises under create_graph
  // (detail::first_order_only) rather than return a gradient with no graph behind it.
  bool double_backward = false;
  std::function<Tensor(const tensor_list&)> fn;
  // Sample inputs (float64, with the given dtype for floating tensors), covering
  // broadcasting and non-contiguous cases where the op has them.
  std::function<std::vector<OpSample>(Generator&, DType)> samples;
};

const std::vector<OpInfo>& op_registry();
const OpInfo* find_op(std::string_view name);  // nullptr if unknown

// The registry rows that run a kernel op code: a unary or binary op's row is generated from
// its line in core/op_kinds.h and carries the op's name; a reduction names the rows whose
// public functions reach its kernel (sum: "sum", "sum_dim", "mean", ...).
std::vector<std::string> registry_rows_of(UnaryOp op);
std::vector<std::string> registry_rows_of(BinaryOp op);
std::vector<std::string> registry_rows_of(ReduceOp op);

}  // namespace gradsleuth
