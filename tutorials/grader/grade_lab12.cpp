// The grader of lab 12 (reduced precision). The answer keys are the engine's own: gs::Half and
// gs::BFloat16 (Eigen's conversions) for Tasks 12.1-12.2, every one of the 2^16 bit patterns back
// and ties, edges and random float32 inputs forth; optim::GradScaler for Task 12.3, run step by
// step beside the student's scaler on two copies of the same parameters, on schedules of clean,
// inf, NaN and overflowing gradients drawn at random (the public inputs or the instructor's); the
// autocast table and casts of core/autocast.cpp for Task 12.4.
#include "tutorials/grader/grader.h"
#include "tutorials/grader/labs.h"
#include "tutorials/lab12_precision/lab12.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <vector>

#include "core/autocast.h"
#include "core/format.h"
#include "optim/grad_scaler.h"
#include "optim/sgd.h"

namespace gradsleuth::labs {

namespace {

std::string hex(uint32_t v) { return str_printf("0x%04x", v); }
std::string hex32(uint32_t v) { return str_printf("0x%08x", v); }
uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// A float's value and its bits, so that NaN payloads and -0 show: "-0 (0x80000000)".
std::string fstr(float f) { return g9(f) + " (" + hex32(bits_of(f)) + ")"; }

// ---- Tasks 12.1-12.2: a 16-bit format, the student's conversions and the engine's ----------
struct Format {
  const char* name;  // "float16"
  const char* to;    // the student's functions' names
  const char* from;
  uint16_t (*mine_to)(float);
  float (*mine_from)(uint16_t);
  uint16_t (*key_to)(float);
  float (*key_from)(uint16_t);
  uint16_t exp_mask;    // the exponent field
  uint16_t max_finite;  // the largest finite positive pattern
  bool is_nan(uint16_t h) const { return (h & exp_mask) == exp_mask && (h & ~exp_mask & 0x7fffu); }
  bool is_inf(uint16_t h) const { return (h & 0x7fffu) == exp_mask; }
  bool is_subnormal(uint16_t h) const { return (h & exp_mask) == 0 && (h & 0x7fffu) != 0; }
  std::string show(uint16_t h) const { return hex(h) + " (" + g9(key_from(h)) + ")"; }
};

const Format& float16() {
  static const Format f{"float16",
                        "float_to_half_bits",
                        "half_bits_to_float",
                        lab12::float_to_half_bits,
                        lab12::half_bits_to_float,
                        [](float v) { return Half(v).bits; },
                        [](uint16_t h) { return to_float(Half::from_bits(h)); },
                        0x7c00,
                        0x7bff};
  return f;
}
const Format& bfloat16() {
  static const Format f{"bfloat16",
                        "float_to_bfloat16_bits",
                        "bfloat16_bits_to_float",
                        lab12::float_to_bfloat16_bits,
                        lab12::bfloat16_bits_to_float,
                        [](float v) { return BFloat16(v).bits; },
                        [](uint16_t h) { return to_float(BFloat16::from_bits(h)); },
                        0x7f80,
                        0x7f7f};
  return f;
}

// Why `got` is not `want` for input f, in a few words.
std::string forth_hint(const Format& F, float f, uint16_t want, uint16_t got) {
  if (F.is_nan(want)) {
    if (F.is_inf(got))
      return "a NaN came out as inf: test for NaN before rounding (a NaN whose payload lies in the dropped bits "
             "looks like inf once they are gone, and rounding can carry into it)";
    return "NaN must stay NaN: exponent all ones and a mantissa that is not 0 (set its top bit)";
  }
  if (F.is_inf(want) && !F.is_inf(got))
    return "this value rounds past the largest finite " + std::string(F.name) + ", " + g9(F.key_from(F.max_finite)) +
           ": the result is inf";
  if (F.is_inf(got) && !F.is_inf(want))
    return "only values at or past the midpoint between the largest finite value and the next power of two "
           "overflow; this one rounds to a finite value";
  if ((got & 0x7fffu) == 0 && (want & 0x7fffu) != 0)
    return "a subnormal (or the smallest) result flushed to 0: keep subnormals, m x 2^-" +
           std::string(F.exp_mask == 0x7c00 ? "24" : "133");
  if ((got & 0x8000u) != (want & 0x8000u)) return "the sign is wrong (the sign bit is the top bit, also for 0)";
  const int d = static_cast<int>(got & 0x7fffu) - static_cast<int>(want & 0x7fffu);
  if (d == 1 || d == -1) {
    const double lo = F.key_from(std::min(got, want)), hi = F.key_from(std::max(got, want));
    if (static_cast<double>(f) == (lo + hi) / 2)
      return "a tie (exactly halfway between two values): round to the one whose last mantissa bit is 0";
    return "one step off: round to nearest (compare the dropped bits with half of the last kept place), not toward "
           "zero";
  }
  return "far off: check the exponent (bias " + std::string(F.exp_mask == 0x7c00 ? "15" : "127") +
         ") and where the mantissa bits go";
}

// The student's f -> bits against the engine's, as a failure message (empty when right).
std::string forth_error(const Format& F, float f) {
  const uint16_t want = F.key_to(f), got = F.mine_to(f);
  if (F.is_nan(want) ? F.is_nan(got) : got == want) return "";
  return std::string(F.to) + ": for f = " + fstr(f) + " expected " + (F.is_nan(want) ? "a NaN pattern" : F.show(want)) +
         ", got " + F.show(got) + ": " + forth_hint(F, f, want, got);
}

void require_forth(Check& c, const Format& F, float f) {
  const std::string e = forth_error(F, f);
  if (!e.empty()) c.fail(e);
}

Case back_all(const Format& F) {
  return {std::string(F.from) + ": all 65536 bit patterns",
          [&F](Check& c) {
            c.input(std::string("every uint16 pattern 0x0000 .. 0xffff, against the engine's ") + F.name + " -> float");
            for (uint32_t h = 0; h < 65536; ++h) {
              const float want = F.key_from(static_cast<uint16_t>(h)), got = F.mine_from(static_cast<uint16_t>(h));
              const bool ok = std::isnan(want) ? std::isnan(got) : bits_of(got) == bits_of(want);
              if (ok) continue;
              std::string why = F.is_nan(static_cast<uint16_t>(h))   ? "a NaN pattern must give a NaN"
                                : F.is_inf(static_cast<uint16_t>(h)) ? "exponent all ones, mantissa 0: inf"
                                : F.is_subnormal(static_cast<uint16_t>(h))
                                    ? std::string("exponent 0: a subnormal, m x 2^-") +
                                          (F.exp_mask == 0x7c00 ? "24 (no hidden 1)" : "133 (no hidden 1)")
                                : (h & 0x7fffu) == 0
                                    ? "+-0: keep the sign"
                                    : "a normal number: check the exponent bias and the mantissa shift";
              c.fail(std::string(F.from) + ": for h = " + hex(h) + " expected " + fstr(want) + ", got " + fstr(got) +
                     ": " + why);
            }
          },
          2};
}

Case each_value(const Format& F) {
  return {std::string(F.to) + ": every finite " + F.name + " value maps to its own pattern", [&F](Check& c) {
            c.input(std::string("f = the value of each finite ") + F.name +
                    " pattern (subnormals and +-0 included); expected the pattern itself");
            for (uint32_t h = 0; h < 65536; ++h) {
              if ((h & F.exp_mask) == F.exp_mask) continue;
              require_forth(c, F, F.key_from(static_cast<uint16_t>(h)));
            }
          }};
}

Case ties(const Format& F) {
  return {"ties to even between every pair of neighbours, and the floats just beside each midpoint",
          [&F](Check& c) {
            c.input(std::string("for each pair of neighbouring finite ") + F.name +
                    " values a < b (both signs, up to the largest finite and inf): their midpoint (a tie) and the "
                    "floats just below and above it");
            for (uint32_t h = 0; h <= F.max_finite; ++h)
              for (uint32_t sign : {0u, 0x8000u}) {
                const double a = F.key_from(static_cast<uint16_t>(h | sign)),
                             b = h == F.max_finite ? a + (a - F.key_from(static_cast<uint16_t>((h - 1) | sign)))
                                                   : F.key_from(static_cast<uint16_t>((h + 1) | sign));
                const float mid = static_cast<float>((a + b) / 2);  // exact in float32
                if (!std::isfinite(mid)) continue;
                require_forth(c, F, mid);
                require_forth(c, F, std::nextafter(mid, 0.0f));
                require_forth(c, F, std::nextafter(mid, sign ? -INFINITY : INFINITY));
              }
          },
          2};
}

Case edges(const Format& F, std::vector<float> values, const std::string& which) {
  return {"overflow, infinities, NaN (with payloads) and the subnormal edges", [&F, values, which](Check& c) {
            c.input(which);
            for (float f : values) require_forth(c, F, f);
          }};
}

// n float32 bit patterns drawn uniformly: every exponent, NaN payloads and float32 subnormals.
Case random_bits(const Format& F, uint64_t stream) {
  return {"200000 random float32 bit patterns (all of float32: huge, tiny, NaN payloads, subnormals)",
          [&F, stream](Check& c) {
            std::mt19937_64 gen(input_seed(stream));
            c.input("f = float32 bit patterns drawn uniformly");
            for (int i = 0; i < 200000; ++i) require_forth(c, F, float_of(static_cast<uint32_t>(gen() >> 32)));
          }};
}

// Floats sign x 2^e x (1 + u) with e in [lo, hi]: where the format's range ends.
Case random_range(const Format& F, uint64_t stream, int lo, int hi) {
  return {"200000 random floats from 2^" + std::to_string(lo) + " to 2^" + std::to_string(hi + 1) +
              " (normals, subnormals, overflow)",
          [&F, stream, lo, hi](Check& c) {
            std::mt19937_64 gen(input_seed(stream));
            c.input("f = sign x 2^e x (1 + u), e uniform in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                    "], u uniform in [0, 1) with 23 random bits");
            for (int i = 0; i < 200000; ++i) {
              const uint64_t r = gen();
              const int e = lo + static_cast<int>(r % static_cast<uint64_t>(hi - lo + 1));
              const float u = static_cast<float>((r >> 20) & 0x7fffffu) * 0x1p-23f;
              const float f = std::ldexp(1.0f + u, e);
              require_forth(c, F, (r >> 63) ? -f : f);
            }
          }};
}

// ---- Task 12.3: the scaler beside optim::GradScaler ----------------------------------------
enum class Kind { Clean, Inf, NaN, Overflow, UnscaleFirst };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Clean: return "clean";
    case Kind::Inf: return "inf in a gradient";
    case Kind::NaN: return "NaN in a gradient";
    case Kind::Overflow: return "gradients near 2^112 (overflow when the scale is large)";
    case Kind::UnscaleFirst: return "clean, unscale_() before step() (as before clipping)";
  }
  return "?";
}

struct Schedule {
  lab12::ScalerOptions options;
  std::vector<Kind> steps;
  uint64_t stream = 0;  // the values' generator
};

std::string options_str(const lab12::ScalerOptions& o) {
  return "init_scale " + g9(o.init_scale) + ", growth_factor " + num(o.growth_factor) + ", backoff_factor " +
         num(o.backoff_factor) + ", growth_interval " + std::to_string(o.growth_interval);
}

// A schedule drawn at random: the options, and n steps with at least one of each kind.
Schedule draw_schedule(uint64_t stream, int n) {
  std::mt19937_64 gen(input_seed(stream));
  Schedule s;
  s.stream = stream;
  s.options.init_scale = std::ldexp(1.0, 8 + static_cast<int>(gen() % 12));
  const double growth[] = {2.0, 4.0, 1.5}, backoff[] = {0.5, 0.25, 0.75};
  s.options.growth_factor = growth[gen() % 3];
  s.options.backoff_factor = backoff[gen() % 3];
  s.options.growth_interval = 1 + static_cast<int64_t>(gen() % 4);
  for (int i = 0; i < n; ++i) {
    const uint64_t r = gen() % 10;
    s.steps.push_back(r == 0   ? Kind::Inf
                      : r == 1 ? Kind::NaN
                      : r <= 3 ? Kind::Overflow
                      : r == 4 ? Kind::UnscaleFirst
                               : Kind::Clean);
  }
  const Kind each[] = {Kind::Inf, Kind::NaN, Kind::Overflow, Kind::UnscaleFirst};
  for (size_t k = 0; k < 4; ++k) s.steps[static_cast<size_t>(gen() % static_cast<uint64_t>(n))] = each[k];
  return s;
}

// One side of the comparison: two parameters, SGD, and a loss sum(w x) + sum(v y) whose gradients
// are x and y (times the scale).
struct Side {
  Tensor w, v;
  std::unique_ptr<optim::SGD> opt;
  explicit Side(uint64_t stream) {
    w = randn_seeded({6}, stream + 1).requires_grad_();
    v = randn_seeded({3}, stream + 2).requires_grad_();
    opt = std::make_unique<optim::SGD>(std::vector<Tensor>{w, v}, optim::SGDOptions(1e-3).momentum(0.5));
  }
};

// "WHERE raised gs::Error: MESSAGE (CONTEXT)". Under the instructor's inputs only the text before
// the first ':' is shown, so WHERE names the call and CONTEXT (which may hold input values) comes
// last. A starter stub's error is passed on (the task then reads "not implemented yet").
std::string student_raised(const std::string& where, const Error& e, const std::string& context = "") {
  if (not_implemented_task(e.what()).first != 0) throw e;
  return where + " raised gs::Error: " + e.what() + (context.empty() ? "" : " (" + context + ")");
}

// Runs `check`; its failure then reads "LABEL: at AT, <its message>" (the step and its kind after
// the first ':', so that they stay hidden with the instructor's inputs).
void at_step(const std::string& label, const std::string& at, const std::function<void()>& check) {
  try {
    check();
  } catch (CaseFailed& f) {
    f.message = label + ": at " + at + ", " + f.message;
    throw;
  }
}

// Runs the schedule on optim::GradScaler and on the student's LossScaler, comparing after every
// step: whether the step ran, the scale, the growth tracker, the unscaled gradients (when unscale_
// ran first) and the parameters.
void run_schedule(Check& c, const Schedule& s) {
  std::string steps;
  for (size_t t = 0; t < s.steps.size(); ++t) steps += (t ? ", " : "") + std::string(kind_name(s.steps[t]));
  c.input(options_str(s.options) + "; " + std::to_string(s.steps.size()) + " steps: " + steps);
  Side ref(s.stream), mine(s.stream);
  optim::GradScaler key(optim::GradScalerOptions()
                            .init_scale(s.options.init_scale)
                            .growth_factor(s.options.growth_factor)
                            .backoff_factor(s.options.backoff_factor)
                            .growth_interval(s.options.growth_interval));
  std::unique_ptr<lab12::LossScaler> scaler;
  try {
    scaler = std::make_unique<lab12::LossScaler>(s.options);
  } catch (const Error& e) {
    c.fail(student_raised("LossScaler(options)", e, options_str(s.options)));
  }
  c.require_near(scaler->get_scale(), key.get_scale(), 0.0, "get_scale() before the first step");
  std::mt19937_64 gen(input_seed(s.stream + 3));
  std::normal_distribution<float> normal;
  for (size_t t = 0; t < s.steps.size(); ++t) {
    const Kind k = s.steps[t];
    const std::string at = "step " + std::to_string(t) + " (" + kind_name(k) + ")";
    std::vector<float> xs(6), ys(3);
    for (float& x : xs) x = normal(gen);
    for (float& y : ys) y = normal(gen);
    if (k == Kind::Overflow)
      for (float& x : xs) x = std::ldexp(x, 112);
    if (k == Kind::Inf) xs[gen() % 6] = (gen() & 1) ? INFINITY : -INFINITY;
    if (k == Kind::NaN) ys[gen() % 3] = NAN;
    const Tensor x = tensor(xs, {6}), y = tensor(ys, {3});

    ref.opt->zero_grad();
    key.scale((ref.w * x).sum() + (ref.v * y).sum()).backward();
    if (k == Kind::UnscaleFirst) key.unscale_(*ref.opt);
    const bool ref_stepped = key.step(*ref.opt);
    const Tensor ref_gw = ref.w.grad().clone(), ref_gv = ref.v.grad().clone();
    const double before = key.get_scale();
    key.update();

    bool stepped = false;
    mine.opt->zero_grad();
    try {
      scaler->scale((mine.w * x).sum() + (mine.v * y).sum()).backward();
    } catch (const Error& e) {
      c.fail(student_raised("scale(loss).backward()", e, at));
    }
    if (k == Kind::UnscaleFirst) {
      try {
        scaler->unscale_(*mine.opt);
      } catch (const Error& e) {
        c.fail(student_raised("unscale_(opt)", e, at));
      }
      at_step("the gradients after unscale_", at, [&] {
        c.require(mine.w.grad().defined() && mine.v.grad().defined(), "unscale_ cleared a gradient");
        c.require_close(mine.w.grad(), ref_gw, "w's gradient (expected the true one)", 1e-6, 0.0);
        c.require_close(mine.v.grad(), ref_gv, "v's gradient (expected the true one)", 1e-6, 0.0);
      });
    }
    try {
      stepped = scaler->step(*mine.opt);
    } catch (const Error& e) {
      c.fail(student_raised(k == Kind::UnscaleFirst ? "step(opt) after unscale_(opt)" : "step(opt)", e, at));
    }
    if (stepped != ref_stepped)
      c.fail("step(): at " + at + " it returned " + (stepped ? "true" : "false") + ", expected " +
             (ref_stepped ? "true" : "false") +
             (ref_stepped ? ": every gradient was finite after unscaling, so the step runs"
                          : ": a gradient was inf or NaN (" +
                                std::string(k == Kind::Overflow ? "scale x 2^112 overflowed float32"
                                                                : "look at both parameters, NaN included") +
                                "), so the step is skipped"));
    if (ref_stepped && k != Kind::UnscaleFirst) {
      at_step("the gradients after step()", at, [&] {
        c.require_close(mine.w.grad(), ref_gw, "w's gradient (unscaled: the true one)", 1e-6, 0.0);
        c.require_close(mine.v.grad(), ref_gv, "v's gradient (unscaled: the true one)", 1e-6, 0.0);
      });
    }
    try {
      scaler->update();
    } catch (const Error& e) {
      c.fail(student_raised("update()", e, at));
    }
    const double want = key.get_scale(), got = scaler->get_scale();
    if (got != want && !(std::abs(got - want) <= 1e-6 * want))
      c.fail("get_scale() after update(): at " + at + " it is " + g9(got) + ", expected " + g9(want) + " (it was " +
             g9(before) +
             (ref_stepped ? "; it grows by growth_factor after growth_interval clean steps in a row, unless that is "
                            "inf in float32, and stays otherwise)"
                          : "; an inf/NaN gradient multiplies it by backoff_factor)"));
    at_step("get_growth_tracker() after update()", at, [&] {
      c.require_eq(scaler->get_growth_tracker(), key.get_growth_tracker(),
                   "clean steps in a row since the scale changed");
    });
    at_step("the parameters after the step", at, [&] {
      c.require_close(mine.w.detach(), ref.w.detach(), "w", 1e-5, 0.0);
      c.require_close(mine.v.detach(), ref.v.detach(), "v", 1e-5, 0.0);
    });
  }
}

Case schedule_case(const std::string& name, std::function<Schedule()> make, int weight = 2) {
  return {name, [make](Check& c) { run_schedule(c, make()); }, weight};
}

// A scaler and an optimizer whose parameter has a (scaled) gradient, for the misuse checks.
struct Misuse {
  Tensor p = tensor({1.0, 2.0}, {2}).requires_grad_();
  optim::SGD opt{std::vector<Tensor>{p}, optim::SGDOptions(0.1)};
  lab12::LossScaler scaler;
  Misuse() { scaler.scale((p * 3.0).sum()).backward(); }
};

// ---- Task 12.4: the engine's autocast decision -------------------------------------------
// What the engine casts a `input` input of `op` to under autocast(ac); nullopt when it refuses.
std::optional<DType> key_autocast(const std::string& op, DType input, DType ac) {
  if (!is_reduced_float(ac)) return std::nullopt;
  const AutocastRule* rule = find_autocast_rule(op);
  if (rule == nullptr) return input;
  auto on = gs::autocast(ac);
  try {
    detail::AutocastScope scope(rule->op);
    return scope.cast(zeros({1}, TensorOptions(input))).dtype();
  } catch (const Error&) {
    return std::nullopt;
  }
}

const DType kAllDtypes[] = {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kBool};

void require_autocast(Check& c, const std::string& op, DType input, DType ac) {
  const std::optional<DType> want = key_autocast(op, input, ac);
  const std::string call = "autocast_input_dtype(\"" + op + "\", " + dtype_name(input) + ", " + dtype_name(ac) + ")";
  if (!want) {
    c.require_throws([&] { (void)lab12::autocast_input_dtype(op, input, ac); },
                     call + (is_reduced_float(ac) ? " (" + op + " is unsafe under autocast)"
                                                  : " (the autocast dtype must be float16 or bfloat16)"));
    return;
  }
  DType got;
  try {
    got = lab12::autocast_input_dtype(op, input, ac);
  } catch (const Error& e) {
    c.fail(student_raised(call, e));
  }
  if (got == *want) return;
  if (std::string(dtype_name(got)) == "?")
    c.fail(call + ": expected " + dtype_name(*want) + ", got DType value " + std::to_string(static_cast<int>(got)) +
           ", which is none of the six dtypes");
  const AutocastRule* rule = find_autocast_rule(op);
  std::string why = !is_floating(input) || input == kFloat64 ? "only float32, float16 and bfloat16 inputs are cast"
                    : rule == nullptr ? "'" + op + "' is not in the autocast table: its inputs keep their dtype"
                    : rule->policy == AutocastPolicy::LowerPrecision
                        ? "'" + op + "' is a product: it runs in the autocast dtype"
                        : "'" + op + "' is range- or accumulation-sensitive: it runs in float32";
  c.fail(call + ": expected " + dtype_name(*want) + ", got " + dtype_name(got) + " (" + why + ")");
}

std::vector<std::string> table_ops(AutocastPolicy p) {
  size_t n = 0;
  const AutocastRule* rules = autocast_rules(&n);
  std::vector<std::string> ops;
  for (size_t i = 0; i < n; ++i)
    if (rules[i].policy == p) ops.push_back(rules[i].op);
  return ops;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

Case autocast_case(const std::string& name, std::vector<std::string> ops, int weight = 1) {
  return {name,
          [ops](Check& c) {
            c.input("ops " + joined(ops) + "; every input dtype; autocast float16 and bfloat16");
            for (const std::string& op : ops)
              for (DType ac : {kFloat16, kBFloat16})
                for (DType in : kAllDtypes) require_autocast(c, op, in, ac);
          },
          weight};
}

}  // namespace

Lab make_lab12() {
  Lab lab;
  lab.number = 12;
  lab.dir = "lab12_precision";
  lab.title = "Reduced precision: float16 and bfloat16 by hand, dynamic loss scaling, the autocast policy";
  lab.starter = "tutorials/lab12_precision/lab12.cpp";

  // ---- Task 12.1 ------------------------------------------------------------------------
  const Format& h = float16();
  lab.tasks.push_back(
      {1,
       "float16 by hand",
       30,
       "lab12::float_to_half_bits(), lab12::half_bits_to_float()",
       {back_all(h), each_value(h), ties(h),
        edges(h,
              {65504.0f,
               std::nextafter(65520.0f, 0.0f),
               65520.0f,
               -65520.0f,
               1e30f,
               -1e30f,
               3.4028235e38f,
               INFINITY,
               -INFINITY,
               1.0f,
               -2.0f,
               0.1f,
               0x1p-14f,
               0x1p-14f - 0x1p-24f,
               std::nextafter(0x1p-14f, 0.0f),
               0x1p-24f,
               0x1p-25f,
               std::nextafter(0x1p-25f, 1.0f),
               3 * 0x1p-25f,
               1e-10f,
               -1e-10f,
               0x1p-149f,
               0.0f,
               -0.0f,
               float_of(0x7fc00000u),
               float_of(0xffc00000u),
               float_of(0x7f800001u),
               float_of(0x7fbfffffu),
               float_of(0xff800100u)},
              "65504, just below 65520, +-65520, +-1e30, the largest float32, +-inf, 1, -2, 0.1, 2^-14, the largest "
              "subnormal, just below 2^-14, 2^-24, 2^-25 (a tie with 0), just above 2^-25, 3 x 2^-25 (a tie), "
              "+-1e-10, the smallest float32 subnormal, +-0, NaNs with payloads high, low and in between"),
        random_bits(h, 1201), random_range(h, 1202, -30, 16)}});

  // ---- Task 12.2 ------------------------------------------------------------------------
  const Format& b = bfloat16();
  lab.tasks.push_back(
      {2,
       "bfloat16 by hand",
       15,
       "lab12::float_to_bfloat16_bits(), lab12::bfloat16_bits_to_float()",
       {back_all(b), each_value(b), ties(b),
        edges(b,
              {3.3895314e38f,
               3.4028235e38f,
               -3.4028235e38f,
               float_of(0x7f7f7fffu),
               float_of(0x7f7f8000u),
               float_of(0x7f7f8001u),
               INFINITY,
               -INFINITY,
               1.0f,
               0.1f,
               -3.14159265f,
               float_of(0x3f808000u),
               float_of(0x3f818000u),
               0x1p-126f,
               0x1p-133f,
               0x1p-149f,
               float_of(0x00008000u),
               float_of(0x00018000u),
               float_of(0x00007fffu),
               0.0f,
               -0.0f,
               float_of(0x7fc00000u),
               float_of(0x7f800001u),
               float_of(0xff800001u),
               float_of(0x7f80ffffu),
               float_of(0x7fffffffu)},
              "the largest finite bfloat16, the largest float32 (+-), the floats around the midpoint to inf, +-inf, "
              "1, 0.1, -pi, the ties 1 + 2^-8 (to even: down) and 1 + 3 x 2^-8 (up), 2^-126, 2^-133, 2^-149, "
              "float32 subnormals at and around a tie, +-0, NaNs whose payload is only in the low 16 bits"),
        random_bits(b, 1211), random_range(b, 1212, -140, 127)}});

  // ---- Task 12.3 ------------------------------------------------------------------------
  lab.tasks.push_back(
      {3,
       "a dynamic loss scaler",
       40,
       "lab12::LossScaler",
       {{"defaults: scale 2^16; scale(loss) is differentiable",
         [](Check& c) {
           c.input("LossScaler() (default options); x = [0.5, -1, 2] (requires grad), loss = sum(x^2)");
           lab12::LossScaler s;
           c.require_near(s.get_scale(), 65536.0, 0.0, "get_scale() of a new scaler");
           c.require_eq(s.get_growth_tracker(), 0, "get_growth_tracker() of a new scaler");
           const Tensor x = tensor({0.5, -1.0, 2.0}, {3}).requires_grad_();
           const Tensor loss = (x * x).sum();
           const Tensor scaled = s.scale(loss);
           c.require_tensor(scaled, loss.shape(), "scale(loss)");
           c.require_near(scaled.item<double>(), 65536.0 * 5.25, 0.0, "scale(loss) for loss 5.25");
           c.require(scaled.requires_grad(),
                     "scale(loss) does not require grad: compute it with a tensor op (loss * scale), not from "
                     "item()");
           scaled.backward();
           c.require(x.grad().defined(), "backward of scale(loss) gave x no gradient");
           c.require_close(x.grad(), tensor({65536.0, -131072.0, 262144.0}, {3}),
                           "x's gradient after scale(loss).backward() (scale x 2x)", 0.0, 0.0);
         }},
        {"options out of range are refused",
         [](Check& c) {
           c.input(
               "init_scale 0, -1, inf, 1e39 (inf in float32); growth_factor 1, 0.5, inf; backoff_factor 0, 1, "
               "1.5; growth_interval 0, -3");
           auto bad = [&](const std::string& what, auto set) {
             lab12::ScalerOptions o;
             set(o);
             c.require_throws([&] { lab12::LossScaler s(o); }, "LossScaler with " + what);
           };
           for (double v : {0.0, -1.0, static_cast<double>(INFINITY), 1e39})
             bad("init_scale " + g9(v), [v](lab12::ScalerOptions& o) { o.init_scale = v; });
           for (double v : {1.0, 0.5, static_cast<double>(INFINITY)})
             bad("growth_factor " + g9(v), [v](lab12::ScalerOptions& o) { o.growth_factor = v; });
           for (double v : {0.0, 1.0, 1.5})
             bad("backoff_factor " + g9(v), [v](lab12::ScalerOptions& o) { o.backoff_factor = v; });
           for (int64_t v : {int64_t{0}, int64_t{-3}})
             bad("growth_interval " + std::to_string(v), [v](lab12::ScalerOptions& o) { o.growth_interval = v; });
           lab12::ScalerOptions ok;
           ok.init_scale = 3.0, ok.growth_factor = 1.01, ok.backoff_factor = 0.99, ok.growth_interval = 1;
           try {
             lab12::LossScaler s(ok);
           } catch (const Error& e) {
             c.fail(student_raised("LossScaler(valid options)", e, options_str(ok)));
           }
         }},
        {"misuse is refused: unscale_ twice, unscale_ after step, step twice, update without a step",
         [](Check& c) {
           c.input("one parameter with a scaled gradient, SGD(lr 0.1)");
           {
             Misuse m;
             m.scaler.unscale_(m.opt);
             c.require_throws([&] { m.scaler.unscale_(m.opt); }, "a second unscale_(opt) before update()");
           }
           {
             Misuse m;
             m.scaler.step(m.opt);
             c.require_throws([&] { m.scaler.unscale_(m.opt); }, "unscale_(opt) after step(opt)");
           }
           {
             Misuse m;
             m.scaler.step(m.opt);
             c.require_throws([&] { m.scaler.step(m.opt); }, "a second step(opt) before update()");
           }
           {
             Misuse m;
             m.scaler.step(m.opt);
             m.scaler.update();
             c.require_throws([&] { m.scaler.update(); }, "update() with no step() since the last update()");
           }
         }},
        schedule_case("default options: 6 clean steps, an inf, 3 clean steps",
                      [] {
                        Schedule s;
                        s.stream = 1230;
                        s.steps = {Kind::Clean, Kind::Clean, Kind::Clean, Kind::Clean, Kind::Clean,
                                   Kind::Clean, Kind::Inf,   Kind::Clean, Kind::Clean, Kind::Clean};
                        return s;
                      }),
        schedule_case("growth stops below float32's inf: init_scale 2^126, growth_factor 4, growth_interval 1",
                      [] {
                        Schedule s;
                        s.stream = 1231;
                        s.options.init_scale = 0x1p126;
                        s.options.growth_factor = 4.0;
                        s.options.growth_interval = 1;
                        s.steps = {Kind::Clean, Kind::Clean, Kind::NaN, Kind::Clean, Kind::Clean, Kind::Clean};
                        return s;
                      }),
        schedule_case(
            "a schedule of 30 steps drawn at random (1)", [] { return draw_schedule(1232, 30); }, 3),
        schedule_case(
            "a schedule of 30 steps drawn at random (2)", [] { return draw_schedule(1233, 30); }, 3),
        schedule_case(
            "a schedule of 40 steps drawn at random (3)", [] { return draw_schedule(1234, 40); }, 3)}});

  // ---- Task 12.4 ------------------------------------------------------------------------
  const std::vector<std::string> unlisted = {"relu", "tanh",    "sigmoid",   "gelu", "add",     "mul",
                                             "sub",  "div",     "sqrt",      "abs",  "dropout", "embedding",
                                             "max",  "reshape", "transpose", "clamp"};
  lab.tasks.push_back(
      {4,
       "the autocast policy",
       15,
       "lab12::autocast_input_dtype()",
       {autocast_case("the products: lower precision", table_ops(AutocastPolicy::LowerPrecision)),
        autocast_case("the range- and accumulation-sensitive ops: float32", table_ops(AutocastPolicy::Float32), 2),
        autocast_case("the unsafe op is refused", table_ops(AutocastPolicy::Refuse)),
        autocast_case("ops not in the table keep their dtype", unlisted),
        {"an autocast dtype that is not 16-bit is refused", [](Check& c) {
           c.input("autocast dtype float32, float64, int64 with matmul, softmax and relu");
           for (const char* op : {"matmul", "softmax", "relu"})
             for (DType ac : {kFloat32, kFloat64, kInt64}) require_autocast(c, op, kFloat32, ac);
         }}}});
  return lab;
}

}  // namespace gradsleuth::labs
