// Helpers of the diagnosis tests (test_debug_diagnosis, test_debug_diagnosis_twins): loaders over
// tensors, a training loop written as a user writes it with a debug::Session attached, and the
// lead as `--json` gives it.
#pragma once
#include <doctest/doctest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gradsleuth.h>

#include "json_mini.h"

namespace dtest {

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
  return loaders(all.x.narrow(0, 0, 480), all.y.narrow(0, 0, 480), all.x.narrow(0, 480, 120),
                 all.y.narrow(0, 480, 120), seed);
}

// The user's own loop: `epochs` passes, zero_grad / forward / loss / backward / step; an error
// the loop raises is handed to the session (Session::error), as a user's catch would.
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
      }
      session.epoch();
    }
  } catch (const std::exception& ex) {
    session.error(ex);
  }
  return session.finish();
}

// The lead as `--json` writes it.
inline json_mini::Value lead_of(const dbg::RunReport& r) { return json_mini::parse(r.findings.lead_json()); }

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

}  // namespace dtest
