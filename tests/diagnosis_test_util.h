// Helpers of the diagnosis and twin tests (test_debug_diagnosis*, the range, scaler and precision twins): loaders over
// tensors, a training loop written as a user writes it with a debug::Session attached, and the
// lead as `--json` gives it.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include <gradsleuth.h>

#include "json_mini.h"

namespace dtest {

// Linear -> ReLU -> Linear -> ReLU -> Linear (in -> 32 -> 32 -> out), written by hand.
struct Mlp : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2, fc3;
  std::shared_ptr<nn::ReLU> act1 = register_module("act1", std::make_shared<nn::ReLU>());
  std::shared_ptr<nn::ReLU> act2 = register_module("act2", std::make_shared<nn::ReLU>());
  explicit Mlp(int64_t in = 6, int64_t out = 3) : Module("Mlp") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(in, 32));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 32));
    fc3 = register_module("fc3", std::make_shared<nn::Linear>(32, out));
  }
  Tensor forward(const Tensor& x) override { return (*fc3)((*act2)((*fc2)((*act1)((*fc1)(x))))); }
};

// A regression MLP: two hidden layers of `hidden` ReLU units, one output.
struct Regressor : nn::Module {
  std::shared_ptr<nn::Sequential> net;
  explicit Regressor(int64_t in = 6, int64_t hidden = 64) : Module("Regressor") {
    net = register_module(
        "net", std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(in, hidden), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(hidden, hidden),
                                                std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(hidden, 1)));
  }
  Tensor forward(const Tensor& x) override { return (*net)(x); }
};

// Whether any finding of the run satisfies `pred`.
template <class Pred>
bool any_finding(const dbg::RunReport& r, Pred pred) {
  return std::any_of(r.findings.findings().begin(), r.findings.findings().end(), pred);
}

// The run's first finding of `check` with this kind; nullptr when there is none.
inline const dbg::Finding* first_of(const dbg::RunReport& r, const char* check, dbg::Kind k) {
  for (const dbg::Finding& f : r.findings.findings())
    if (f.is(check, k)) return &f;
  return nullptr;
}

struct Split {
  std::shared_ptr<nn::DataLoader> train, val;
};

// Train and validation loaders over the given tensors (train shuffled, val in one batch).
inline Split loaders(const Tensor& xtr, const Tensor& ytr, const Tensor& xva, const Tensor& yva, uint64_t seed = 3) {
  Split s;
  s.train = std::make_shared<nn::DataLoader>(std::make_shared<nn::TensorDataset>(xtr, ytr),
                                             nn::DataLoaderOptions().batch_size(32).shuffle(true).seed(seed));
  s.val = std::make_shared<nn::DataLoader>(std::make_shared<nn::TensorDataset>(xva, yva),
                                           nn::DataLoaderOptions().batch_size(xva.size(0)));
  return s;
}

// Three Gaussian blobs in 6 dimensions: the first 480 rows for training, the next 120 for validation.
inline Split split(uint64_t seed = 3, double spread = 1.0) {
  const XY all = blobs(200, 3, 6, seed, spread);
  return loaders(all.x.narrow(0, 0, 480), all.y.narrow(0, 0, 480), all.x.narrow(0, 480, 120), all.y.narrow(0, 480, 120),
                 seed);
}

// The user's own loop: `epochs` passes, zero_grad / forward / loss / backward / step; an error
// the loop raises is handed to the session (Session::error), as a user's catch would. A loss
// function (no nn::Loss module for the session to hear) hands each step's loss to the session
// (Session::step).
template <class Loss>
dbg::RunReport train_own_loop(nn::Module& model, Loss& loss, gs::optim::Optimizer& opt, const Split& d, int epochs,
                              dbg::DiagnoseOptions o = {}) {
  dbg::Session session(model, loss, opt, {.train = d.train.get(), .val = d.val.get()}, o);
  try {
    for (int e = 0; e < epochs; ++e) {
      for (const nn::Batch& b : *d.train) {
        opt.zero_grad();
        Tensor l = loss(model(b.x), b.y);
        l.backward();
        opt.step();
        if constexpr (!std::is_base_of_v<nn::Loss, Loss>) session.step(l);
      }
      session.epoch();
    }
  } catch (const std::exception& ex) {
    session.error(ex);
  }
  return session.finish();
}

// The float32 twin of the 16-bit twins: the same MLP and data, nothing in 16 bits, so the
// precision checks (M28, M29, M30) must not run at all.
inline dbg::RunReport run_float32_mlp() {
  gs::manual_seed(4);
  const Split d = split(3, 2.0);
  nn::CrossEntropyLoss ce;
  auto model = std::make_shared<Mlp>();
  gs::optim::SGD opt(model->parameters(), gs::optim::SGDOptions(0.05));
  return train_own_loop(*model, ce, opt, d, 2);
}

// M28's float16 twin, shared by the range and precision twin tests: the loss weighted by 1e-6 (a
// term among others, in the user's units) under float16 autocast, Adam (whose step does not depend
// on the gradient's scale). Without a scaler (bug) the gradients, around 1e-8, are below float16's
// 2^-24 and flush to zero; with a GradScaler (clean) they are multiplied by 65536 during backward
// and stay in range. O1 is told the float32 gradients are small by design.
inline dbg::RunReport run_fp16_weighted(bool bug, const std::string& report_dir = "") {
  gs::manual_seed(4);
  const Split d = split(3, 2.0);
  nn::CrossEntropyLoss ce;
  auto model = std::make_shared<Mlp>();
  gs::optim::Adam opt(model->parameters(), gs::optim::AdamOptions(1e-2).eps(1e-14));
  gs::optim::GradScaler scaler;
  dbg::DiagnoseOptions o;
  o.monitor.optim.vanishing_grad_norm = 1e-13;
  o.report_dir = report_dir;
  dbg::Session session(*model, ce, opt, {.train = d.train.get(), .val = d.val.get()}, o);
  if (!bug) session.watch(scaler);
  for (int e = 0; e < 4; ++e) {
    for (const nn::Batch& b : *d.train) {
      opt.zero_grad();
      Tensor l;
      {
        auto ac = gs::autocast(gs::kFloat16);
        l = ce((*model)(b.x), b.y) * 1e-6;
      }
      if (bug) {
        l.backward();
        opt.step();
      } else {
        scaler.scale(l).backward();
        scaler.step(opt);
        scaler.update();
      }
    }
    session.epoch();
  }
  return session.finish();
}

// The lead as `--json` writes it.
inline json_mini::Value lead_of(const dbg::RunReport& r) { return json_mini::parse(r.findings.lead_json()); }
// The lead's cause id ("" when there is no lead or it names none).
inline std::string lead_cause(const dbg::RunReport& r) {
  const json_mini::Value lead = lead_of(r);
  const json_mini::Value* c = lead.kind == json_mini::Value::Object ? lead.get("cause") : nullptr;
  return c ? c->str : "";
}

inline std::vector<std::string> strings(const json_mini::Value* v) {
  std::vector<std::string> out;
  if (v && v->kind == json_mini::Value::Array)
    for (const auto& e : v->arr) out.push_back(e.str);
  return out;
}

// The checks of the findings the lead explains.
inline std::set<std::string> explained_checks(const dbg::RunReport& r) {
  const dbg::CauseAnalysis a = dbg::analyse_causes(r.findings);
  std::set<std::string> out;
  if (a.lead)
    for (size_t i : a.lead->explains) out.insert(r.findings.findings()[i].check);
  return out;
}

// ---- the assertions every twin makes -----------------------------------------------------

// The symptom findings (a stuck loss, vanishing gradients, NaN, ...) that do not hang under the
// lead: each as "check: title".
std::vector<std::string> symptoms_not_under_lead(const dbg::RunReport& r) {
  const dbg::CauseAnalysis a = dbg::analyse_causes(r.findings);
  std::vector<std::string> out;
  const auto& fs = r.findings.findings();
  for (size_t i = 0; i < fs.size(); ++i) {
    if (!fs[i].fires()) continue;
    // Another probe's finding of the lead's own fault is evidence, not a symptom.
    const dbg::Cause* c = a.lead ? dbg::find_cause(a.lead->cause) : nullptr;
    if (c && c->confirms(fs[i])) continue;
    const bool symptom = std::any_of(dbg::diagnosis_symptoms().begin(), dbg::diagnosis_symptoms().end(),
                                     [&](const dbg::Symptom& s) { return s.shows(fs[i]); });
    if (!symptom) continue;
    const bool under = a.lead && (i == a.lead->index || std::find(a.lead->explains.begin(), a.lead->explains.end(),
                                                                  i) != a.lead->explains.end());
    if (!under) out.push_back(fs[i].check + ": " + fs[i].title);
  }
  return out;
}

// The buggy twin: the lead is `cause`, found by `check`, confirmed, its check first among what
// confirmed it, and every symptom of the run hangs under it: among them the findings of the
// checks `symptoms` that this bug is known to set off.
void expect_lead(const dbg::RunReport& r, const std::string& check, const std::string& cause,
                 std::initializer_list<const char*> symptoms = {}) {
  INFO(r.str());
  const json_mini::Value lead = lead_of(r);
  REQUIRE(lead.kind == json_mini::Value::Object);
  CHECK(lead.get("check")->str == check);
  CHECK(lead.get("confirmed")->b);
  CHECK(lead.get("cause")->str == cause);
  const std::vector<std::string> by = strings(lead.get("confirmed_by"));
  REQUIRE_FALSE(by.empty());
  CHECK(by.front() == lead.get("check")->str);
  for (const std::string& s : symptoms_not_under_lead(r)) CHECK_MESSAGE(false, "symptom not under the lead: " << s);
  const std::set<std::string> ex = explained_checks(r);
  for (const char* s : symptoms) CHECK_MESSAGE(ex.count(s), s << " does not hang under the lead");
}

// The clean twin: nothing fires, no lead.
void expect_clean(const dbg::RunReport& r) {
  CHECK_MESSAGE(r.fired_checks().empty(), r.str());
  CHECK_MESSAGE(lead_of(r).kind == json_mini::Value::Null, r.str());
}

}  // namespace dtest
