// Diagnosis (see diagnosis.h): the search that turns a report's findings into chains of explanation
// and a lead, over the tables of causes and symptoms (causes.cpp).
#include "debug/diagnosis/diagnosis.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "debug/evidence/catalogue.h"

namespace gradsleuth::debug {

namespace {

// A finding's place in time, for ordering.
std::pair<int, int64_t> when(const Finding& f) { return finding_time(f); }

int place(const Finding& f) { return (f.op.empty() ? 0 : 2) + (f.module.empty() ? 0 : 1); }

// How well finding b's location matches a's: the same parameter, a module containing it, or nothing.
int location_match(const Finding& a, const Finding& b) {
  if (!a.parameter.empty() && a.parameter == b.parameter) return 2;
  auto path = [](const std::string& m) { return m.substr(0, m.find(' ')); };
  if (!a.parameter.empty() && !b.module.empty() && a.parameter.rfind(path(b.module) + ".", 0) == 0) return 1;
  if (!a.module.empty() && a.module == b.module) return 2;
  return 0;
}

std::string label(const Cause& c) { return (c.check.empty() ? "" : c.check + ": ") + c.name; }

// The causes only a data-parallel run can have: their checks compare ranks.
bool data_parallel_only(const Cause& c) {
  for (const char* id : {"D11", "L8", "M21", "M22", "O7", "W9"})
    if (c.check == id) return true;
  return false;
}

// The causes only a run in 16 bits can have: their checks watch 16-bit values (M28's range watch) or a
// loss scaler (O10), and run only where there are some. In a float32 run they are no candidates.
bool reduced_precision_only(const Cause& c) { return c.check == "M28" || c.check == "O10"; }

// A cause that cannot apply to this run: its check runs only in a kind of run this one is not.
bool inapplicable(const Cause& c, const Report& r) {
  return (data_parallel_only(c) || reduced_precision_only(c)) && !r.ran(c.check);
}

// The causes a finding's symptoms can have, in order, each once.
std::vector<const Cause*> candidates_of(const Finding& f) {
  std::vector<const Cause*> out;
  for (const Symptom& s : diagnosis_symptoms()) {
    if (!s.shows(f)) continue;
    for (const std::string& id : s.causes) {
      const Cause* c = find_cause(id);
      if (c && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
    }
  }
  return out;
}

}  // namespace

const Cause* fault_confirmed_by(const Finding& f) {
  for (const Cause& c : diagnosis_causes())
    if (c.fault && c.confirms(f)) return &c;
  return nullptr;
}

namespace {
std::atomic<uint64_t> g_analyses{0};
}  // namespace

uint64_t analyse_causes_runs() { return g_analyses.load(); }

const CauseAnalysis& Report::diagnosis() const {
  if (!diagnosis_) diagnosis_ = std::make_shared<const CauseAnalysis>(analyse_causes(*this));
  return *diagnosis_;
}

CauseAnalysis analyse_causes(const Report& r) {
  ++g_analyses;
  const std::vector<Finding>& fs = r.findings();
  const size_t n = fs.size();
  CauseAnalysis a;
  a.parent.assign(n, -1);
  a.root.assign(n, -1);
  a.because.assign(n, "");
  a.cause_text.assign(n, "");
  a.fix_text.assign(n, "");
  std::vector<const Cause*> via(n, nullptr);  // the cause through which the parent explains it

  // 1. Each finding's parent: the first candidate cause (in the table's order) that another
  //    firing finding confirms. A finding is never explained through a cause it confirms
  //    itself (the same fault seen twice is grouped in step 3), and a non-finite source is
  //    explained by another source only at the same time or place, or by the inputs' own NaN
  //    (a second fault later, elsewhere, is its own root).
  for (size_t i = 0; i < n; ++i) {
    const Finding& f = fs[i];
    if (!f.fires()) continue;
    for (const Cause* c : candidates_of(f)) {
      if (c->confirms(f)) continue;
      int64_t best = -1;
      auto better = [&](size_t j, size_t k) {  // is j a better explanation than k?
        const int mj = location_match(f, fs[j]), mk = location_match(f, fs[k]);
        if (mj != mk) return mj > mk;
        const bool bj = when(fs[j]) <= when(f), bk = when(fs[k]) <= when(f);
        if (bj != bk) return bj;  // at or before it first
        if (when(fs[j]) != when(fs[k])) return bj ? when(fs[j]) > when(fs[k]) : when(fs[j]) < when(fs[k]);
        if (place(fs[j]) != place(fs[k])) return place(fs[j]) > place(fs[k]);
        return j < k;
      };
      for (size_t j = 0; j < n; ++j) {
        if (j == i || !fs[j].fires() || !c->confirms(fs[j])) continue;
        // A second non-finite source at another time is a fault of its own, unless it is the same
        // place (M12 and W4 on one module) or the inputs themselves (D2) feed it.
        if (nonfinite_source(f) && nonfinite_source(fs[j]) && when(fs[j]) != when(f) && fs[j].check != "D2" &&
            location_match(f, fs[j]) == 0)
          continue;
        if (c->local && (!f.parameter.empty() || !f.module.empty()) && location_match(f, fs[j]) == 0) continue;
        if (best < 0 || better(j, static_cast<size_t>(best))) best = static_cast<int64_t>(j);
      }
      if (best >= 0) {
        a.parent[i] = best;
        via[i] = c;
        break;
      }
    }
  }

  // 2. Roots: follow the parents; a cycle is cut at the finding where it closes.
  for (size_t i = 0; i < n; ++i) {
    if (!fs[i].fires()) continue;
    std::set<size_t> seen;
    size_t at = i;
    while (a.parent[at] >= 0 && !seen.count(at)) {
      seen.insert(at);
      at = static_cast<size_t>(a.parent[at]);
    }
    if (seen.count(at)) {  // a cycle: the finding that closes it becomes a root
      a.parent[at] = -1;
      via[at] = nullptr;
    }
    a.root[i] = static_cast<int64_t>(at);
  }
  for (size_t i = 0; i < n; ++i)  // the cut may have changed earlier roots
    if (fs[i].fires()) {
      size_t at = i;
      while (a.parent[at] >= 0) at = static_cast<size_t>(a.parent[at]);
      a.root[i] = static_cast<int64_t>(at);
    }

  // 3. The same fault seen twice (M12 and W4 on one op, M5 on every parameter below a detach,
  //    O6 and its probe) is one root, and so is one unexplained symptom on several layers at one
  //    time: the later ones hang under the first.
  {
    std::vector<size_t> roots;
    for (size_t i = 0; i < n; ++i)
      if (fs[i].fires() && a.root[i] == static_cast<int64_t>(i)) roots.push_back(i);
    for (size_t x = 0; x < roots.size(); ++x) {
      const size_t i = roots[x];
      if (a.root[i] != static_cast<int64_t>(i)) continue;
      const Cause* ci = fault_confirmed_by(fs[i]);
      for (size_t y = x + 1; y < roots.size(); ++y) {
        const size_t j = roots[y];
        if (a.root[j] != static_cast<int64_t>(j)) continue;
        // A second non-finite source at another time is a fault of its own; other faults and
        // symptoms are the same one whenever they are seen.
        if (when(fs[j]) != when(fs[i]) && (!ci || (nonfinite_source(fs[i]) && location_match(fs[i], fs[j]) == 0)))
          continue;
        // A fault: the same cause. An unexplained symptom: the same check (O1 on every layer).
        if (ci ? fault_confirmed_by(fs[j]) != ci : (fault_confirmed_by(fs[j]) || fs[j].check != fs[i].check)) continue;
        a.parent[j] = static_cast<int64_t>(i);
        via[j] = ci;
        for (size_t k = 0; k < n; ++k)
          if (a.root[k] == static_cast<int64_t>(j)) a.root[k] = static_cast<int64_t>(i);
      }
    }
  }

  // 4. The roots in lead order: a confirmed fault before an unexplained symptom, then the one
  //    that explains the most distinct checks, then the earliest, errors first, the one that
  //    names an op or module, report order.
  std::map<size_t, std::set<std::string>> explained;
  for (size_t i = 0; i < n; ++i)
    if (fs[i].fires() && a.root[i] >= 0 && a.root[i] != static_cast<int64_t>(i))
      explained[static_cast<size_t>(a.root[i])].insert(fs[i].check);
  for (size_t i = 0; i < n; ++i)
    if (fs[i].fires() && a.root[i] == static_cast<int64_t>(i)) a.roots.push_back(i);
  std::sort(a.roots.begin(), a.roots.end(), [&](size_t x, size_t y) {
    const bool fx = fault_confirmed_by(fs[x]) != nullptr, fy = fault_confirmed_by(fs[y]) != nullptr;
    if (fx != fy) return fx;
    const size_t ex = explained[x].size(), ey = explained[y].size();
    if (ex != ey) return ex > ey;
    if (when(fs[x]) != when(fs[y])) return when(fs[x]) < when(fs[y]);
    if (fs[x].severity != fs[y].severity) return fs[x].severity > fs[y].severity;
    if (place(fs[x]) != place(fs[y])) return place(fs[x]) > place(fs[y]);
    return x < y;
  });

  // 5. The words: "because ..." for every explained finding, and for every symptom the causes
  //    its probes did not rule out.
  auto short_title = [&](size_t j) { return fs[j].title + " (" + fs[j].check + ")"; };
  for (size_t i = 0; i < n; ++i) {
    if (!fs[i].fires()) continue;
    if (a.parent[i] >= 0) {
      const size_t p = static_cast<size_t>(a.parent[i]);
      const bool same = via[i] ? via[i]->fault && fault_confirmed_by(fs[i]) == via[i] : true;
      a.because[i] = same ? "the same " + std::string(via[i] ? "fault" : "symptom") + " as " + short_title(p)
                          : "because " + short_title(p);
      const size_t root = static_cast<size_t>(a.root[i]);
      if (!same && !fault_confirmed_by(fs[i])) {
        const Cause* rc = fault_confirmed_by(fs[root]);
        a.cause_text[i] = "confirmed: " + std::string(rc ? rc->name + ": " : "") + short_title(root) +
                          (root == p ? "" : ", through " + short_title(p));
        if (!fs[root].fix.empty()) a.fix_text[i] = "fix the cause: " + fs[root].fix;
      }
      continue;
    }
    const std::vector<const Cause*> cands = candidates_of(fs[i]);
    if (cands.empty()) continue;
    std::vector<std::string> open, out;
    for (const Cause* c : cands) {
      if (c->confirms(fs[i])) continue;
      if (!c->fault) continue;                                   // symptoms as causes: nothing to rule out on their own
      if (inapplicable(*c, r)) continue;                         // not a data-parallel run, or not in 16 bits
      const bool seen = std::any_of(fs.begin(), fs.end(), [&](const Finding& g) { return c->confirms(g); });
      if (seen)
        open.push_back(label(*c) + " (seen, but not where or when this happened)");
      else
        (c->check.empty() || !r.ran(c->check) ? open : out).push_back(label(*c));
    }
    std::string t = "no probe confirmed a cause";
    if (!open.empty()) {
      t += "; candidates not ruled out, most likely first: ";
      for (size_t k = 0; k < open.size(); ++k) t += (k ? "; " : "") + open[k];
    }
    if (!out.empty()) {
      t += ". Ruled out (their probes ran and were silent): ";
      for (size_t k = 0; k < out.size(); ++k) t += (k ? "; " : "") + out[k];
    }
    a.cause_text[i] = t;
  }

  // 6. The lead.
  if (!a.roots.empty()) {
    Lead l;
    l.index = a.roots.front();
    const Finding& f = fs[l.index];
    l.check = f.check;
    const Cause* c = fault_confirmed_by(f);
    l.confirmed = c != nullptr;
    l.cause = c ? c->id : "";
    std::set<std::string> by;
    l.confirmed_by.push_back(f.check);
    by.insert(f.check);
    for (size_t i = 0; i < n; ++i) {
      if (i == l.index || a.root[i] != static_cast<int64_t>(l.index)) continue;
      l.explains.push_back(i);
      if (!c || !c->confirms(fs[i])) continue;
      // The lr / 10 probe's finding is named with its probe: O6 saw the symptom, the probe
      // confirmed the cause.
      const std::string name = fs[i].kind == Kind::LrProbeConfirms ? fs[i].check + " probe (lr / 10)" : fs[i].check;
      if (by.insert(name).second) l.confirmed_by.push_back(name);
    }
    // Ruled out: for everything it explains, the candidates ranked before the cause that won
    // (those a physician would have suspected first) whose probe ran and was silent. For an
    // unconfirmed lead, its own candidates: ruled out when their probe ran, else left open.
    std::set<std::string> out_seen, open_seen;
    auto rule_out = [&](const Cause* k) {
      if (!k->fault || k == c || k->check.empty()) return;
      if (inapplicable(*k, r)) return;
      if (std::any_of(fs.begin(), fs.end(), [&](const Finding& g) { return k->confirms(g); })) return;
      if (r.ran(k->check)) {
        if (out_seen.insert(k->id).second) l.ruled_out.push_back(label(*k));
      } else if (!l.confirmed && open_seen.insert(k->id).second) {
        l.candidates.push_back(label(*k));
      }
    };
    for (size_t i : l.explains) {
      if (!via[i] || static_cast<size_t>(a.parent[i]) == i) continue;
      for (const Cause* k : candidates_of(fs[i])) {
        if (k == via[i]) break;
        if (!k->confirms(fs[i])) rule_out(k);
      }
    }
    if (!l.confirmed)
      for (const Cause* k : candidates_of(f))
        if (!k->confirms(f)) rule_out(k);
    const std::string n_explained = l.explains.empty()
                                        ? std::string()
                                        : "; it explains " + std::to_string(l.explains.size()) + " other finding" +
                                              (l.explains.size() == 1 ? "" : "s") + " (" +
                                              std::to_string(explained[l.index].size()) + " check" +
                                              (explained[l.index].size() == 1 ? "" : "s") + ")";
    l.why = l.confirmed ? "a confirmed cause: " + c->name + ", seen by " + f.check + n_explained
                        : "no probe confirmed a cause of this symptom" + n_explained;
    a.lead = std::move(l);
  }
  return a;
}

std::string Lead::str(const Report& r) const {
  std::ostringstream os;
  const Finding& f = r.findings()[index];
  os << (confirmed ? "Diagnosis: " : "Diagnosis (unconfirmed): ") << f.title << " [" << f.check << "]\n";
  os << "  why it leads: " << why << "\n";
  if (!confirmed_by.empty() && confirmed) {
    os << "  confirmed by: ";
    for (size_t i = 0; i < confirmed_by.size(); ++i) os << (i ? ", " : "") << check_label(confirmed_by[i]);
    os << "\n";
  }
  if (!candidates.empty()) {
    os << "  candidates left, most likely first: ";
    for (size_t i = 0; i < candidates.size(); ++i) os << (i ? "; " : "") << candidates[i];
    os << "\n";
  }
  if (!ruled_out.empty()) {
    os << "  ruled out: ";
    for (size_t i = 0; i < ruled_out.size(); ++i) os << (i ? "; " : "") << ruled_out[i];
    os << "\n";
  }
  return os.str();
}

std::string Lead::json() const {
  auto list = [](const std::vector<std::string>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + json_str(v[i]);
    return s + "]";
  };
  std::string ex = "[";
  for (size_t i = 0; i < explains.size(); ++i) ex += (i ? "," : "") + std::to_string(explains[i]);
  ex += "]";
  return "{\"index\":" + std::to_string(index) + ",\"check\":" + json_str(check) +
         ",\"confirmed\":" + (confirmed ? "true" : "false") + ",\"cause\":" + json_str(cause) +
         ",\"confirmed_by\":" + list(confirmed_by) + ",\"ruled_out\":" + list(ruled_out) +
         ",\"candidates\":" + list(candidates) + ",\"explains\":" + ex + ",\"why\":" + json_str(why) + "}";
}

}  // namespace gradsleuth::debug
