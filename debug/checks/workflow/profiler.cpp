// W7 profiler: module hooks, optimizer step hooks and the op observer feed one
// clock; each event is charged the time since the previous one (profiler.h).
#include "debug/checks/workflow/profiler.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/autograd.h"
#include "core/format.h"
#include "debug/evidence/finding.h"

namespace gradsleuth::debug {

namespace {

constexpr const char* kModuleCode = "(module code between ops)";
constexpr const char* kOutside = "(outside forward, backward and step)";
constexpr size_t kMaxPending = 4096;  // ops held for one backward node (no node runs this many)

std::string row_key(Phase p, const std::string& name) {
  std::string k(1, static_cast<char>('0' + static_cast<int>(p)));
  k += name;
  return k;
}

void sort_rows(std::vector<ProfileRow>& rows) {
  std::stable_sort(rows.begin(), rows.end(),
                   [](const ProfileRow& a, const ProfileRow& b) { return a.total_ms > b.total_ms; });
}

std::string fixed(double v, int decimals) { return str_printf("%.*f", decimals, v); }

std::string pad_cell(const std::string& s, size_t w, bool right = false) {
  if (s.size() >= w) return s;
  return right ? std::string(w - s.size(), ' ') + s : s + std::string(w - s.size(), ' ');
}

std::string rows_json(const std::vector<ProfileRow>& rows) {
  std::string s = "[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const ProfileRow& r = rows[i];
    s += (i ? "," : "");
    s += "{\"name\":" + json_str(r.name) + ",\"phase\":" + json_str(r.phase) + ",\"calls\":" + std::to_string(r.calls) +
         ",\"total_ms\":" + json_num(r.total_ms) + ",\"percent\":" + json_num(r.percent) + "}";
  }
  return s + "]";
}

}  // namespace

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::OptimizerStep: return "optimizer step";
    case Phase::Other: break;
  }
  return "other";
}

// ---- the report ---------------------------------------------------------------------
const ProfileRow* ProfileReport::find(const std::vector<ProfileRow>& rows, const std::string& name) {
  for (const ProfileRow& r : rows)
    if (r.name == name) return &r;
  return nullptr;
}

std::string ProfileReport::str(size_t max_rows) const {
  std::ostringstream os;
  os << "where the step time goes: " << fixed(wall_ms, 3) << " ms profiled";
  if (steps) os << ", " << steps << " optimizer steps (" << fixed(ms_per_step(), 3) << " ms per step)";
  os << "\n\n";
  os << pad_cell("phase", 40) << pad_cell("total ms", 12, true) << pad_cell("% of time", 11, true) << "\n";
  for (const ProfileRow& r : phases)
    os << pad_cell(r.name, 40) << pad_cell(fixed(r.total_ms, 3), 12, true)
       << pad_cell(fixed(r.percent, 1) + "%", 11, true) << "\n";

  auto table = [&](const std::vector<ProfileRow>& rows, const char* heading, bool with_phase) {
    os << "\n" << heading << "\n";
    os << pad_cell("name", 40) << (with_phase ? pad_cell("phase", 16) : "") << pad_cell("calls", 8, true)
       << pad_cell("total ms", 12, true) << pad_cell("ms/call", 11, true) << pad_cell("% of time", 11, true) << "\n";
    const size_t n = std::min(rows.size(), max_rows);
    for (size_t i = 0; i < n; ++i) {
      const ProfileRow& r = rows[i];
      os << pad_cell(r.name, 40) << (with_phase ? pad_cell(r.phase, 16) : "")
         << pad_cell(std::to_string(r.calls), 8, true) << pad_cell(fixed(r.total_ms, 3), 12, true)
         << pad_cell(fixed(r.mean_ms(), 4), 11, true) << pad_cell(fixed(r.percent, 1) + "%", 11, true) << "\n";
    }
    if (rows.size() > n) os << "... " << rows.size() - n << " more rows (json() lists them all)\n";
  };
  if (!modules.empty()) table(modules, "modules (inclusive: a parent's time includes its children)", false);
  if (!ops.empty())
    table(ops,
          "ops and backward nodes (self time: the gap since the previous event, see debug/checks/workflow/profiler.h)",
          true);
  return os.str();
}

std::string ProfileReport::json() const {
  return "{\"wall_ms\":" + json_num(wall_ms) + ",\"steps\":" + std::to_string(steps) +
         ",\"ms_per_step\":" + json_num(ms_per_step()) + ",\"events\":" + std::to_string(events) +
         ",\"phases\":" + rows_json(phases) + ",\"modules\":" + rows_json(modules) + ",\"ops\":" + rows_json(ops) + "}";
}

// ---- attaching ----------------------------------------------------------------------
Profiler::~Profiler() {
  stop();
  detach();
}

void Profiler::attach(nn::Module& model) {
  std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>> all;
  try {
    all = model.named_modules();
  } catch (const std::bad_weak_ptr&) {
    GS_FAIL("debug::Profiler::attach", "the ", model.type_name(),
            " is not owned by a std::shared_ptr, so its "
            "modules cannot be listed. Create the model with std::make_shared.");
  }
  std::unordered_map<const nn::Module*, size_t> known;  // modules seen by an earlier attach
  for (size_t i = 0; i < modules_.size(); ++i)
    if (auto m = modules_[i].module.lock()) known.emplace(m.get(), i);
  for (auto& [path, m] : all) {
    size_t idx;
    auto it = known.find(m.get());
    if (it == known.end()) {
      idx = modules_.size();
      ModuleInfo info;
      info.module = m;
      info.label = (path.empty() ? "(model)" : path) + " (" + m->type_name() + ")";
      modules_.push_back(std::move(info));
      known.emplace(m.get(), idx);
    } else {
      idx = it->second;
      if (!modules_[idx].hooks.empty()) continue;  // hooked already (a shared module: timed once, first path)
    }
    modules_[idx].hooks.push_back(
        m->register_forward_pre_hook([this, idx](nn::Module& self, const Tensor&) { module_pre(self, idx); }));
    modules_[idx].hooks.push_back(m->register_forward_hook(
        [this, idx](nn::Module& self, const Tensor&, const Tensor&) { module_post(self, idx); }));
  }
}

void Profiler::attach(optim::Optimizer& optimizer) {
  for (const OptInfo& o : optimizers_)
    if (o.opt == &optimizer) return;
  OptInfo info{&optimizer, 0, 0};
  info.pre = optimizer.add_pre_step_hook([this](optim::Optimizer& o) { step_pre(o); });
  info.post = optimizer.add_post_step_hook([this](optim::Optimizer& o) { step_post(o); });
  optimizers_.push_back(info);
}

void Profiler::detach() {
  for (ModuleInfo& mi : modules_) {
    if (auto m = mi.module.lock())
      for (size_t h : mi.hooks) m->remove_forward_hook(h);
    mi.hooks.clear();
  }
  for (const OptInfo& o : optimizers_) {
    o.opt->remove_hook(o.pre);
    o.opt->remove_hook(o.post);
  }
  optimizers_.clear();
  stack_.clear();
}

// ---- the clock ----------------------------------------------------------------------
void Profiler::start() {
  if (running_) return;
  running_ = true;
  started_ = last_ = Clock::now();
  add_observer(this);
}

void Profiler::stop() {
  if (!running_) return;
  remove_observer(this);
  const Clock::time_point now = Clock::now();
  flush_pending();
  charge(Phase::Other, kOutside, lap(now));
  wall_ns_ += std::chrono::duration<double, std::nano>(now - started_).count();
  running_ = false;
  in_step_ = false;
  stack_.clear();
}

void Profiler::reset() {
  const Clock::time_point now = Clock::now();
  rows_.clear();
  row_index_.clear();
  pending_.clear();
  for (ModuleInfo& mi : modules_) mi.calls = 0, mi.ns = 0.0;
  wall_ns_ = 0.0;
  steps_ = events_ = 0;
  started_ = last_ = now;
}

double Profiler::lap(Clock::time_point now) {
  const double ns = std::chrono::duration<double, std::nano>(now - last_).count();
  last_ = now;
  return ns;
}

void Profiler::charge(Phase phase, const std::string& name, double ns, int64_t calls) {
  const std::string key = row_key(phase, name);
  auto it = row_index_.find(key);
  size_t i;
  if (it == row_index_.end()) {
    i = rows_.size();
    rows_.push_back(Acc{name, phase, 0, 0.0});
    row_index_.emplace(key, i);
  } else {
    i = it->second;
  }
  rows_[i].calls += calls;
  rows_[i].ns += ns;
}

// Backward ops whose node never reported (its backward threw), or too many to hold.
void Profiler::flush_pending() {
  for (const Pending& p : pending_) charge(Phase::Backward, p.op, p.ns);
  pending_.clear();
}

// ---- events ---------------------------------------------------------------------------
void Profiler::on_op(const OpEvent& e) {
  if (!running_) return;
  const double ns = lap(Clock::now());
  ++events_;
  if (in_step_) {
    charge(Phase::OptimizerStep, e.op, ns);
  } else if (autograd::in_backward()) {
    // An op of a backward formula: charged to its node when on_backward arrives.
    if (pending_.size() >= kMaxPending) flush_pending();
    pending_.push_back(Pending{e.op, ns});
  } else {
    flush_pending();
    // Ops inside a module, or recording a graph (a loss called directly), are the
    // forward; no-grad ops outside modules (metrics, data preparation) are other.
    charge(!stack_.empty() || GradMode::is_enabled() ? Phase::Forward : Phase::Other, e.op, ns);
  }
}

void Profiler::on_backward(const BackwardEvent& e) {
  if (!running_) return;
  double ns = lap(Clock::now());
  ++events_;
  for (const Pending& p : pending_) ns += p.ns;  // the ops this node ran
  pending_.clear();
  charge(Phase::Backward, std::string("backward: ") + e.node->name(), ns);
}

void Profiler::module_pre(nn::Module&, size_t index) {
  if (!running_) return;
  const Clock::time_point now = Clock::now();
  ++events_;
  flush_pending();
  charge(stack_.empty() ? Phase::Other : Phase::Forward, stack_.empty() ? kOutside : kModuleCode, lap(now));
  stack_.emplace_back(index, now);
}

void Profiler::module_post(nn::Module&, size_t index) {
  if (!running_) return;
  const Clock::time_point now = Clock::now();
  flush_pending();
  charge(Phase::Forward, kModuleCode, lap(now));
  // Pop to this module's entry; entries above it belong to calls that threw
  // (their post-hooks never ran).
  while (!stack_.empty() && stack_.back().first != index) stack_.pop_back();
  if (stack_.empty()) return;  // started inside this call: no entry time
  ModuleInfo& mi = modules_[index];
  mi.calls += 1;
  mi.ns += std::chrono::duration<double, std::nano>(now - stack_.back().second).count();
  stack_.pop_back();
}

void Profiler::step_pre(optim::Optimizer& o) {
  if (!running_) return;
  const Clock::time_point now = Clock::now();
  ++events_;
  flush_pending();
  charge(Phase::Other, kOutside, lap(now));
  in_step_ = true;
  step_name_ = o.name() + ".step (code between ops)";
  step_start_ = now;
}

void Profiler::step_post(optim::Optimizer&) {
  if (!running_ || !in_step_) return;
  charge(Phase::OptimizerStep, step_name_, lap(Clock::now()));
  in_step_ = false;
  ++steps_;
}

ProfileReport Profiler::report() const {
  // Work on copies: a report taken while running must not change the measurement.
  std::vector<Acc> rows = rows_;
  double wall_ns = wall_ns_;
  if (running_) {
    const Clock::time_point now = Clock::now();
    auto add = [&](Phase ph, const std::string& name, double ns) {
      for (Acc& a : rows)
        if (a.phase == ph && a.name == name) {
          a.calls += 1, a.ns += ns;
          return;
        }
      rows.push_back(Acc{name, ph, 1, ns});
    };
    for (const Pending& p : pending_) add(Phase::Backward, p.op, p.ns);
    add(Phase::Other, kOutside, std::chrono::duration<double, std::nano>(now - last_).count());
    wall_ns += std::chrono::duration<double, std::nano>(now - started_).count();
  }

  ProfileReport r;
  r.wall_ms = wall_ns * 1e-6;
  r.steps = steps_;
  r.events = events_;
  for (const ModuleInfo& mi : modules_) r.events += mi.calls;
  const double pct = r.wall_ms > 0.0 ? 100.0 / r.wall_ms : 0.0;

  double phase_ns[4] = {0, 0, 0, 0};
  int64_t phase_calls[4] = {0, 0, 0, 0};
  for (const Acc& a : rows) {
    const double ms = a.ns * 1e-6;
    r.ops.push_back(ProfileRow{a.name, phase_name(a.phase), a.calls, ms, ms * pct});
    phase_ns[static_cast<int>(a.phase)] += a.ns;
    phase_calls[static_cast<int>(a.phase)] += a.calls;
  }
  phase_calls[static_cast<int>(Phase::OptimizerStep)] = steps_;  // calls of a phase: its rows' calls, or steps
  for (int p = 0; p < 4; ++p) {
    const double ms = phase_ns[p] * 1e-6;
    r.phases.push_back(
        ProfileRow{phase_name(static_cast<Phase>(p)), phase_name(static_cast<Phase>(p)), phase_calls[p], ms, ms * pct});
  }
  for (const ModuleInfo& mi : modules_) {
    if (mi.calls == 0) continue;
    const double ms = mi.ns * 1e-6;
    r.modules.push_back(ProfileRow{mi.label, "", mi.calls, ms, ms * pct});
  }
  sort_rows(r.phases);
  sort_rows(r.modules);
  sort_rows(r.ops);
  return r;
}

}  // namespace gradsleuth::debug
