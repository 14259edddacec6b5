// Helpers for the debug tests: the bug zoo's reference MLP at test size, small
// datasets as tensors, and finding lookups.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/generator.h"
#include "debug/evidence/finding.h"
#include "fashion_mnist_required.h"
#include "nn/nn.h"

namespace dtest {

using gs::Tensor;
namespace nn = gs::nn;
namespace dbg = gs::debug;

// The zoo's MLP with small sizes:  x (B, D) -> (B, C)
//   0 Flatten, 1 Linear(D, H), 2 ReLU, 3 BatchNorm1d(H), 4 Residual(ReLU, Linear(H, H)),
//   5 Residual(ReLU, Linear(H, H)), 6 ReLU, 7 Dropout(0.2), 8 Linear(H, C)
inline std::shared_ptr<nn::Sequential> mlp(int64_t D, int64_t H, int64_t C, uint64_t seed = 1) {
  gs::manual_seed(seed);
  auto block = [H] {
    return std::make_shared<nn::Residual>(
        std::make_shared<nn::Sequential>(std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(H, H)));
  };
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(D, H),
                                          std::make_shared<nn::ReLU>(), std::make_shared<nn::BatchNorm1d>(H), block(),
                                          block(), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.2),
                                          std::make_shared<nn::Linear>(H, C));
}

// Gaussian blobs: x (C * n, D) float32, y (C * n) int64 in a fixed shuffled order.
struct XY {
  Tensor x, y;
};
inline XY blobs(int64_t n_per_class, int64_t C, int64_t D, uint64_t seed = 3, double spread = 1.0) {
  auto d = nn::make_blobs(n_per_class, C, D, spread, seed);
  gs::Generator g(seed + 1);
  Tensor perm = gs::randperm(d->size(), &g);
  return {d->x().index_select(0, perm), d->y().index_select(0, perm)};
}

// The first finding of `check` with at least the given severity (nullptr if none).
inline const dbg::Finding* find(const std::vector<dbg::Finding>& fs, const std::string& check,
                                dbg::Severity at_least = dbg::Severity::Warning) {
  for (const auto& f : fs)
    if (f.check == check && f.severity >= at_least) return &f;
  return nullptr;
}

inline bool fires(const std::vector<dbg::Finding>& fs) {
  for (const auto& f : fs)
    if (f.fires()) return true;
  return false;
}

// The value of the evidence named `name` (NaN if absent).
inline double evidence(const dbg::Finding& f, const std::string& name) {
  for (const auto& e : f.evidence)
    if (e.name == name) return e.value;
  return std::nan("");
}

inline std::string all_text(const std::vector<dbg::Finding>& fs) {
  std::string s;
  for (const auto& f : fs) s += f.str() + "\n";
  return s;
}

// ---- shared by the check tests ----------------------------------------------------

using testdata::have_fashion_mnist;

// The evidence value called `name` (a prefix is enough); fails the test when absent.
inline double ev(const dbg::Finding& f, const std::string& name) {
  for (const dbg::Evidence& e : f.evidence)
    if (e.name.rfind(name, 0) == 0) return e.value;
  FAIL("finding " << f.check << " has no evidence '" << name << "':\n" << f.str());
  return std::nan("");
}

inline bool any_fires(const std::vector<dbg::Finding>& fs) { return fires(fs); }
inline std::string all_str(const std::vector<dbg::Finding>& fs) { return all_text(fs); }
inline bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The findings whose title contains `part`.
inline std::vector<dbg::Finding> titled(const std::vector<dbg::Finding>& fs, const std::string& part) {
  std::vector<dbg::Finding> out;
  for (const auto& f : fs)
    if (has(f.title, part)) out.push_back(f);
  return out;
}

}  // namespace dtest

// Fails the test program (saying how to install it) when Fashion-MNIST is not installed:
// scripts/setup.sh installs it, so no test skips for want of it.
#define REQUIRE_FASHION_MNIST() testdata::require_fashion_mnist()
