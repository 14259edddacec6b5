// Helpers for the nn tests: value comparison and a small float64 central-difference
// gradient check that also covers a module's parameters (perturbed in place).
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace nntest {

using gs::Tensor;
using Vec = std::vector<double>;

inline Vec vals(const Tensor& t) { return t.detach().to_vector<double>(); }

// Same value to the bit, reading NaN as equal to NaN: -0 and +0 differ.
inline bool same_bits(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

// Element-wise |a - b| <= atol + rtol |b|, with the first failure reported.
inline void check_close(const Vec& got, const Vec& want, double atol = 1e-5, double rtol = 1e-5) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    CHECK(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]));
  }
}
inline void check_close(const Tensor& got, const Vec& want, double atol = 1e-5, double rtol = 1e-5) {
  check_close(vals(got), want, atol, rtol);
}

// Gradient check: for L = sum(v * f()) with a fixed random v, compares autograd's
// dL/dt with (L(t + eps) - L(t - eps)) / (2 eps) for every element of every tensor
// in `wrt` (float64 leaves that require grad; parameters included). Returns the
// largest |analytic - numeric| / max(1, |numeric|) and names the worst element.
struct GradReport {
  double max_err = 0.0;
  std::string worst;
};

inline GradReport grad_check(const std::function<Tensor()>& f, const std::vector<std::pair<std::string, Tensor>>& wrt,
                             double eps = 1e-6, uint64_t seed = 7) {
  Tensor out = f();
  gs::Generator gen(seed);
  Tensor v = gs::randn(out.shape(), gs::kFloat64, &gen);
  for (auto [n, t] : wrt) t.zero_grad();
  (out * v).sum().backward();
  GradReport rep;
  for (auto& [name, t] : wrt) {
    REQUIRE(t.dtype() == gs::kFloat64);
    REQUIRE(t.is_contiguous());
    Tensor g = t.grad();
    Vec analytic = g.defined() ? vals(g) : Vec(static_cast<size_t>(t.numel()), 0.0);
    double* p = static_cast<double*>(t.raw_data());
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double keep = p[i];
      double lp, lm;
      {
        gs::NoGradGuard ng;
        p[i] = keep + eps;
        lp = (f() * v).sum().item<double>();
        p[i] = keep - eps;
        lm = (f() * v).sum().item<double>();
        p[i] = keep;
      }
      const double numeric = (lp - lm) / (2 * eps);
      const double err = std::fabs(analytic[i] - numeric) / std::max(1.0, std::fabs(numeric));
      if (err > rep.max_err) {
        rep.max_err = err;
        rep.worst = name + "[" + std::to_string(i) + "]: analytic " + std::to_string(analytic[i]) + ", numeric " +
                    std::to_string(numeric);
      }
    }
  }
  return rep;
}

// The message of the gs::Error that f throws, or `none` if it throws none.
template <class F>
std::string error_message(F&& f, const char* none) {
  try {
    f();
  } catch (const gs::Error& e) {
    return e.what();
  }
  return none;
}
// A marker string when nothing is thrown, so a check for a word in the message fails.
template <class F>
std::string error_of(F&& f) {
  return error_message(std::forward<F>(f), "<no gs::Error was thrown>");
}
// "" when nothing is thrown: for checks that expect success in some cases (CHECK(e.empty())).
template <class F>
std::string error_or_empty(F&& f) {
  return error_message(std::forward<F>(f), "");
}
inline bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Expects `fn` to throw gs::Error whose message contains every one of `parts`.
template <class F>
void check_error(F&& fn, std::initializer_list<const char*> parts) {
  try {
    fn();
    FAIL("expected a gs::Error");
  } catch (const gs::Error& e) {
    const std::string msg = e.what();
    for (const char* p : parts) {
      INFO("message: " << msg << "\nmissing: " << p);
      CHECK(msg.find(p) != std::string::npos);
    }
  }
}

}  // namespace nntest

#define GS_CHECK_GRADS(f, wrt)                    \
  do {                                            \
    auto rep_ = ::nntest::grad_check((f), (wrt)); \
    INFO("worst: " << rep_.worst);                \
    CHECK(rep_.max_err < 1e-6);                   \
  } while (0)
