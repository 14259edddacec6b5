// The gradient buffers the optimizer steps on this thread last used, and their versions: a gradient
// transform (clip_grad_norm_, clip_grad_value_) that finds every gradient it would change among them,
// unchanged since, runs after step(), where it changes no update. Internal to optim/.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace gradsleuth::optim::stepped {

// Called by Optimizer::step with the step's owner and the gradients it used.
void remember_stepped_grads(const void* optimizer, const std::vector<Tensor>& grads);
// Whether `params` have a gradient and every one of them is a buffer a step used, not written since.
bool grads_already_stepped(const std::vector<Tensor>& params);

}  // namespace gradsleuth::optim::stepped
