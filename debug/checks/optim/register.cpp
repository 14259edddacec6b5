// The optimisation family's run checks (RunCheck), registered for the training monitor: each unit
// lives in its check's home file.
#include "debug/checks/run_check.h"

namespace gradsleuth::debug {

std::unique_ptr<RunCheck> make_norm_history_run_check(const MonitorOptions& o);     // O2, O3, norm_history.cpp
std::unique_ptr<RunCheck> make_learning_rate_run_check(const MonitorOptions& o);    // O6, lr_run_check.cpp
std::unique_ptr<RunCheck> make_gradient_health_run_check(const MonitorOptions& o);  // O1, optim_checks.cpp
std::unique_ptr<RunCheck> make_finite_weights_run_check(const MonitorOptions& o);   // O4, finite_weights.cpp
std::unique_ptr<RunCheck> make_accumulation_run_check(const MonitorOptions& o);     // O5, accumulation.cpp
std::unique_ptr<RunCheck> make_clipping_run_check(const MonitorOptions& o);         // O9, clipping.cpp
std::unique_ptr<RunCheck> make_loss_scale_run_check(const MonitorOptions& o);       // O10, loss_scale.cpp
std::unique_ptr<RunCheck> make_loop_penalty_run_check(const MonitorOptions& o);     // O3, loop_penalty.cpp

void add_optim_run_checks(RunCheckList& list, const MonitorOptions& o) {
  list.push_back(make_norm_history_run_check(o));
  list.push_back(make_learning_rate_run_check(o));
  list.push_back(make_gradient_health_run_check(o));
  list.push_back(make_finite_weights_run_check(o));
  list.push_back(make_accumulation_run_check(o));
  list.push_back(make_clipping_run_check(o));
  list.push_back(make_loss_scale_run_check(o));
  list.push_back(make_loop_penalty_run_check(o));
}

}  // namespace gradsleuth::debug
