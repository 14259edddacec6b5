// The grader of lab 7 (hunting a NaN). The answer keys: gs::log_softmax, the
// models below whose NaN sources are known by construction, an IEEE binary16
// decoder written here and debug::round_to_half, the float32 softmax, and a
// reference training loop for the recipes; the last task trains the repaired
// recipe on a Fashion-MNIST subset.
//
// Dimension letters: B = batch, K = classes, D = features.
#include "tutorials/grader/grader.h"
#include "tutorials/grader/labs.h"
#include "tutorials/lab7_nan/lab7.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "core/format.h"
#include "core/generator.h"
#include "core/observer.h"
#include "debug/checks/model/anomaly.h"
#include "debug/checks/model/gradcheck.h"
#include "nn/nn.h"
#include "optim/clip.h"
#include "optim/sgd.h"

namespace gradsleuth::labs {

namespace {

// Task 7.6's training run and its goal (the reference, lr 0.1: last-epoch loss 0.64, accuracy 0.73).
constexpr int64_t kTrainImages = 5000;
constexpr int64_t kTestImages = 1000;
constexpr int kEpochs = 3;
constexpr double kMaxLoss = 0.8;
constexpr double kMinAccuracy = 0.68;

std::string hex(uint32_t v) { return str_printf("0x%04x", v); }

// Every op name a piece of code runs (forward ops only).
class OpAudit : public OpObserver {
 public:
  void on_op(const OpEvent& e) override { ops.insert(e.op); }
  std::set<std::string> ops;
};

// ---- Task 7.2's models: each has one known source of NaN/Inf -----------------------------
// x / x.sum(-1): a row of zeros gives 0 / 0.
class RowNormalize : public nn::Module {
 public:
  RowNormalize() : Module("RowNormalize") {}
  Tensor forward(const Tensor& x) override { return x / x.sum({-1}, true); }
};

// x / (sqrt(mean(x^2)) + eps): finite forward for a row of zeros, but sqrt's
// gradient at 0 is infinite (eps belongs inside the sqrt).
class RMSNorm : public nn::Module {
 public:
  RMSNorm() : Module("RMSNorm") {}
  Tensor forward(const Tensor& x) override { return x / ((x * x).mean({-1}, true).sqrt() + 1e-5); }
};

std::shared_ptr<nn::Linear> identity_linear(int64_t n) {
  auto fc = std::make_shared<nn::Linear>(n, n);
  NoGradGuard no_grad;
  fc->weight.copy_(eye(n));
  fc->bias.zero_();
  return fc;
}

// ---- IEEE binary16, the answer key ------------------------------------------------------
double key_decode(uint32_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000u) ? -v : v;
}

bool is_half_nan(uint32_t h) { return ((h >> 10) & 0x1f) == 31 && (h & 0x3ff) != 0; }

// ---- the recipes' reference loop ----------------------------------------------------
struct RefRun {
  std::vector<double> losses;
  int64_t nan_step = -1;
};

RefRun reference_run(nn::Sequential& model, const lab7::Recipe& r, nn::DataLoader& loader, int epochs) {
  RefRun run;
  optim::SGD opt(model.parameters(), optim::SGDOptions(r.lr));
  model.train();
  int64_t step = 0;
  for (int e = 0; e < epochs; ++e)
    for (const nn::Batch& b : loader) {
      opt.zero_grad();
      Tensor loss = nn::functional::nll_loss(model(b.x), b.y);
      loss.backward();
      const double v = loss.item<double>();
      if (!std::isfinite(v) || !std::isfinite(optim::grad_norm(model.parameters()))) {
        run.nan_step = step;
        return run;
      }
      if (r.clip_norm > 0.0) optim::clip_grad_norm_(model.parameters(), r.clip_norm);
      opt.step();
      run.losses.push_back(v);
      ++step;
    }
  return run;
}

std::string recipe_str(const lab7::Recipe& r) {
  return std::string("{stable_log_softmax ") + (r.stable_log_softmax ? "true" : "false") + ", lr " + num(r.lr) +
         ", clip_norm " + num(r.clip_norm) + "}";
}

nn::DatasetPtr fashion(const std::string& split, int64_t n) {
  try {
    return nn::take(nn::load_fashion_mnist(split), n);
  } catch (const Error& e) {
    throw Skip(std::string("Fashion-MNIST could not be loaded: ") + e.what());
  }
}

double accuracy(nn::Module& model, const nn::DatasetPtr& data) {
  NoGradGuard no_grad;
  model.eval();
  const nn::Batch b = data->all();
  const Tensor out = model(b.x);
  model.train();
  return out.argmax(1).eq(b.y).to(kFloat64).mean().item<double>();
}

bool all_params_finite(nn::Module& m) {
  for (const Tensor& p : m.parameters())
    if (isfinite(p.detach()).to(kFloat64).min().item<double>() < 1.0) return false;
  return true;
}

}  // namespace

Lab make_lab7() {
  Lab lab;
  lab.number = 7;
  lab.dir = "lab7_nan";
  lab.title = "Hunting a NaN: log-sum-exp, anomaly mode, half precision";
  lab.starter = "tutorials/lab7_nan/lab7.cpp";

  // ---- Task 7.1 ------------------------------------------------------------------------
  auto lsm_case = [](const std::string& name, std::function<Tensor()> make) -> Case {
    return {name, [=](Check& c) {
              const Tensor x = make();
              c.input("x = " + describe(x));
              OpAudit audit;
              Tensor got;
              {
                ObserverGuard watch(&audit);
                got = lab7::log_softmax(x);
              }
              for (const char* banned : {"softmax", "log_softmax"})
                c.require(!audit.ops.count(banned), std::string("your log_softmax calls the library's '") + banned +
                                                        "': build it from max, exp, sum and log (that is the task)");
              c.require_close(got, gs::log_softmax(x, -1), "log_softmax", 1e-5, 1e-5);
            }};
  };
  lab.tasks.push_back(
      {1,
       "a stable log_softmax",
       15,
       "lab7::log_softmax()",
       {lsm_case("random (3, 5)",
                 [] {
                   return randn_seeded({3, 5}, 71);
                 }),
        lsm_case("logits near +1000 (exp overflows float32 past ~88)",
                 [] {
                   return randn_seeded({2, 4}, 72) + 1000.0;
                 }),
        lsm_case("logits near -1000 (exp underflows to 0)",
                 [] {
                   return randn_seeded({2, 4}, 73) - 1000.0;
                 }),
        lsm_case("one row [0, -1000, 1000]",
                 [] {
                   return tensor({0, -1000, 1000}, {1, 3});
                 }),
        lsm_case("3-D (2, 3, 4): over the last dim",
                 [] {
                   return randn_seeded({2, 3, 4}, 74, 3.0);
                 }),
        lsm_case("a single class (2, 1): log 1 = 0",
                 [] {
                   return tensor({5.0, -7.0}, {2, 1});
                 }),
        {"gradcheck (float64): the gradient is one_hot - softmax", [](Check& c) {
           const Tensor x = randn_seeded({3, 4}, 75, 2.0, kFloat64);
           c.input("x " + x.str() + ", loss = sum(v * log_softmax(x)) for a fixed random v");
           const auto r = debug::gradcheck([](const tensor_list& xs) { return lab7::log_softmax(xs[0]); }, {x});
           c.require(r.passed, "gradient check failed: " + r.message +
                                   " (build the result from differentiable tensor ops; no NoGradGuard)");
         }}}});

  // ---- Task 7.2 ------------------------------------------------------------------------
  lab.tasks.push_back(
      {2,
       "name the op and module with anomaly mode",
       15,
       "lab7::find_nan_source()",
       {{"log(softmax(x)) (bug B20): forward 'log' in '1 (LogSoftmax)'",
         [](Check& c) {
           auto ls = std::make_shared<nn::LogSoftmax>(1);
           ls->inject_bug(nn::Bug::B20);
           auto model = std::make_shared<nn::Sequential>(identity_linear(3), ls);
           const Tensor x = tensor({0, 200, 0, 1, 2, 3}, {2, 3});
           const Tensor y = tensor(std::vector<int64_t>{0, 2}, {2});
           c.input("Sequential(Linear(3, 3) = identity, LogSoftmax(1) computed as log(softmax(x))), x " +
                   values_str(x) + ", y " + values_str(y) + ": softmax of [0, 200, 0] underflows to 0");
           const lab7::NanSource s = lab7::find_nan_source(*model, x, y);
           c.require(s.found, "found = false: the forward produces -inf (log of 0)");
           c.require(s.op == "log", "op: expected 'log', got '" + s.op + "'");
           c.require(s.module == "1 (LogSoftmax)",
                     "module: expected '1 (LogSoftmax)', got '" + s.module +
                         "' (attach the AnomalyMode to the model: anomaly.attach(model))");
           c.require(!s.backward, "backward: expected false, the -inf appears in the forward");
         }},
        {"0 / 0 in a custom module: forward 'div' in '2 (RowNormalize)'",
         [](Check& c) {
           auto model = std::make_shared<nn::Sequential>(identity_linear(3), std::make_shared<nn::ReLU>(),
                                                         std::make_shared<RowNormalize>());
           const Tensor x = tensor({1, 2, 3, -1, -2, -3}, {2, 3});
           const Tensor y = tensor(std::vector<int64_t>{0, 1}, {2});
           c.input("Sequential(Linear(3, 3) = identity, ReLU, RowNormalize: x / x.sum(-1)), x " + values_str(x) +
                   ": the second row is all zeros after the ReLU");
           const lab7::NanSource s = lab7::find_nan_source(*model, x, y);
           c.require(s.found, "found = false: the forward produces 0 / 0 = NaN");
           c.require(s.op == "div", "op: expected 'div', got '" + s.op + "'");
           c.require(s.module == "2 (RowNormalize)", "module: expected '2 (RowNormalize)', got '" + s.module + "'");
           c.require(!s.backward, "backward: expected false, the NaN appears in the forward");
         }},
        {"eps outside the sqrt: finite forward, backward 'sqrt' makes the NaN",
         [](Check& c) {
           auto model = std::make_shared<nn::Sequential>(identity_linear(3), std::make_shared<nn::ReLU>(),
                                                         std::make_shared<RMSNorm>());
           const Tensor x = tensor({1, 2, 3, -1, -2, -3}, {2, 3});
           const Tensor y = tensor(std::vector<int64_t>{0, 1}, {2});
           c.input("Sequential(Linear(3, 3) = identity, ReLU, RMSNorm: x / (sqrt(mean(x^2)) + 1e-5)), x " +
                   values_str(x) + ": sqrt(0) = 0 is fine, its gradient 1 / (2 sqrt(0)) is not");
           const lab7::NanSource s = lab7::find_nan_source(*model, x, y);
           c.require(s.found, "found = false: the backward of sqrt at 0 produces NaN");
           c.require(s.op == "sqrt", "op: expected 'sqrt', got '" + s.op + "'");
           c.require(s.backward, "backward: expected true, the forward is finite");
           // The debug module may or may not name the module of a backward node: both are accepted.
           c.require(
               s.module.empty() || s.module == "2 (RMSNorm)",
               "module: expected '2 (RMSNorm)' (or '' when the debug module cannot tell), got '" + s.module + "'");
         }},
        {"a healthy model: found = false", [](Check& c) {
           auto model = std::make_shared<nn::Sequential>(identity_linear(3), std::make_shared<nn::LogSoftmax>(1));
           const Tensor x = tensor({0, 200, 0, 1, 2, 3}, {2, 3});
           const Tensor y = tensor(std::vector<int64_t>{0, 2}, {2});
           c.input("Sequential(Linear(3, 3) = identity, LogSoftmax(1) (stable)), x " + values_str(x));
           const lab7::NanSource s = lab7::find_nan_source(*model, x, y);
           c.require(!s.found,
                     "found = true (op '" + s.op + "', module '" + s.module + "') although every value stays finite");
         }}}});

  // ---- Task 7.3 ------------------------------------------------------------------------
  lab.tasks.push_back(
      {3,
       "IEEE half precision by hand",
       20,
       "lab7::half_bits_to_float(), lab7::float_to_half_bits(), lab7::round_to_half()",
       {{"half_bits_to_float: all 65536 bit patterns",
         [](Check& c) {
           c.input("every uint16 pattern 0x0000 .. 0xffff");
           for (uint32_t h = 0; h < 65536; ++h) {
             const double want = key_decode(h);
             const double got = lab7::half_bits_to_float(static_cast<uint16_t>(h));
             const bool ok =
                 std::isnan(want) ? std::isnan(got) : (got == want && std::signbit(got) == std::signbit(want));
             c.require(ok, "half_bits_to_float(" + hex(h) + "): expected " + g9(want) + ", got " + g9(got) + " (sign " +
                               std::to_string(h >> 15) + ", exponent " + std::to_string((h >> 10) & 31) +
                               ", mantissa " + std::to_string(h & 1023) + ")");
           }
         }},
        {"float_to_half_bits: every finite half value maps to its own pattern",
         [](Check& c) {
           c.input(
               "v = the value of each finite pattern h (subnormals, +-0 included); expected float_to_half_bits(v) == "
               "h");
           for (uint32_t h = 0; h < 65536; ++h) {
             if (((h >> 10) & 31) == 31) continue;
             const float v = static_cast<float>(key_decode(h));
             const uint32_t got = lab7::float_to_half_bits(v);
             c.require(got == h, "float_to_half_bits(" + g9(v) + "): expected " + hex(h) + ", got " + hex(got));
           }
         }},
        {"round to nearest, ties to even, between every pair of neighbours",
         [](Check& c) {
           c.input(
               "for each pair of neighbouring finite halves a < b: their midpoint (a tie), and the floats just "
               "below and above it");
           for (uint32_t h = 0; h < 0x7bff; ++h) {
             for (uint32_t sign : {0u, 0x8000u}) {
               const uint32_t lo = h | sign, hi = (h + 1) | sign;
               const float mid = static_cast<float>((key_decode(lo) + key_decode(hi)) / 2.0);  // exact in float
               const uint32_t even = (h % 2 == 0) ? lo : hi;
               const uint32_t got = lab7::float_to_half_bits(mid);
               c.require(got == even, "float_to_half_bits(" + g9(mid) + "), halfway between " + g9(key_decode(lo)) +
                                          " and " + g9(key_decode(hi)) + ": expected the even one " + hex(even) +
                                          ", got " + hex(got));
               const float below = std::nextafter(mid, 0.0f), above = std::nextafter(mid, sign ? -INFINITY : INFINITY);
               const uint32_t gb = lab7::float_to_half_bits(below), ga = lab7::float_to_half_bits(above);
               c.require(gb == lo, "float_to_half_bits(" + g9(below) + "), just below the midpoint: expected " +
                                       hex(lo) + ", got " + hex(gb));
               c.require(ga == hi, "float_to_half_bits(" + g9(above) + "), just above the midpoint: expected " +
                                       hex(hi) + ", got " + hex(ga));
             }
           }
         }},
        {"overflow to inf, NaN, and the edges of the subnormals",
         [](Check& c) {
           struct E {
             float v;
             uint32_t want;
           };
           const std::vector<E> edges = {{65504.0f, 0x7bff},
                                         {std::nextafter(65520.0f, 0.0f), 0x7bff},
                                         {65520.0f, 0x7c00},
                                         {1e30f, 0x7c00},
                                         {-1e30f, 0xfc00},
                                         {INFINITY, 0x7c00},
                                         {-INFINITY, 0xfc00},
                                         {1.0f, 0x3c00},
                                         {-2.0f, 0xc000},
                                         {0.1f, 0x2e66},
                                         {0x1p-14f, 0x0400},
                                         {0x1p-14f - 0x1p-24f, 0x03ff},
                                         {0x1p-24f, 0x0001},
                                         {0x1p-25f, 0x0000},
                                         {std::nextafter(0x1p-25f, 1.0f), 0x0001},
                                         {3 * 0x1p-25f, 0x0002},
                                         {1e-10f, 0x0000},
                                         {-1e-10f, 0x8000},
                                         {-0.0f, 0x8000}};
           c.input(
               "edge values: 65504, just below 65520, 65520, +-1e30, +-inf, 1, -2, 0.1, 2^-14, the largest "
               "subnormal, 2^-24, 2^-25 (a tie with 0), 3 * 2^-25 (a tie), 1e-10, -1e-10, -0, NaN");
           for (const E& e : edges) {
             const uint32_t got = lab7::float_to_half_bits(e.v);
             c.require(got == e.want, "float_to_half_bits(" + g9(e.v) + "): expected " + hex(e.want) + " (" +
                                          g9(key_decode(e.want)) + "), got " + hex(got) + " (" + g9(key_decode(got)) +
                                          ")");
           }
           const uint32_t n = lab7::float_to_half_bits(NAN);
           c.require(is_half_nan(n),
                     "float_to_half_bits(NaN): expected a NaN pattern (exponent 31, mantissa != 0), "
                     "got " +
                         hex(n));
           c.require(std::isnan(lab7::round_to_half(NAN)), "round_to_half(NaN) is not NaN");
         }},
        {"round_to_half agrees with debug::round_to_half on 20000 floats", [](Check& c) {
           Generator gen(76);
           const std::vector<float> u = rand({20000}, kFloat32, &gen).to_vector<float>();
           const std::vector<float> s = randn({20000}, kFloat32, &gen).to_vector<float>();
           c.input("v = sign * 2^e * (1 + u) with e uniform in [-30, 20]");
           for (size_t i = 0; i < u.size(); ++i) {
             const float v = std::copysign(std::ldexp(1.0f + u[i], static_cast<int>(i % 51) - 30), s[i]);
             const float want = debug::round_to_half(v), got = lab7::round_to_half(v);
             c.require(got == want || (std::isnan(got) && std::isnan(want)),
                       "round_to_half(" + g9(v) + "): expected " + g9(want) + ", got " + g9(got));
           }
         }}}});

  // ---- Task 7.4 ------------------------------------------------------------------------
  auto softmax_close_case = [](const std::string& name, std::vector<double> v, Shape s, bool stable) -> Case {
    return {name, [=](Check& c) {
              const Tensor x = tensor(v, s);
              c.input(std::string(stable ? "stable" : "naive") + " softmax_half(x), x " + values_str(x));
              const Tensor got = lab7::softmax_half(x, stable);
              c.require_tensor(got, s, "softmax_half");
              c.require(isfinite(got).to(kFloat64).min().item<double>() == 1.0,
                        "the result holds NaN or Inf: " + values_str(got) +
                            (stable ? " (subtract the row max before exp)" : ""));
              c.require_close(got, gs::softmax(x, -1), "softmax_half vs the float32 softmax", 3e-3, 1e-3);
              for (float g : got.contiguous().to_vector<float>())
                c.require(debug::round_to_half(g) == g,
                          "the result is not rounded to half (" + g9(g) + " is not a half value): round the quotient");
            }};
  };
  auto softmax_nan_case = [](const std::string& name, std::vector<double> v, Shape s, const std::string& why) -> Case {
    return {name, [=](Check& c) {
              const Tensor x = tensor(v, s);
              c.input("naive softmax_half(x), x " + values_str(x));
              const Tensor got = lab7::softmax_half(x, false);
              c.require_tensor(got, s, "softmax_half");
              c.require(isnan(got).to(kFloat64).max().item<double>() == 1.0,
                        "expected NaN in the naive half-precision softmax (" + why + "), got " + values_str(got) +
                            ": round exp(x) and the sum to half before dividing");
            }};
  };
  lab.tasks.push_back(
      {4,
       "softmax in half precision",
       15,
       "lab7::to_half(), lab7::softmax_half(), lab7::half_exp_overflow()",
       {{"to_half rounds a copy",
         [](Check& c) {
           const Tensor x = tensor({1.0, 0.1, 65504, 70000, 1e-8, -3.14159, 2049, 1e-5}, {2, 4});
           const Tensor before = x.clone();
           c.input("x " + values_str(x));
           const Tensor got = lab7::to_half(x);
           std::vector<double> want;
           for (float v : x.to_vector<float>()) want.push_back(debug::round_to_half(v));
           c.require_close(got, tensor(want, {2, 4}), "to_half(x)", 0.0, 0.0);
           c.require_close(x, before, "x after to_half (it must not change)", 0.0, 0.0);
         }},
        softmax_close_case("naive, largest logit 11: still finite", {11.0, 0.0, -1.0}, {1, 3}, false),
        softmax_nan_case("naive, logit 11.2: exp overflows to inf, inf / inf = NaN", {11.2, 0.0}, {1, 2},
                         "exp(11.2) = 73130 > 65504"),
        softmax_nan_case("naive, logits -20 and -25: exp underflows to 0, 0 / 0 = NaN", {-20.0, -25.0}, {1, 2},
                         "exp(-20) = 2e-9 is below the smallest half, 6e-8"),
        softmax_close_case("stable, logit 11.2", {11.2, 0.0}, {1, 2}, true),
        softmax_close_case("stable, logits [1000, 999, 0] and [-20, -25, -30]", {1000, 999, 0, -20, -25, -30}, {2, 3},
                           true),
        {"naive, logits [10.5, 10.5]: each exp fits in half, their sum does not",
         [](Check& c) {
           const Tensor x = tensor({10.5, 10.5}, {1, 2});
           c.input("naive softmax_half(x), x " + values_str(x) + ": exp(10.5) = 36316, the sum 72631 > 65504");
           const Tensor got = lab7::softmax_half(x, false);
           c.require_close(got, zeros({1, 2}), "naive softmax_half (e / inf = 0: round the row sums to half)", 0.0,
                           0.0);
           c.require_close(lab7::softmax_half(x, true), full({1, 2}, 0.5), "stable softmax_half", 0.0, 0.0);
         }},
        {"half_exp_overflow: ln(65520) = 11.0901",
         [](Check& c) {
           c.input("the smallest x with exp(x) >= 65520 (it rounds to inf in half)");
           c.require_near(lab7::half_exp_overflow(), std::log(65520.0), 1e-4,
                          "half_exp_overflow() (ln(65504) = 11.0899 would be the largest finite half's log)");
         }},
        {"agrees with M18 (debug::check_half_precision) on a model using exp / sum", [](Check& c) {
           auto head = std::make_shared<nn::LogSoftmax>(1);
           head->inject_bug(nn::Bug::B21);  // log(exp(x) / sum(exp(x)))
           auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Identity>(), head);
           c.input(
               "Sequential(Identity, LogSoftmax(1) computed as log(exp(x) / sum(exp(x))) (bug B21)) on rows "
               "[5, 0], [11.2, 0], [-20, -25]");
           for (const auto& row : std::vector<std::vector<double>>{{5, 0}, {11.2, 0}, {-20, -25}}) {
             const Tensor x = tensor(row, {1, 2});
             bool m18 = false;
             for (const auto& f : debug::check_half_precision(*model, x))
               if (f.severity == debug::Severity::Error) m18 = true;
             const Tensor got = lab7::softmax_half(x, false);
             c.require_tensor(got, {1, 2}, "softmax_half");
             const bool nan = isfinite(got).to(kFloat64).min().item<double>() < 1.0;
             c.note("x " + values_str(x) + ": M18 " + (m18 ? "reports an overflow" : "is silent") +
                    ", your naive softmax_half is " + (nan ? "not finite" : "finite"));
             c.require(nan == m18, "x " + values_str(x) + ": M18 " + (m18 ? "reports NaN/Inf" : "is silent") +
                                       " in half precision, but your naive softmax_half is " +
                                       (nan ? "not finite" : "finite") + ": " + values_str(got));
           }
         }}}});

  // ---- Task 7.5 ------------------------------------------------------------------------
  auto guarded_case = [](const std::string& name, lab7::Recipe r, int64_t images, int64_t batch, int epochs,
                         bool expect_nan) -> Case {
    return {name, [=](Check& c) {
              const nn::DatasetPtr data = fashion("train", images);
              auto opts = nn::DataLoaderOptions().batch_size(batch).shuffle(true).seed(7);
              c.input("make_recipe_model(" + recipe_str(r) + ", seed 1), the first " + std::to_string(images) +
                      " Fashion-MNIST images, batch " + std::to_string(batch) + ", " + std::to_string(epochs) +
                      " epochs");
              auto ref_model = lab7::make_recipe_model(r, 1);
              nn::DataLoader ref_loader(data, opts);
              const RefRun want = reference_run(*ref_model, r, ref_loader, epochs);
              c.require(expect_nan == (want.nan_step >= 0), "internal: the reference run did not behave as planned");
              auto model = lab7::make_recipe_model(r, 1);
              nn::DataLoader loader(data, opts);
              const lab7::GuardedRun got = lab7::train_guarded(*model, r, loader, epochs);
              if (r.clip_norm > 0.0) {  // the case means something only if clipping changes the run
                lab7::Recipe plain = r;
                plain.clip_norm = 0.0;
                auto m2 = lab7::make_recipe_model(plain, 1);
                nn::DataLoader l2(data, opts);
                c.require(reference_run(*m2, plain, l2, epochs).losses != want.losses,
                          "internal: clipping does not change this run");
              }
              if (want.nan_step >= 0 && got.nan_step == want.nan_step + 1)
                c.fail("nan_step: expected " + std::to_string(want.nan_step) + ", got " + std::to_string(got.nan_step) +
                       ": the loss of step " + std::to_string(want.nan_step) +
                       " was finite but its gradients were not, and the step made every weight NaN; check the "
                       "gradients before opt.step() too");
              c.require_eq(got.nan_step, want.nan_step,
                           "nan_step (the first step whose loss or gradients are not finite; -1: none)");
              c.require_eq(static_cast<int64_t>(got.losses.size()), static_cast<int64_t>(want.losses.size()),
                           "the number of losses recorded (one per completed step)");
              for (size_t i = 0; i < want.losses.size(); ++i)
                c.require_near(got.losses[i], want.losses[i], 1e-4 * std::max(1.0, std::fabs(want.losses[i])),
                               "the loss of step " + std::to_string(i) +
                                   (r.clip_norm > 0 ? " (clip the gradients to r.clip_norm before the step)" : ""));
              c.require(all_params_finite(*model),
                        "the model's parameters hold NaN/Inf after the run: a step was taken with non-finite "
                        "gradients (check them too: a finite loss can have NaN gradients)");
              if (expect_nan) {
                c.note("broken recipe: the loss or the gradients are first non-finite at step " +
                       std::to_string(got.nan_step) + "; anomaly mode: op '" + got.source.op + "' in '" +
                       got.source.module + "'");
                c.require(got.source.found,
                          "source.found = false at the non-finite step: run find_nan_source on "
                          "that batch, before any step changes the weights");
                c.require(got.source.op == "log" && got.source.module == "4 (LogSoftmax)" && !got.source.backward,
                          "source: expected the forward 'log' in '4 (LogSoftmax)', got '" + got.source.op + "' in '" +
                              got.source.module + "'" + (got.source.backward ? " (backward)" : ""));
              } else {
                c.require(!got.source.found, "source.found = true although every loss was finite");
              }
            }};
  };
  lab.tasks.push_back(
      {5,
       "a training loop that stops at the first NaN",
       20,
       "lab7::train_guarded()",
       {guarded_case("a healthy recipe: every loss, in order", lab7::Recipe{true, 0.1, 0.0}, 320, 64, 2, false),
        guarded_case("with gradient clipping (clip_norm 0.5)", lab7::Recipe{true, 0.5, 0.5}, 640, 64, 1, false),
        guarded_case("the broken recipe: stops at the first non-finite loss and names its source",
                     lab7::broken_recipe(), 2000, 64, 2, true)}});

  // ---- Task 7.6 ------------------------------------------------------------------------
  lab.tasks.push_back(
      {6,
       "repair the recipe",
       15,
       "lab7::fix_recipe()",
       {{"the output layer survives extreme logits",
         [](Check& c) {
           const lab7::Recipe r = lab7::fix_recipe(lab7::broken_recipe());
           c.input("fix_recipe(broken_recipe()) = " + recipe_str(r) +
                   "; its model's last layer on logits [0, -200, 50, 300]");
           auto model = lab7::make_recipe_model(r, 1);
           const Tensor z = tensor({0, -200, 50, 300}, {1, 4});
           Tensor out;
           {
             NoGradGuard no_grad;
             out = (*(*model)[4])(z);
           }
           c.require(isfinite(out).to(kFloat64).min().item<double>() == 1.0,
                     "the last layer gives " + values_str(out) +
                         ": log(softmax(x)) is still there, and a lower learning rate only makes its -inf rarer");
         }},
        {"the repaired recipe trains on Fashion-MNIST",
         [](Check& c) {
           const nn::DatasetPtr train = fashion("train", kTrainImages), test = fashion("test", kTestImages);
           const lab7::Recipe r = lab7::fix_recipe(lab7::broken_recipe());
           c.input("fix_recipe(broken_recipe()) = " + recipe_str(r) + ", " + std::to_string(kEpochs) +
                   " epochs (batch 64) on the first " + std::to_string(kTrainImages) +
                   " training images with the grader's loop; accuracy on the first " + std::to_string(kTestImages) +
                   " test images");
           const auto t0 = std::chrono::steady_clock::now();
           auto broken = lab7::make_recipe_model(lab7::broken_recipe(), 1);
           nn::DataLoader bl(train, nn::DataLoaderOptions().batch_size(64).shuffle(true).seed(1));
           const RefRun b = reference_run(*broken, lab7::broken_recipe(), bl, 1);
           auto model = lab7::make_recipe_model(r, 1);
           nn::DataLoader loader(train, nn::DataLoaderOptions().batch_size(64).shuffle(true).seed(1));
           const RefRun run = reference_run(*model, r, loader, kEpochs);
           const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
           c.require(run.nan_step < 0,
                     "the loss or the gradients are not finite at step " + std::to_string(run.nan_step));
           const int64_t per_epoch = loader.num_batches();
           std::vector<double> epochs;
           for (int e = 0; e < kEpochs; ++e) {
             double s = 0.0;
             for (int64_t i = e * per_epoch; i < (e + 1) * per_epoch; ++i) s += run.losses[i];
             epochs.push_back(s / static_cast<double>(per_epoch));
           }
           const double acc = accuracy(*model, test);
           std::string curve;
           for (double l : epochs) curve += (curve.empty() ? "" : ", ") + fixed(l, 3);
           c.note("repaired: epoch losses [" + curve + "], test accuracy " + fixed(acc, 3) + " (goal: last loss <= " +
                  fixed(kMaxLoss, 2) + ", accuracy >= " + fixed(kMinAccuracy, 2) + "); the broken recipe: " +
                  (b.nan_step >= 0 ? "non-finite at step " + std::to_string(b.nan_step) : std::string("finite")) +
                  "; " + fixed(seconds, 1) + " s");
           c.require(epochs.back() <= kMaxLoss, "the last epoch's loss is " + fixed(epochs.back(), 3) +
                                                    " (epoch losses [" + curve +
                                                    "]), the goal is <= " + fixed(kMaxLoss, 2) +
                                                    (r.lr > 0.5 ? ": is the learning rate still too high?" : ""));
           c.require(acc >= kMinAccuracy,
                     "test accuracy " + fixed(acc, 3) + " is below the goal " + fixed(kMinAccuracy, 2));
         },
         2}}});
  return lab;
}

}  // namespace gradsleuth::labs
