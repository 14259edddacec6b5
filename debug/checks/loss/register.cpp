// The loss family's run checks (RunCheck), registered for the training monitor: each unit lives in
// its check's home file.
#include "debug/checks/run_check.h"

namespace gradsleuth::debug {

std::unique_ptr<RunCheck> make_loss_history_run_check(const MonitorOptions& o);    // L1, L7, history.cpp
std::unique_ptr<RunCheck> make_softmax_input_run_check(const MonitorOptions& o);   // L2, loss_checks.cpp
std::unique_ptr<RunCheck> make_bce_input_run_check(const MonitorOptions& o);       // L3, loss_checks.cpp
std::unique_ptr<RunCheck> make_initial_loss_run_check(const MonitorOptions& o);    // L4, loss_checks.cpp
std::unique_ptr<RunCheck> make_masked_targets_run_check(const MonitorOptions& o);  // L5, loss_checks.cpp
std::unique_ptr<RunCheck> make_loss_division_run_check(const MonitorOptions& o);   // L6, reduction.cpp

void add_loss_run_checks(RunCheckList& list, const MonitorOptions& o) {
  list.push_back(make_loss_history_run_check(o));
  list.push_back(make_softmax_input_run_check(o));
  list.push_back(make_bce_input_run_check(o));
  list.push_back(make_initial_loss_run_check(o));
  list.push_back(make_masked_targets_run_check(o));
  list.push_back(make_loss_division_run_check(o));
}

}  // namespace gradsleuth::debug
