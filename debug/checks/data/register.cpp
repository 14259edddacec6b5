// The data family's run checks (RunCheck), registered for the training monitor: each unit lives in
// its check's home file.
#include "debug/checks/run_check.h"

namespace gradsleuth::debug {

std::unique_ptr<RunCheck> make_row_range_run_check(const MonitorOptions& o);       // D5, normalisation.cpp
std::unique_ptr<RunCheck> make_flat_feature_run_check(const MonitorOptions& o);    // D5, normalisation.cpp
std::unique_ptr<RunCheck> make_label_shape_run_check(const MonitorOptions& o);     // D6, label_shape.cpp
std::unique_ptr<RunCheck> make_repeated_batch_run_check(const MonitorOptions& o);  // D8, shuffling.cpp
std::unique_ptr<RunCheck> make_loop_alignment_run_check(const MonitorOptions& o);  // D4, alignment.cpp
std::unique_ptr<RunCheck> make_held_out_run_check(const MonitorOptions& o);        // D13, splits.cpp
std::unique_ptr<RunCheck> make_target_copy_run_check(const MonitorOptions& o);     // D7, leakage.cpp
std::unique_ptr<RunCheck> make_loop_inputs_run_check(const MonitorOptions& o);     // D10, loop_inputs.cpp

void add_data_run_checks(RunCheckList& list, const MonitorOptions& o) {
  list.push_back(make_row_range_run_check(o));
  list.push_back(make_flat_feature_run_check(o));
  list.push_back(make_label_shape_run_check(o));
  list.push_back(make_repeated_batch_run_check(o));
  list.push_back(make_loop_alignment_run_check(o));
  list.push_back(make_held_out_run_check(o));
  list.push_back(make_target_copy_run_check(o));
  list.push_back(make_loop_inputs_run_check(o));
}

}  // namespace gradsleuth::debug
