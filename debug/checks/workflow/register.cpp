// The workflow family's run checks (RunCheck), registered for the training monitor: each unit lives
// in its check's home file.
#include "debug/checks/run_check.h"

namespace gradsleuth::debug {

std::unique_ptr<RunCheck> make_step_timer_run_check(const MonitorOptions& o);       // W10, step_timer.cpp
std::unique_ptr<RunCheck> make_graph_retention_run_check(const MonitorOptions& o);  // W8, memory.cpp

void add_workflow_run_checks(RunCheckList& list, const MonitorOptions& o) {
  list.push_back(make_step_timer_run_check(o));
  list.push_back(make_graph_retention_run_check(o));
}

}  // namespace gradsleuth::debug
