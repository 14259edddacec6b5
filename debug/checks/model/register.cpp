// The model family's run checks (RunCheck), registered for the training monitor: each unit lives in
// its check's home file.
#include "debug/checks/run_check.h"

namespace gradsleuth::debug {

std::unique_ptr<RunCheck> make_dead_relu_run_check(const MonitorOptions& o);         // M7, activation_stats.cpp
std::unique_ptr<RunCheck> make_saturation_run_check(const MonitorOptions& o);        // M8, activation_stats.cpp
std::unique_ptr<RunCheck> make_broadcast_run_check(const MonitorOptions& o);         // M19, anomaly.cpp
std::unique_ptr<RunCheck> make_all_zero_run_check(const MonitorOptions& o);          // M25, run_checks.cpp
std::unique_ptr<RunCheck> make_variance_run_check(const MonitorOptions& o);          // M26, run_checks.cpp
std::unique_ptr<RunCheck> make_gradient_spread_run_check(const MonitorOptions& o);   // M27, architecture.cpp
std::unique_ptr<RunCheck> make_linear_readers_run_check(const MonitorOptions& o);    // M23, architecture.cpp
std::unique_ptr<RunCheck> make_mode_run_check(const MonitorOptions& o);              // M2, M17, behaviour.cpp
std::unique_ptr<RunCheck> make_batchnorm_batch_run_check(const MonitorOptions& o);   // M17, batchnorm_stats.cpp
std::unique_ptr<RunCheck> make_final_activation_run_check(const MonitorOptions& o);  // M3, structure.cpp
std::unique_ptr<RunCheck> make_unregistered_leaf_run_check(const MonitorOptions& o);  // M5, unregistered_leaf.cpp
std::unique_ptr<RunCheck> make_devices_run_check(const MonitorOptions& o);           // M11, devices.cpp
std::unique_ptr<RunCheck> make_nonfinite_run_check(const MonitorOptions& o);         // W4, M12, anomaly.cpp
std::unique_ptr<RunCheck> make_half_precision_run_check(const MonitorOptions& o);    // M18, anomaly.cpp
std::unique_ptr<RunCheck> make_range_watch_run_check(const MonitorOptions& o);       // M28, range_watch.cpp
std::unique_ptr<RunCheck> make_precision_run_check(const MonitorOptions& o);         // M29, M30, precision.cpp
std::unique_ptr<RunCheck> make_loaded_weights_run_check(const MonitorOptions& o);    // M9, initialisation.cpp

void add_model_run_checks(RunCheckList& list, const MonitorOptions& o) {
  list.push_back(make_dead_relu_run_check(o));
  list.push_back(make_saturation_run_check(o));
  list.push_back(make_broadcast_run_check(o));
  list.push_back(make_all_zero_run_check(o));
  list.push_back(make_variance_run_check(o));
  list.push_back(make_gradient_spread_run_check(o));
  list.push_back(make_linear_readers_run_check(o));
  list.push_back(make_mode_run_check(o));
  list.push_back(make_batchnorm_batch_run_check(o));
  list.push_back(make_final_activation_run_check(o));
  list.push_back(make_unregistered_leaf_run_check(o));
  list.push_back(make_devices_run_check(o));
  list.push_back(make_nonfinite_run_check(o));
  list.push_back(make_half_precision_run_check(o));
  list.push_back(make_range_watch_run_check(o));
  list.push_back(make_precision_run_check(o));
  list.push_back(make_loaded_weights_run_check(o));
}

}  // namespace gradsleuth::debug
