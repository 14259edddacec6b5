// W8 memory report: an op observer that remembers every storage the forward
// touches, the live-bytes counters of core/storage.h, and the tables (memory.h). And over a run, the
// autograd nodes alive after each optimizer step: a count that keeps growing is a loop that keeps each
// step's graph.
#include "debug/checks/workflow/memory.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <set>
#include <sstream>
#include <unordered_map>

#include "core/autograd.h"
#include "core/backend.h"
#include "core/format.h"
#include "core/observer.h"
#include "debug/checks/check_util.h"
#include "debug/checks/run_check.h"
#include "debug/evidence/finding.h"

namespace gradsleuth::debug {

namespace {

// Remembers, for each storage an op read or wrote during the forward, a weak
// reference (the observer must not keep anything alive) and who made it.
class StorageTracker final : public OpObserver {
 public:
  struct Entry {
    std::weak_ptr<Storage> storage;
    std::string op;      // the op that produced it ("" if only read)
    std::string module;  // the innermost module running at that moment
    std::string shape, dtype;
  };

  void on_op(const OpEvent& e) override {
    if (e.output && e.output->defined()) see(*e.output, e.op);
    for (size_t i = 0; i < e.num_inputs; ++i)
      if (e.input(i).defined()) see(e.input(i), nullptr);
  }

  std::vector<std::string> module_stack;
  std::vector<Entry> entries;

 private:
  void see(const Tensor& t, const char* op) {
    const std::shared_ptr<Storage>& s = t.storage();
    if (!s) return;
    auto it = index_.find(s.get());
    if (it != index_.end()) {
      Entry& e = entries[it->second];
      if (!e.storage.expired()) {
        if (op && e.op.empty()) e.op = op;  // first seen as an input, now produced (in place)
        return;
      }
      // A freed storage whose address was reused: a new entry.
    }
    index_[s.get()] = entries.size();
    entries.push_back(Entry{s, op ? op : "", module_stack.empty() ? "(outside modules)" : module_stack.back(),
                            shape_str(t.shape()), dtype_name(t.dtype())});
  }
  std::unordered_map<const Storage*, size_t> index_;
};

MemoryRow tensor_row(const std::string& name, const Tensor& t) {
  return MemoryRow{name, "", shape_str(t.shape()), dtype_name(t.dtype()), static_cast<int64_t>(t.nbytes())};
}

// Sum of storage bytes, each storage once.
int64_t unique_bytes(const std::vector<Tensor>& ts) {
  std::set<const Storage*> seen;
  int64_t sum = 0;
  for (const Tensor& t : ts)
    if (t.defined() && seen.insert(t.storage().get()).second) sum += static_cast<int64_t>(t.storage()->nbytes());
  return sum;
}

std::string row_json(const MemoryRow& r) {
  return "{\"name\":" + json_str(r.name) + ",\"module\":" + json_str(r.module) + ",\"shape\":" + json_str(r.shape) +
         ",\"dtype\":" + json_str(r.dtype) + ",\"bytes\":" + std::to_string(r.bytes) + "}";
}

std::string rows_json(const std::vector<MemoryRow>& rows) {
  std::string s = "[";
  for (size_t i = 0; i < rows.size(); ++i) s += (i ? "," : "") + row_json(rows[i]);
  return s + "]";
}

std::string pad(const std::string& s, size_t w, bool right = false) {
  if (s.size() >= w) return s;
  return right ? std::string(w - s.size(), ' ') + s : s + std::string(w - s.size(), ' ');
}

}  // namespace

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  const bool neg = bytes < 0;
  double v = static_cast<double>(neg ? -bytes : bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) v /= 1024.0, ++u;
  if (u == 0) return str_printf("%s%lld B", neg ? "-" : "", static_cast<long long>(neg ? -bytes : bytes));
  return str_printf("%s%.1f %s", neg ? "-" : "", v, units[u]);
}

MemoryReport memory_report(nn::Module& model, const std::function<Tensor()>& forward_loss) {
  const char* op = "debug::memory_report";
  GS_CHECK(static_cast<bool>(forward_loss), op,
           "forward_loss is empty; pass a function that runs the model and "
           "returns the loss, e.g. [&] { return loss_fn(model(x), y); }");
  MemoryReport r;
  const auto named_params = model.named_parameters();
  const auto named_buffers = model.named_buffers();
  const DeviceType dev = named_params.empty() ? DeviceType::CPU : named_params.front().second.device().type;
  r.device = Device(dev).str();

  std::set<const Storage*> owned;  // parameter and buffer storages: never activations
  std::vector<Tensor> ps, bs;
  for (const auto& [name, p] : named_params) {
    r.parameters.push_back(tensor_row(name, p));
    ps.push_back(p);
    owned.insert(p.storage().get());
  }
  for (const auto& [name, b] : named_buffers) {
    if (!b.defined()) continue;
    r.buffers.push_back(tensor_row(name, b));
    bs.push_back(b);
    owned.insert(b.storage().get());
  }
  r.parameter_bytes = unique_bytes(ps);
  r.buffer_bytes = unique_bytes(bs);

  // Module paths, so each activation says where it was made.
  StorageTracker tracker;
  std::vector<std::pair<std::weak_ptr<nn::Module>, size_t>> hooks;
  std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>> modules;
  try {
    modules = model.named_modules();
  } catch (const std::bad_weak_ptr&) {
    // A model not owned by a shared_ptr: no module paths, everything else works.
  }
  for (auto& [path, m] : modules) {
    const std::string label = (path.empty() ? "(model)" : path) + " (" + m->type_name() + ")";
    hooks.emplace_back(m, m->register_forward_pre_hook([&tracker, label](nn::Module&, const Tensor&) {
      tracker.module_stack.push_back(label);
    }));
    hooks.emplace_back(m, m->register_forward_hook([&tracker](nn::Module&, const Tensor&, const Tensor&) {
      if (!tracker.module_stack.empty()) tracker.module_stack.pop_back();
    }));
  }
  auto remove_hooks = [&] {
    for (auto& [wm, h] : hooks)
      if (auto m = wm.lock()) m->remove_forward_hook(h);
    hooks.clear();
  };

  // 1. Start from no gradients; read the counters.
  model.zero_grad();
  const MemoryStats before = memory_stats(dev);
  r.baseline_bytes = before.current_bytes;
  reset_peak_memory(dev);

  // 2. The forward, observed.
  Tensor loss;
  try {
    ObserverGuard guard(&tracker);
    loss = forward_loss();
  } catch (...) {
    remove_hooks();
    throw;
  }
  remove_hooks();
  const MemoryStats after_forward = memory_stats(dev);
  r.held_after_forward = after_forward.current_bytes - before.current_bytes;

  GS_CHECK(loss.defined(), op, "forward_loss returned an undefined tensor; it must return the loss");
  GS_CHECK(loss.numel() == 1, op, "forward_loss returned ", loss.str(),
           "; it must return a one-element loss "
           "(reduce it with .mean() or .sum())");
  GS_CHECK(loss.requires_grad(), op, "the loss ", loss.str(),
           " does not require grad, so there is no graph to "
           "measure. Was the forward run under NoGradGuard, or are all parameters frozen?");

  // 3. What the graph holds.
  const Storage* loss_storage = loss.storage().get();
  r.loss_bytes = static_cast<int64_t>(loss.storage()->nbytes());
  for (const StorageTracker::Entry& e : tracker.entries) {
    std::shared_ptr<Storage> s = e.storage.lock();
    if (!s || owned.count(s.get()) || s.get() == loss_storage || s->device().type != dev) continue;
    MemoryRow row{e.op.empty() ? "(made outside ops)" : e.op, e.module, e.shape, e.dtype,
                  static_cast<int64_t>(s->nbytes())};
    if (s->serial() >= before.allocations) {
      r.activations.push_back(row);
      r.activation_bytes += row.bytes;
    } else {
      row.name = e.op.empty() ? "(input)" : e.op;
      r.inputs.push_back(row);
      r.input_bytes += row.bytes;
    }
  }
  std::stable_sort(r.activations.begin(), r.activations.end(),
                   [](const MemoryRow& a, const MemoryRow& b) { return a.bytes > b.bytes; });
  r.unseen_bytes = r.held_after_forward - r.activation_bytes - r.loss_bytes;

  // 4. The backward, then the peak and the gradients.
  loss.backward();
  r.peak_bytes = memory_stats(dev).peak_bytes;
  std::vector<Tensor> gs_;
  for (const auto& [name, p] : named_params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    r.gradients.push_back(tensor_row(name, g));
    gs_.push_back(g);
  }
  r.gradient_bytes = unique_bytes(gs_);
  if (has_backend(dev)) r.allocator = backend_for(Device(dev)).memory_summary();
  return r;
}

std::string MemoryReport::str() const {
  std::ostringstream os;
  auto line = [&](const std::string& what, int64_t b, const std::string& note) {
    os << "  " << pad(what, 20) << pad(format_bytes(b), 12, true) << "  " << note << "\n";
  };
  os << "memory report (" << device << ", bytes of tensor storage)\n";
  line("parameters", parameter_bytes, std::to_string(parameters.size()) + " tensors");
  if (!buffers.empty()) line("buffers", buffer_bytes, std::to_string(buffers.size()) + " tensors");
  line("gradients", gradient_bytes, std::to_string(gradients.size()) + " tensors, after one backward");
  line("saved activations", activation_bytes,
       std::to_string(activations.size()) + " tensors held by the autograd graph after the forward");
  if (input_bytes) line("inputs", input_bytes, "tensors from before the forward that it read (the batch)");
  line("loss", loss_bytes, "");
  if (unseen_bytes) line("unseen", unseen_bytes, "allocated by the forward, still alive, read or made by no op");
  line("peak", peak_bytes, "live bytes at the highest point of forward + backward");
  line("  above baseline", peak_above_baseline(),
       "the peak minus what was alive before the forward (" + format_bytes(baseline_bytes) + ")");
  if (!allocator.empty()) os << "  " << allocator << "\n";

  auto table = [&](const std::vector<MemoryRow>& rows, const char* heading, bool with_module, size_t max_rows) {
    if (rows.empty()) return;
    os << "\n" << heading << "\n";
    size_t w = 12, wm = 10;
    for (const MemoryRow& r : rows) w = std::max(w, r.name.size() + 2), wm = std::max(wm, r.module.size() + 2);
    const size_t n = std::min(rows.size(), max_rows);
    for (size_t i = 0; i < n; ++i) {
      const MemoryRow& r = rows[i];
      os << "  " << (with_module ? pad(r.module, wm) : "") << pad(r.name, w) << pad(r.shape, 18) << pad(r.dtype, 9)
         << pad(format_bytes(r.bytes), 11, true) << "\n";
    }
    if (rows.size() > n) os << "  ... " << rows.size() - n << " more (json() lists them all)\n";
  };
  table(parameters, "parameters", false, 50);
  table(buffers, "buffers", false, 50);
  table(gradients, "gradients", false, 50);
  table(activations, "saved activations (module, op that made it; largest first)", true, 30);
  table(inputs, "inputs", true, 10);
  return os.str();
}

std::string MemoryReport::json() const {
  std::ostringstream os;
  os << "{\"device\":" << json_str(device) << ",\"parameter_bytes\":" << parameter_bytes
     << ",\"buffer_bytes\":" << buffer_bytes << ",\"gradient_bytes\":" << gradient_bytes
     << ",\"activation_bytes\":" << activation_bytes << ",\"input_bytes\":" << input_bytes
     << ",\"loss_bytes\":" << loss_bytes << ",\"held_after_forward\":" << held_after_forward
     << ",\"unseen_bytes\":" << unseen_bytes << ",\"baseline_bytes\":" << baseline_bytes
     << ",\"peak_bytes\":" << peak_bytes << ",\"peak_above_baseline\":" << peak_above_baseline()
     << ",\"parameters\":" << rows_json(parameters) << ",\"buffers\":" << rows_json(buffers)
     << ",\"gradients\":" << rows_json(gradients) << ",\"activations\":" << rows_json(activations)
     << ",\"inputs\":" << rows_json(inputs) << "}";
  return os.str();
}

// ---- W8 over the run: graphs kept from step to step ------------------------------------------

std::vector<Finding> check_graph_retention(const std::vector<std::pair<int64_t, int64_t>>& live, int64_t min_steps,
                                           double min_growth) {
  // The longest stretch of steps over which the count rose at every step.
  size_t best_lo = 0, best_hi = 0, lo = 0;
  for (size_t i = 1; i < live.size(); ++i) {
    if (live[i].second <= live[i - 1].second || live[i].first != live[i - 1].first + 1) lo = i;
    if (i - lo > best_hi - best_lo) best_lo = lo, best_hi = i;
  }
  if (live.empty() || static_cast<int64_t>(best_hi - best_lo) + 1 < min_steps) return {};
  const auto [s0, n0] = live[best_lo];
  const auto [s1, n1] = live[best_hi];
  if (n0 <= 0 || static_cast<double>(n1) < min_growth * static_cast<double>(n0)) return {};
  const double per_step = static_cast<double>(n1 - n0) / static_cast<double>(s1 - s0);
  Finding f =
      detail::make("W8", Severity::Warning,
                   "the autograd graph alive after the optimizer's step grew at each of " + detail::num(s1 - s0 + 1) +
                       " steps in a row, from " + detail::num(n0) + " nodes (step " + detail::num(s0) + ") to " +
                       detail::num(n1) + " (step " + detail::num(s1) + "): the loop keeps every step's graph");
  f.kind = Kind::GraphsRetained;
  f.evidence = {{"steps in a row with more nodes alive", static_cast<double>(s1 - s0 + 1),
                 ">= " + detail::num(min_steps) + " and"},
                {"nodes alive at the stretch's end / at its start", static_cast<double>(n1) / static_cast<double>(n0),
                 ">= " + fmt_num(min_growth) + " warns"},
                {"nodes added per step", per_step, ""}};
  f.cause =
      "a tensor that requires grad is kept from step to step: the loss stored in a list or summed into a running "
      "total (total += loss, not loss.item()), outputs kept for a metric without detach(), or a recurrent hidden "
      "state carried into the next batch without detach(). Each kept graph holds the activations it saved: memory "
      "grows until it runs out, and a carried hidden state makes backward reach into every earlier batch";
  f.fix =
      "keep numbers, not graphs: loss.item() (or loss.detach()) for logs and totals, outputs.detach() for metrics; "
      "detach() a hidden state carried between batches";
  return {f};
}

namespace {

class GraphRetentionRunCheck final : public RunCheck {
 public:
  std::string ids() const override { return "W8"; }
  uint32_t events() const override { return RunEvent::AfterStep | RunEvent::Finish; }
  void after_step(RunContext& c, bool) override {
    if (live_.size() < kMaxSteps) live_.emplace_back(c.steps, Node::live());
  }
  void finish(RunContext& c) override {
    c.add_all(check_graph_retention(live_));
    c.note_ran("W8");
  }

 private:
  static constexpr size_t kMaxSteps = 1 << 20;     // 16 MiB of counts at most
  std::vector<std::pair<int64_t, int64_t>> live_;  // (step, nodes alive after it)
};

}  // namespace

std::unique_ptr<RunCheck> make_graph_retention_run_check(const MonitorOptions&) {
  return std::make_unique<GraphRetentionRunCheck>();
}

}  // namespace gradsleuth::debug
